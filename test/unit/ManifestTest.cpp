//===- ManifestTest.cpp - the manifest's bounds and their error messages ---===//
//
// Manifest::fromJson reads files a user (or an attacker with the user's
// rights) may have edited: every field is checked against limits:: before
// the runtime sizes arrays, loops or divides by it. Crafted manifests are
// rejected with the bad field's name; random edits of a valid one are
// either rejected or evaluate, at the largest M and S, without overflow
// (built with UBSan, which stops on one).
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/Manifest.h"

#include "Expect.h"

#include <climits>
#include <iterator>
#include <random>
#include <string>

using namespace mhc;

static Manifest valid() {
  Manifest m;
  m.spec = "aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a";
  m.hash = "0123456789abcdef";
  m.arch = "sm_90a";
  m.compiler = "mhc 0.1.0, MLIR 22.1.8";
  m.split = SplitRule{128, 264, 64, 264};
  m.buffers.push_back({"x", DType::BF16, BufferRole::Input, {256, 0, 0}});
  m.buffers.push_back({"y", DType::BF16, BufferRole::Output, {64, 0, 0}});
  m.buffers.push_back({"ws", DType::F32, BufferRole::Workspace, {0, 16, 24}});
  LaunchDesc main, reduce;
  main.entry = "k_main";
  main.params = {"tmap:x", "x", "ws", "M", "S"};
  main.grid = GridRule{128, 0, true};
  main.dynamicSharedBytes = 100000;
  reduce.entry = "k_reduce";
  reduce.params = {"ws", "y", "M", "S"};
  reduce.grid.itemsPerToken = 64;
  reduce.grid.itemsPerBlock = 256;
  reduce.grid.minTokens = 2;
  reduce.grid.maxTokens = 1000;
  LaunchDesc coop; // a cooperative launch with the runtime's sync words
  coop.entry = "k_one";
  coop.params = {"x", "y", "M", "sync"};
  coop.grid.fixedBlocks = 132;
  coop.cooperative = true;
  coop.programmatic = true;
  m.launches = {main, reduce, coop};
  return m;
}

/// fromJson's error for `json`, or "" when it is accepted.
static std::string errorOf(const std::string &json) {
  Manifest out;
  std::string error;
  return Manifest::fromJson(json, out, error) ? "" : error;
}

/// `json` with the first `from` replaced by `to` (which must be there).
static std::string edit(std::string json, const std::string &from,
                        const std::string &to) {
  size_t at = json.find(from);
  EXPECT(at != std::string::npos);
  return at == std::string::npos ? json : json.replace(at, from.size(), to);
}

/// Rejected, with an error that names `field`.
static bool rejects(const std::string &json, const std::string &field) {
  std::string error = errorOf(json);
  if (error.find("'" + field + "'") != std::string::npos)
    return true;
  std::fprintf(stderr, "expected an error naming '%s', got: %s\n",
               field.c_str(), error.empty() ? "(accepted)" : error.c_str());
  return false;
}

static void acceptsWhatToJsonWrites() {
  Manifest back;
  std::string error;
  EXPECT(Manifest::fromJson(valid().toJson(), back, error));
  EXPECT(back.toJson() == valid().toJson());
  EXPECT(error.empty());
  // "cooperative" is written only where set; "sync" takes a descriptor.
  EXPECT(back.launches[2].cooperative && !back.launches[0].cooperative);
  EXPECT(Manifest::ptxParamCount(back.launches[2]) == 5 + 5 + 1 + 5);
  std::string json = valid().toJson();
  EXPECT(json.find("\"cooperative\": true") != std::string::npos);
  EXPECT(json.find("\"cooperative\"") == json.rfind("\"cooperative\""));
  EXPECT(rejects(edit(json, "\"cooperative\": true", "\"cooperative\": 1"),
                 "launches[2].cooperative"));
  // "pdl" (programmatic dependent launch) likewise.
  EXPECT(back.launches[2].programmatic && !back.launches[0].programmatic);
  EXPECT(json.find("\"pdl\": true") != std::string::npos);
  EXPECT(json.find("\"pdl\"") == json.rfind("\"pdl\""));
  EXPECT(rejects(edit(json, "\"pdl\": true", "\"pdl\": 1"), "launches[2].pdl"));
}

// The reproductions: a division by zero, a loop of 1e17 splits, an
// out-of-range float cast to int64, a parameter list past the launcher's.
static void rejectsTheReportedTampering() {
  std::string json = valid().toJson();
  EXPECT(rejects(edit(json, "\"tokens_per_block\": 128, \"target", "\"tokens_per_block\": 0, \"target"),
                 "split.tokens_per_block"));
  EXPECT(rejects(edit(json, "\"max\": 64", "\"max\": 1e17"), "split.max"));
  EXPECT(rejects(edit(json, "\"per_token\": 256", "\"per_token\": 1e300"),
                 "buffers[0].elems.per_token"));
  EXPECT(rejects(edit(json, "\"per_token\": 256", "\"per_token\": -1e300"),
                 "buffers[0].elems.per_token"));
  EXPECT(rejects(edit(json, "\"per_token\": 256", "\"per_token\": 1e999"),
                 "buffers[0].elems.per_token"));
  EXPECT(rejects(edit(json, "\"per_token\": 256", "\"per_token\": 2.5"),
                 "buffers[0].elems.per_token"));
  Manifest wide = valid();
  for (int i = 0; i <= limits::kMaxBuffers; ++i) // past kMaxPtxParams
    wide.launches[1].params.push_back("y");
  EXPECT(rejects(wide.toJson(), "launches[1].params"));
  Manifest many = valid();
  for (int i = 0; many.buffers.size() <= size_t(limits::kMaxBuffers); ++i)
    many.buffers.push_back({"b" + std::to_string(i), DType::F32,
                            BufferRole::Workspace, {1, 0, 0}});
  EXPECT(rejects(many.toJson(), "buffers"));
}

static void rejectsEachBadField() {
  std::string json = valid().toJson();
  EXPECT(rejects(edit(json, "\"wave_slots\": 264", "\"wave_slots\": 100000"), "split.wave_slots"));
  EXPECT(rejects(edit(json, "\"target_blocks\": 264", "\"target_blocks\": -1"), "split.target_blocks"));
  EXPECT(rejects(edit(json, "\"fixed\": 16", "\"fixed\": 1e15"), "buffers[2].elems.fixed"));
  EXPECT(rejects(edit(json, "\"per_token_split\": 24", "\"per_token_split\": 1e6"),
                 "buffers[2].elems.per_token_split"));
  EXPECT(rejects(edit(json, "\"block\": [256, 1, 1]", "\"block\": [0, 1, 1]"), "launches[0].block[0]"));
  EXPECT(rejects(edit(json, "\"block\": [256, 1, 1]", "\"block\": [2048, 1, 1]"), "launches[0].block[0]"));
  EXPECT(rejects(edit(json, "\"block\": [256, 1, 1]", "\"block\": [256, 2, 1]"), "launches[0].block[1]"));
  EXPECT(rejects(edit(json, "\"block\": [256, 1, 1]", "\"block\": [256]"), "launches[0].block"));
  EXPECT(rejects(edit(json, "\"dynamic_shared_bytes\": 100000", "\"dynamic_shared_bytes\": 1e9"),
                 "launches[0].dynamic_shared_bytes"));
  EXPECT(rejects(edit(json, "\"items_per_block\": 256", "\"items_per_block\": 0"),
                 "launches[1].grid.items_per_block"));
  EXPECT(rejects(edit(json, "\"min_tokens\": 2", "\"min_tokens\": 1e30"), "launches[1].grid.min_tokens"));
  EXPECT(rejects(edit(json, "\"max_tokens\": 1000", "\"max_tokens\": -1"), "launches[1].grid.max_tokens"));
  EXPECT(rejects(edit(json, "\"times_split\": true", "\"times_split\": 1"), "launches[0].grid.times_split"));
  EXPECT(rejects(edit(json, "\"fixed_blocks\": 0", "\"fixed_blocks\": 4294967296"),
                 "launches[0].grid.fixed_blocks"));
  EXPECT(rejects(edit(json, "\"ptx_params\": 13", "\"ptx_params\": 12"), "launches[0].ptx_params"));
  EXPECT(rejects(edit(json, "\"grid\": {", "\"grid_\": {"), "launches[0].grid"));
  EXPECT(rejects(edit(json, "\"entry\": \"k_main\"", "\"entry\": \"k main\""), "launches[0].entry"));
  EXPECT(rejects(edit(json, "\"entry\": \"k_main\"", "\"entry\": 7"), "launches[0].entry"));
  EXPECT(rejects(edit(json, "\"params\": [\"tmap:x\"", "\"params\": [\"nothing\""), "launches[0].params[0]"));
  EXPECT(rejects(edit(json, "\"tmap:x\"", "\"tmap0:x\""), "launches[0].params[0]"));
  EXPECT(rejects(edit(json, "\"tmap:x\"", "\"tmap:ws\""), "launches[0].params[0]"));
  EXPECT(rejects(edit(json, "\"name\": \"y\"", "\"name\": \"x\""), "buffers[1].name"));
  EXPECT(rejects(edit(json, "\"name\": \"y\"", "\"name\": \"M\""), "buffers[1].name"));
  EXPECT(rejects(edit(json, "\"dtype\": \"bf16\"", "\"dtype\": \"f64\""), "buffers[0].dtype"));
  EXPECT(rejects(edit(json, "\"role\": \"input\"", "\"role\": \"both\""), "buffers[0].role"));
  EXPECT(rejects(edit(json, "\"hash\": \"0123456789abcdef\"", "\"hash\": \"0123456789abcdef0\""), "hash"));
  EXPECT(rejects(edit(json, "\"compiler\": \"mhc", "\"compiler\": \"\\n mhc"), "compiler"));
  EXPECT(rejects(edit(json, "\"launches\": [", "\"launches\": 3, \"_\": ["), "launches"));
  EXPECT(rejects(edit(json, "\"spec\": \"aggregate.fwd", "\"spec\": \"nothing.fwd"), "spec"));
  Manifest maps = valid();
  maps.launches[0].params.assign(limits::kMaxTensorMaps + 1, "tmap:x");
  EXPECT(rejects(maps.toJson(), "launches[0].params"));
  Manifest none = valid();
  none.launches.clear();
  EXPECT(rejects(none.toJson(), "launches"));
  EXPECT(errorOf(edit(json, "\"format\": 2", "\"format\": 3")).find("format") != std::string::npos);
  EXPECT(!errorOf("[]").empty());
}

// Within the limits, every formula evaluates at the largest M and S with no
// int64 overflow (UBSan would stop the test).
static void formulasHoldAtTheLimits() {
  const int64_t M = limits::kMaxTokens, S = limits::kSplit.max;
  Extent e{limits::kPerToken.max, limits::kFixedElems.max, limits::kPerTokenSplit.max};
  __int128 exact = __int128(e.perToken) * M + e.fixed + __int128(e.perTokenSplit) * M * S;
  EXPECT(exact <= INT64_MAX && e.at(M, S) == static_cast<int64_t>(exact));
  GridRule items;
  items.itemsPerToken = limits::kPerToken.max;
  items.itemsPerBlock = 1;
  items.timesSplit = true;
  EXPECT(items.blocksFor(M, S) > limits::kMaxGridBlocks); // refused, not wrapped
  SplitRule split{1, limits::kBlocks.max, limits::kSplit.max, limits::kWaveSlots.max};
  for (int64_t m : {int64_t(1), int64_t(1000), int64_t(1) << 20, M}) {
    int64_t s = split.splitFor(m);
    EXPECT(s >= 1 && s <= limits::kSplit.max);
  }
}

/// Random numbers in random integer fields of a valid manifest: each result
/// is rejected, or its formulas evaluate without overflow.
static void randomEditsAreSafe() {
  std::mt19937_64 rng(33);
  const std::string json = valid().toJson();
  const char *values[] = {"0", "1", "-1", "255", "256", "1024", "1025", "65536",
                          "16777216", "16777217", "2147483647", "2147483648",
                          "68719476736", "1099511627776", "9.2e18", "1e300",
                          "-9.3e18", "0.5", "1e-300"};
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text = json;
    for (int edits = 1 + rng() % 3; edits > 0; --edits) {
      size_t at = rng() % text.size();
      size_t digit = text.find_first_of("0123456789", at);
      if (digit == std::string::npos)
        continue;
      size_t end = text.find_first_not_of("0123456789", digit);
      text.replace(digit, end - digit, values[rng() % std::size(values)]);
    }
    Manifest m;
    std::string error;
    if (!Manifest::fromJson(text, m, error)) {
      EXPECT(!error.empty());
      continue;
    }
    ++accepted;
    for (int64_t M : {int64_t(1), int64_t(4097), limits::kMaxTokens}) {
      int64_t S = m.split.splitFor(M);
      EXPECT(S >= 1 && S <= m.split.largest());
      for (const BufferDesc &b : m.buffers)
        EXPECT(b.elems.at(M, S) >= 0);
      for (const LaunchDesc &l : m.launches)
        EXPECT(l.grid.blocksFor(M, S) >= 0);
    }
  }
  EXPECT(accepted > 0);
}

/// Tensor-map parameters: what each form maps, and the forms refused.
static void tensorMapShapes() {
  TensorMapShape s;
  EXPECT(parseTensorMapShape("tmap:x", s) && s.rows == 64 && s.every == 1 && s.width == 64 &&
         s.swizzled);
  EXPECT(parseTensorMapShape("tmap16:x", s) && s.rows == 16 && s.first == 0 && s.swizzled);
  TensorMapShape odd;
  EXPECT(parseTensorMapShape("tmap8,2,1:x", odd) && odd.rows == 8 && odd.every == 2 &&
         odd.first == 1 && odd.width == 64 && odd.swizzled);
  TensorMapShape wide;
  EXPECT(parseTensorMapShape("tmap4,4,3,136:gx", wide) && wide.every == 4 && wide.first == 3 &&
         wide.width == 136 && !wide.swizzled);
  EXPECT(std::string(tensorMapBuffer("tmap4,4,3,136:gx")) == "gx");
  TensorMapShape granular;
  EXPECT(parseTensorMapShape("tmap4,4,3,320,64:x", granular) && granular.width == 320 &&
         granular.granule == 64 && !granular.swizzled && wide.granule == 0);
  for (const char *bad : {"tmap8,2:x", "tmap8,,1:x", "tmap8,2,1,:x", "tmap1,2,1,4,8,6:x",
                          "tmap8,2,1,320,0:x", "tmap12345:x", "tmapx:x"}) {
    TensorMapShape t;
    EXPECT(!parseTensorMapShape(bad, t));
  }
  std::string json = valid().toJson();
  EXPECT(errorOf(edit(json, "\"tmap:x\"", "\"tmap8,2,1,136:x\"")).empty());
  EXPECT(rejects(edit(json, "\"tmap:x\"", "\"tmap8,2,2:x\""), "launches[0].params[0]"));
  EXPECT(rejects(edit(json, "\"tmap:x\"", "\"tmap8,17,1:x\""), "launches[0].params[0]"));
  EXPECT(rejects(edit(json, "\"tmap:x\"", "\"tmap8,2,1,132:x\""), "launches[0].params[0]"));
  EXPECT(rejects(edit(json, "\"tmap:x\"", "\"tmap8,2,1,264:x\""), "launches[0].params[0]"));
  EXPECT(rejects(edit(json, "\"tmap:x\"", "\"tmap8,2:x\""), "launches[0].params[0]"));
  EXPECT(errorOf(edit(json, "\"tmap:x\"", "\"tmap8,2,1,320,64:x\"")).empty());
  for (const char *bad : {"tmap8,2,1,320,60:x", "tmap8,2,1,330,64:x", "tmap8,2,1,2056,8:x",
                          "tmap8,2,1,0,64:x"})
    EXPECT(rejects(edit(json, "\"tmap:x\"", std::string("\"") + bad + "\""),
                   "launches[0].params[0]"));
}

int main() {
  tensorMapShapes();
  acceptsWhatToJsonWrites();
  rejectsTheReportedTampering();
  rejectsEachBadField();
  formulasHoldAtTheLimits();
  randomEditsAreSafe();
  return summary();
}
