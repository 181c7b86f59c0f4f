//===- ManifestRead.cpp - the launch manifest from its JSON text ----------===//
//
// Manifest::fromJson: every field read against its bound (limits:: in
// Manifest.h), the first failure named by its path
// ("launches[1].grid.items_per_block").
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/Manifest.h"

#include "mhc/Support/Json.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace mhc {

namespace {
using limits::Range;

bool parseDType(const std::string &s, DType &out) {
  for (DType d : {DType::BF16, DType::F16, DType::F32})
    if (s == toString(d)) {
      out = d;
      return true;
    }
  return false;
}
bool parseRole(const std::string &s, BufferRole &out) {
  for (BufferRole r : {BufferRole::Input, BufferRole::Output, BufferRole::Workspace})
    if (s == toString(r)) {
      out = r;
      return true;
    }
  return false;
}

bool isIdentifierChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool isPrintable(char c) { return c >= 0x20 && c < 0x7f; }
bool isHexDigit(char c) { return std::isxdigit(static_cast<unsigned char>(c)); }

std::string field(const std::string &path, const char *key) {
  return path.empty() ? key : path + "." + key;
}
std::string element(const std::string &path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

/// Reads manifest fields against their bounds; keeps the first failure,
/// naming the field ("launches[1].grid.items_per_block"). A failed read
/// returns a value that is safe to carry on with (a range's minimum).
class Reader {
public:
  std::string error;

  void fail(const std::string &name, const std::string &what) {
    if (error.empty())
      error = "field '" + name + "' " + what;
  }
  const json::Value *member(const json::Value *object, const std::string &path,
                            const char *key, bool required = true) {
    const json::Value *v = object ? object->get(key) : nullptr;
    if (!v && required)
      fail(field(path, key), "is missing");
    return v;
  }
  int64_t integer(const json::Value &v, const std::string &name, Range r) {
    if (!v.isNumber() || !std::isfinite(v.number) ||
        v.number != std::floor(v.number)) {
      fail(name, "is not an integer");
      return r.min;
    }
    // Compared as doubles before the cast: no out-of-range conversion.
    if (v.number < static_cast<double>(r.min) ||
        v.number > static_cast<double>(r.max)) {
      char shown[32];
      std::snprintf(shown, sizeof shown, "%.17g", v.number);
      fail(name, std::string("= ") + shown + " is outside " +
                     std::to_string(r.min) + ".." + std::to_string(r.max));
      return r.min;
    }
    return static_cast<int64_t>(v.number);
  }
  int64_t integer(const json::Value *object, const std::string &path,
                  const char *key, Range r) {
    const json::Value *v = member(object, path, key);
    return v ? integer(*v, field(path, key), r) : r.min;
  }
  /// An optional integer: `absent` when the member is not there.
  int64_t optionalInteger(const json::Value *object, const std::string &path,
                          const char *key, Range r, int64_t absent) {
    const json::Value *v = member(object, path, key, /*required=*/false);
    return v ? integer(*v, field(path, key), r) : absent;
  }
  std::string text(const json::Value &v, const std::string &name,
                   size_t minLength, size_t maxLength, bool (*allowed)(char)) {
    if (!v.isString()) {
      fail(name, "is not a string");
      return "";
    }
    if (v.string.size() < minLength || v.string.size() > maxLength) {
      fail(name, "has " + std::to_string(v.string.size()) +
                     " characters; expected " + std::to_string(minLength) +
                     ".." + std::to_string(maxLength));
      return "";
    }
    for (char c : v.string)
      if (!allowed(c)) {
        fail(name, "has a character outside its alphabet");
        return "";
      }
    return v.string;
  }
  std::string text(const json::Value *object, const std::string &path,
                   const char *key, size_t minLength, size_t maxLength,
                   bool (*allowed)(char)) {
    const json::Value *v = member(object, path, key);
    return v ? text(*v, field(path, key), minLength, maxLength, allowed) : "";
  }
  bool boolean(const json::Value *object, const std::string &path,
               const char *key) {
    const json::Value *v = member(object, path, key);
    if (v && v->kind != json::Value::Bool)
      fail(field(path, key), "is not true or false");
    return v && v->kind == json::Value::Bool && v->boolean;
  }
  /// The elements of an array member, or none after a failure.
  const std::vector<json::Value> &array(const json::Value *object,
                                        const std::string &path,
                                        const char *key, Range size) {
    static const std::vector<json::Value> none;
    const json::Value *v = member(object, path, key);
    if (!v)
      return none;
    if (!v->isArray()) {
      fail(field(path, key), "is not an array");
      return none;
    }
    if (static_cast<int64_t>(v->array.size()) < size.min ||
        static_cast<int64_t>(v->array.size()) > size.max) {
      fail(field(path, key), "has " + std::to_string(v->array.size()) +
                                 " elements; expected " +
                                 std::to_string(size.min) + ".." +
                                 std::to_string(size.max));
      return none;
    }
    return v->array;
  }
};

void readHeader(Reader &r, const json::Value &root, Manifest &out) {
  out.spec = r.text(&root, "", "spec", 1, limits::kMaxTextLength, isPrintable);
  out.hash = r.text(&root, "", "hash", 0, 16, isHexDigit);
  out.arch = r.text(&root, "", "arch", 0, limits::kMaxNameLength, isIdentifierChar);
  out.compiler = r.text(&root, "", "compiler", 0, limits::kMaxTextLength, isPrintable);
  out.ptxas = r.text(&root, "", "ptxas", 0, limits::kMaxTextLength, isPrintable);
  const json::Value *split = r.member(&root, "", "split");
  out.split.tokensPerBlock =
      r.integer(split, "split", "tokens_per_block", limits::kTokensPerBlock);
  out.split.targetBlocks = r.integer(split, "split", "target_blocks", limits::kBlocks);
  out.split.maxSplit = r.integer(split, "split", "max", limits::kSplit);
  out.split.waveSlots =
      r.optionalInteger(split, "split", "wave_slots", limits::kWaveSlots, 0);
  out.split.singleBlock =
      r.optionalInteger(split, "split", "single_block", {0, limits::kSplit.max}, 0);
}

void readBuffers(Reader &r, const json::Value &root, Manifest &out) {
  const auto &buffers =
      r.array(&root, "", "buffers", {1, limits::kMaxBuffers});
  for (size_t i = 0; i < buffers.size(); ++i) {
    const json::Value *b = &buffers[i];
    std::string path = element("buffers", i);
    BufferDesc d;
    d.name = r.text(b, path, "name", 1, limits::kMaxNameLength, isIdentifierChar);
    if (d.name == "M" || d.name == "S" || out.buffer(d.name))
      r.fail(field(path, "name"), "'" + d.name + "' is M, S or a repeated name");
    if (!parseDType(r.text(b, path, "dtype", 0, 8, isIdentifierChar), d.dtype))
      r.fail(field(path, "dtype"), "is not bf16, f16 or f32");
    if (!parseRole(r.text(b, path, "role", 0, 16, isIdentifierChar), d.role))
      r.fail(field(path, "role"), "is not input, output or workspace");
    const json::Value *e = r.member(b, path, "elems");
    std::string elems = field(path, "elems");
    d.elems.perToken = r.integer(e, elems, "per_token", limits::kPerToken);
    d.elems.fixed = r.integer(e, elems, "fixed", limits::kFixedElems);
    d.elems.perTokenSplit =
        r.integer(e, elems, "per_token_split", limits::kPerTokenSplit);
    out.buffers.push_back(d);
  }
}

/// A tensor-map parameter's numbers (TensorMapShape): boxes of 1 to 256
/// rows and, where given, of 1 to 256 elements in 16-byte rows (or of 1 to
/// 256 granules of that many); every P-th token from token r < P <= 16.
void checkTensorMapShape(Reader &r, const std::string &name, const std::string &p,
                         const BufferDesc &b) {
  TensorMapShape s;
  if (!parseTensorMapShape(p, s)) {
    r.fail(name, "'" + p + "' is not tmap[R[,P,r[,W[,G]]]]:<buffer>");
    return;
  }
  if (s.rows < limits::kBoxRows.min || s.rows > limits::kBoxRows.max)
    r.fail(name, "'" + p + "' has boxes of " + std::to_string(s.rows) +
                     " rows; expected 1..256");
  if (s.every < 1 || s.every > 16 || s.first >= s.every)
    r.fail(name, "'" + p + "' takes tokens " + std::to_string(s.first) + " + " +
                     std::to_string(s.every) + " k; expected a step of 1..16 and a "
                     "first token below it");
  if (s.granule) {
    if (s.granule > 256 || s.granule * byteWidth(b.dtype) % 16 || s.width < s.granule ||
        s.width % s.granule || s.width / s.granule > 256)
      r.fail(name, "'" + p + "' has boxes of " + std::to_string(s.width) + " elements in "
                       "granules of " + std::to_string(s.granule) + "; expected granules "
                       "of 1..256 elements in 16-byte multiples, 1..256 of them a box");
  } else if (s.width < 1 || s.width > 256 || s.width * byteWidth(b.dtype) % 16) {
    r.fail(name, "'" + p + "' has boxes " + std::to_string(s.width) +
                     " elements wide; expected 1..256 in 16-byte rows");
  }
}

/// A launch's parameters: "M", "S", a buffer, or a tensor map of a buffer
/// that is [M, per_token] (TMA boxes of 1 to 256 rows).
void readParams(Reader &r, const json::Value *launch, const std::string &path,
                const Manifest &m, LaunchDesc &d) {
  const auto &params = r.array(launch, path, "params", {0, limits::kMaxPtxParams});
  int64_t maps = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    std::string name = element(field(path, "params"), i);
    std::string p = r.text(params[i], name, 1, limits::kMaxNameLength + 24, isPrintable);
    d.params.push_back(p);
    if (p.empty() || p == "M" || p == "S" || p == kSyncParam)
      continue;
    const char *tmap = tensorMapBuffer(p);
    const BufferDesc *b = m.buffer(tmap ? tmap : p);
    if (!b) {
      r.fail(name, "'" + p + "' names no buffer");
      continue;
    }
    if (!tmap)
      continue;
    ++maps;
    checkTensorMapShape(r, name, p, *b);
    if (b->elems.perToken < 1 || b->elems.fixed || b->elems.perTokenSplit)
      r.fail(name, "'" + p + "' maps a buffer that is not [M, per_token]");
  }
  if (maps > limits::kMaxTensorMaps)
    r.fail(field(path, "params"), "has " + std::to_string(maps) +
                                      " tensor maps; at most " +
                                      std::to_string(limits::kMaxTensorMaps));
  int64_t count = Manifest::ptxParamCount(d);
  if (count > limits::kMaxPtxParams)
    r.fail(field(path, "params"), "take " + std::to_string(count) +
                                      " PTX parameters; at most " +
                                      std::to_string(limits::kMaxPtxParams));
  // (written for readers; checked when present)
  if (r.optionalInteger(launch, path, "ptx_params", {0, limits::kMaxPtxParams},
                        count) != count)
    r.fail(field(path, "ptx_params"), "differs from its params' " +
                                          std::to_string(count));
}

void readGrid(Reader &r, const json::Value *launch, const std::string &path,
              GridRule &g) {
  const json::Value *grid = r.member(launch, path, "grid");
  std::string at = field(path, "grid");
  g.tokensPerBlock = r.integer(grid, at, "tokens_per_block", limits::kGridTokensPerBlock);
  g.fixedBlocks = r.integer(grid, at, "fixed_blocks", limits::kBlocks);
  g.timesSplit = r.boolean(grid, at, "times_split");
  g.itemsPerToken = r.integer(grid, at, "items_per_token", limits::kPerToken);
  g.itemsPerBlock = r.integer(grid, at, "items_per_block", limits::kItemsPerBlock);
  if (g.itemsPerToken > 0 && g.itemsPerBlock < 1)
    r.fail(field(at, "items_per_block"), "is 0 with items_per_token > 0");
  g.minTokens = r.optionalInteger(grid, at, "min_tokens", limits::kMinTokens, 0);
  g.maxTokens = r.optionalInteger(grid, at, "max_tokens", limits::kMinTokens, 0);
}

void readLaunches(Reader &r, const json::Value &root, Manifest &out) {
  const auto &launches =
      r.array(&root, "", "launches", {1, limits::kMaxLaunches});
  for (size_t i = 0; i < launches.size(); ++i) {
    const json::Value *l = &launches[i];
    std::string path = element("launches", i);
    LaunchDesc d;
    d.entry = r.text(l, path, "entry", 1, limits::kMaxTextLength, isIdentifierChar);
    readParams(r, l, path, out, d);
    // The runtime launches blocks of (x, 1, 1).
    const auto &block = r.array(l, path, "block", {3, 3});
    if (!block.empty()) {
      d.block = static_cast<int>(
          r.integer(block[0], element(field(path, "block"), 0), limits::kBlockThreads));
      r.integer(block[1], element(field(path, "block"), 1), {1, 1});
      r.integer(block[2], element(field(path, "block"), 2), {1, 1});
    }
    readGrid(r, l, path, d.grid);
    d.dynamicSharedBytes =
        r.integer(l, path, "dynamic_shared_bytes", limits::kDynamicSharedBytes);
    if (l->get("cooperative"))
      d.cooperative = r.boolean(l, path, "cooperative");
    if (l->get("pdl"))
      d.programmatic = r.boolean(l, path, "pdl");
    out.launches.push_back(d);
  }
}
} // namespace

bool Manifest::fromJson(const std::string &source, Manifest &out,
                        std::string &error) {
  json::Value root;
  if (!json::parse(source, root, error))
    return false;
  out = Manifest();
  const json::Value *format = root.get("format");
  if (!format || !format->isNumber() || format->number != kFormat) {
    error = "unsupported manifest format (field 'format' must be " +
            std::to_string(kFormat) + ")";
    return false;
  }
  Reader r;
  readHeader(r, root, out);
  readBuffers(r, root, out);
  readLaunches(r, root, out);
  if (!r.error.empty()) {
    error = r.error;
    return false;
  }
  std::string specError;
  if (!KernelSpec::parse(out.spec, &specError)) {
    error = "field 'spec' is invalid: " + specError;
    return false;
  }
  return true;
}

} // namespace mhc
