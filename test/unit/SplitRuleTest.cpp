//===- SplitRuleTest.cpp - split-K count and grid size as functions of M --===//
//
// The split S of a split-K launch fixes the order of the partial sums, so it
// must depend on M alone; where the manifest gives wave slots, S fills the
// waves of the flagship part's SMs (the smallest S filling at least 90% of
// its waves, else the fullest). A launch's grid is a function of M and S,
// empty below its min_tokens (a launch only larger M needs) and past its
// max_tokens (a variant for small M).
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/Manifest.h"

#include "Expect.h"

using namespace mhc;

static SplitRule rule(int64_t tokensPerBlock, int64_t targetBlocks,
                      int64_t maxSplit, int64_t waveSlots) {
  SplitRule r;
  r.tokensPerBlock = tokensPerBlock;
  r.targetBlocks = targetBlocks;
  r.maxSplit = maxSplit;
  r.waveSlots = waveSlots;
  return r;
}

static void withoutWaves() {
  SplitRule r = rule(128, 264, 64, 0);
  EXPECT(r.splitFor(0) == 1);
  EXPECT(r.splitFor(128) == 64);   // ceil(264 / 1), capped
  EXPECT(r.splitFor(8192) == 5);   // ceil(264 / 64)
  EXPECT(r.splitFor(32768) == 2);  // ceil(264 / 256)
  EXPECT(r.splitFor(65536) == 1);
  EXPECT(rule(128, 264, 1, 264).splitFor(8192) == 1); // no split
}

// Two blocks per SM of 132 (the n <= 5 projection forward): 264 slots.
static void fillsWavesOfTwoBlocksPerSM() {
  SplitRule r = rule(128, 264, 64, 264);
  EXPECT(r.splitFor(8192) == 4);   // 256 of 264 slots: one wave, not 1.2
  EXPECT(r.splitFor(16384) == 2);  // 256 of 264
  EXPECT(r.splitFor(32768) == 1);  // 256 of 264
  EXPECT(r.splitFor(4096) == 8);   // 256 of 264
  EXPECT(r.splitFor(128) == 64);   // no S fills 90%: the fullest
  EXPECT(r.splitFor(300) == 64);
}

// One block per SM (n >= 6 with tf32): 132 slots, 256 tokens per block.
static void fillsWavesOfOneBlockPerSM() {
  SplitRule r = rule(256, 264, 64, 132);
  EXPECT(r.splitFor(8192) == 4);   // 128 of 132
  EXPECT(r.splitFor(32768) == 1);  // 128 of 132
}

// One token block takes singleBlock (the staged forward's chunks over the
// SMs once: 132 at n = 4, C = 7168, 224 chunks); two or more, the rule.
static void singleBlockSpreadsOverTheSMs() {
  SplitRule r = rule(128, 264, 64, 264);
  r.singleBlock = 132;
  EXPECT(r.splitFor(1) == 132 && r.splitFor(128) == 132);
  EXPECT(r.splitFor(129) == 64 && r.splitFor(256) == 64); // as without it
  EXPECT(r.splitFor(4096) == 8);
  EXPECT(r.largest() == 132 && rule(128, 264, 64, 264).largest() == 64);
  r.singleBlock = 16; // below maxSplit: still its S at one token block
  EXPECT(r.splitFor(100) == 16 && r.largest() == 64);
}

// A manifest of one buffer, for the launches a test adds.
static Manifest oneBufferManifest() {
  Manifest m;
  m.spec = "aggregate.fwd;n=4;act=bf16;layout=cn;C=64;arch=sm_90a";
  m.buffers.push_back({"a", DType::F32, BufferRole::Input, {1, 0, 0}});
  return m;
}

// single_block survives the manifest's JSON; absent, it reads as 0.
static void singleBlockRoundTrips() {
  Manifest m = oneBufferManifest();
  LaunchDesc main;
  main.entry = "k_main";
  main.params = {"a", "M"};
  main.grid = GridRule{1, 0};
  m.launches = {main};
  m.split = rule(128, 264, 64, 264);
  m.split.singleBlock = 132;
  std::string json = m.toJson();
  Manifest back;
  std::string error;
  EXPECT(Manifest::fromJson(json, back, error));
  EXPECT(back.split.singleBlock == 132 && back.split.splitFor(7) == 132);
  std::string old = json;
  old.erase(old.find(", \"single_block\": 132"), std::string(", \"single_block\": 132").size());
  EXPECT(Manifest::fromJson(old, back, error));
  EXPECT(back.split.singleBlock == 0 && back.split.splitFor(7) == 64);
}

// For every M: S within [1, maxSplit], and either its waves are at least
// 90% full or no S up to maxSplit fills them that well.
static void everyMRespectsTheRule() {
  for (int64_t slots : {132, 264})
    for (int64_t m = 1; m <= 70000; m += 97) {
      SplitRule r = rule(128, 264, 64, slots);
      int64_t s = r.splitFor(m), blocks = (m + 127) / 128;
      EXPECT(s >= 1 && s <= 64);
      auto filled = [&](int64_t k) {
        int64_t used = blocks * k, room = (used + slots - 1) / slots * slots;
        return 10 * used >= 9 * room;
      };
      if (!filled(s)) {
        bool any = false;
        for (int64_t k = 1; k <= 64; ++k)
          any = any || filled(k);
        EXPECT(!any);
      } else {
        for (int64_t k = 1; k < s; ++k)
          EXPECT(!filled(k));
      }
      EXPECT(r.splitFor(m) == s); // a function of M alone
    }
}

// The projection's pack launch: skipped for one token block (M <= 128).
static void gridSkipsBelowMinTokens() {
  GridRule g{0, 384};
  g.minTokens = 129;
  EXPECT(g.blocksFor(1) == 0);
  EXPECT(g.blocksFor(128) == 0);
  EXPECT(g.blocksFor(129) == 384);
  EXPECT(g.blocksFor(32768, 4) == 384);
  GridRule split{128, 0, /*timesSplit=*/true};
  EXPECT(split.blocksFor(128, 64) == 64);
  EXPECT(split.blocksFor(129, 4) == 8);
}

// The staged partial's two copies: "partial_few" up to 64 tokens, "partial"
// past them; every M runs exactly one.
static void gridSkipsPastMaxTokens() {
  GridRule few{128, 0, /*timesSplit=*/true}, plain = few;
  few.maxTokens = 64;
  plain.minTokens = 65;
  for (int64_t m : {1, 63, 64, 65, 128, 129, 4099})
    EXPECT((few.blocksFor(m, 132) > 0) != (plain.blocksFor(m, 132) > 0));
  EXPECT(few.blocksFor(64, 132) == 132);
  EXPECT(few.blocksFor(65, 132) == 0);
  EXPECT(plain.blocksFor(129, 4) == 8);
}

// min_tokens survives the manifest's JSON, and is omitted when 0.
static void minTokensRoundTrips() {
  Manifest m = oneBufferManifest();
  LaunchDesc pack, main;
  pack.entry = "k_pack";
  pack.params = {"a"};
  pack.grid = GridRule{0, 384};
  pack.grid.minTokens = 129;
  main.entry = "k_main";
  main.params = {"a", "M"};
  main.grid = GridRule{1, 0};
  m.launches = {pack, main};
  std::string json = m.toJson();
  EXPECT(json.find("\"min_tokens\": 129") != std::string::npos);
  EXPECT(json.find("\"min_tokens\"") == json.rfind("\"min_tokens\""));
  Manifest back;
  std::string error;
  EXPECT(Manifest::fromJson(json, back, error));
  EXPECT(back.launches.size() == 2);
  EXPECT(back.launches[0].grid.minTokens == 129);
  EXPECT(back.launches[1].grid.minTokens == 0);
  EXPECT(back.launches[0].grid.blocksFor(128) == 0);
  EXPECT(json.find("\"max_tokens\"") == std::string::npos);
}

// max_tokens likewise.
static void maxTokensRoundTrips() {
  Manifest m = oneBufferManifest();
  LaunchDesc few;
  few.entry = "k_partial_few";
  few.params = {"a", "M", "S"};
  few.grid = GridRule{128, 0, /*timesSplit=*/true};
  few.grid.maxTokens = 64;
  m.launches = {few};
  std::string json = m.toJson();
  EXPECT(json.find("\"max_tokens\": 64") != std::string::npos);
  Manifest back;
  std::string error;
  EXPECT(Manifest::fromJson(json, back, error));
  EXPECT(back.launches[0].grid.maxTokens == 64);
  EXPECT(back.launches[0].grid.blocksFor(65, 2) == 0);
}

int main() {
  gridSkipsBelowMinTokens();
  gridSkipsPastMaxTokens();
  minTokensRoundTrips();
  maxTokensRoundTrips();
  withoutWaves();
  fillsWavesOfTwoBlocksPerSM();
  fillsWavesOfOneBlockPerSM();
  everyMRespectsTheRule();
  singleBlockSpreadsOverTheSMs();
  singleBlockRoundTrips();
  return summary();
}
