//===- Manifest.h - how to launch a compiled mhc op -------------*- C++ -*-===//
//
// One mhc op compiles to one or more kernel launches (e.g. a per-token kernel
// and the fixed-order reduction of its cross-token partial sums). The manifest
// says, without MLIR, which buffers the op touches (inputs, outputs,
// workspaces, with sizes as a function of M), and for each launch its entry
// point, parameter order, block, grid rule and shared memory. It is written as
// JSON next to the PTX and cubin.
//
// Kernel ABI: every buffer parameter is a 1-D memref descriptor, i.e. five
// PTX parameters (allocated ptr, aligned ptr, i64 offset = 0, i64 size,
// i64 stride = 1); every scalar parameter is an i64. Buffers are dense,
// row-major, and their base must be 16-byte aligned.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_SUPPORT_MANIFEST_H
#define MHC_SUPPORT_MANIFEST_H

#include "mhc/Support/KernelSpec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mhc {

/// Hard bounds on every manifest field. Manifest::fromJson rejects a manifest
/// outside them (a cache entry on disk may have been edited), and the runtime
/// relies on them: its launch arrays are sized by them, and within them no
/// formula below overflows for M <= kMaxTokens. Generous for what codegen
/// emits.
namespace limits {
/// Inclusive bounds of an integer field.
struct Range {
  int64_t min, max;
};
inline constexpr int64_t kMaxBuffers = 48; // the layer seam's backward: 27 + workspaces
inline constexpr int64_t kMaxLaunches = 16;
inline constexpr int64_t kMaxTensorMaps = 8; // per launch (128 bytes of parameters each)
/// PTX parameters of one launch (ptxParamCount): every buffer's descriptor,
/// M, S and the tensor maps.
inline constexpr int64_t kMaxPtxParams = 5 * kMaxBuffers + 2 + kMaxTensorMaps;
/// The largest M a kernel is launched for (2^36 tokens exceed any GPU's memory).
inline constexpr int64_t kMaxTokens = int64_t(1) << 36;
inline constexpr int64_t kMaxGridBlocks = 0x7fffffff; // a grid's x dimension
inline constexpr Range kBlockThreads{1, 1024};
inline constexpr Range kDynamicSharedBytes{0, 227 * 1024};
inline constexpr Range kTokensPerBlock{1, 1 << 20};
inline constexpr Range kGridTokensPerBlock{0, 1 << 20}; // 0: not per token
inline constexpr Range kBlocks{0, kMaxGridBlocks};      // fixed, target
inline constexpr Range kSplit{1, 1024};
inline constexpr Range kWaveSlots{0, 1 << 16};
inline constexpr Range kPerToken{0, 1 << 24};           // elements or items
inline constexpr Range kPerTokenSplit{0, 1 << 16};
inline constexpr Range kFixedElems{0, int64_t(1) << 40};
inline constexpr Range kItemsPerBlock{0, 1 << 24};
inline constexpr Range kMinTokens{0, kMaxTokens};
inline constexpr Range kBoxRows{1, 256};                // TMA boxes
inline constexpr size_t kMaxNameLength = 64;            // buffer names
inline constexpr size_t kMaxTextLength = 1024;          // other strings
} // namespace limits

/// elems = perToken * M + fixed + perTokenSplit * M * S.
struct Extent {
  int64_t perToken = 0;
  int64_t fixed = 0;
  int64_t perTokenSplit = 0;
  int64_t at(int64_t m, int64_t s = 1) const {
    return perToken * m + fixed + perTokenSplit * m * s;
  }
};

/// The split count S of a split-K op, a function of M alone (so results are
/// deterministic for a given M): S = clamp(ceil(targetBlocks / tokenBlocks),
/// 1, maxSplit) with tokenBlocks = ceil(M / tokensPerBlock). With waveSlots
/// > 0 (the resident blocks of the arch's flagship part, a constant) S fills
/// its waves instead: the smallest S <= maxSplit whose tokenBlocks * S
/// blocks fill at least 90% of ceil(tokenBlocks * S / waveSlots) waves (more
/// splits cost more partials to sum), else the S that fills them best. Ops
/// without a split have maxSplit = 1. singleBlock > 0: the S of a call with
/// one token block (M <= tokensPerBlock), which the rule would cap at
/// maxSplit with most SMs idle (docs/design/project.md, "Split").
struct SplitRule {
  int64_t tokensPerBlock = 1;
  int64_t targetBlocks = 0;
  int64_t maxSplit = 1;
  int64_t waveSlots = 0;
  int64_t singleBlock = 0;
  /// The largest S that splitFor returns for any M.
  int64_t largest() const {
    return singleBlock > maxSplit ? singleBlock : maxSplit;
  }
  int64_t splitFor(int64_t m) const {
    int64_t blocks = (m + tokensPerBlock - 1) / tokensPerBlock;
    if (blocks == 1 && singleBlock > 0)
      return singleBlock;
    if (blocks <= 0 || maxSplit <= 1)
      return 1;
    if (waveSlots > 0) {
      // Filled fraction of S's waves: blocks * S / (waves * waveSlots).
      int64_t best = 1, bestUsed = 0, bestRoom = 1;
      for (int64_t s = 1; s <= maxSplit; ++s) {
        int64_t used = blocks * s;
        int64_t room = (used + waveSlots - 1) / waveSlots * waveSlots;
        if (10 * used >= 9 * room)
          return s;
        if (used * bestRoom > bestUsed * room)
          best = s, bestUsed = used, bestRoom = room;
      }
      return best;
    }
    int64_t s = (targetBlocks + blocks - 1) / blocks;
    return s < 1 ? 1 : (s > maxSplit ? maxSplit : s);
  }
};

enum class BufferRole { Input, Output, Workspace };
const char *toString(BufferRole);

struct BufferDesc {
  std::string name;
  DType dtype = DType::F32;
  BufferRole role = BufferRole::Input;
  Extent elems;
};

/// grid.x = ceil(M * itemsPerToken / itemsPerBlock) for a flat item stream
/// (itemsPerToken > 0), else (tokensPerBlock > 0 ? ceil(M / tokensPerBlock)
/// : fixedBlocks); times S when timesSplit. No blocks (the launch is
/// skipped) for M < minTokens: work that only larger M needs.
struct GridRule {
  int64_t tokensPerBlock = 0;
  int64_t fixedBlocks = 0;
  bool timesSplit = false;
  int64_t itemsPerToken = 0;
  int64_t itemsPerBlock = 0;
  int64_t minTokens = 0;
  /// No blocks past it (0: no limit): a variant for small M only, beside a
  /// launch whose minTokens is maxTokens + 1.
  int64_t maxTokens = 0;
  int64_t blocksFor(int64_t m, int64_t s = 1) const {
    if (m < minTokens || (maxTokens > 0 && m > maxTokens))
      return 0;
    int64_t b = itemsPerToken > 0
                    ? (m * itemsPerToken + itemsPerBlock - 1) / itemsPerBlock
                : tokensPerBlock > 0 ? (m + tokensPerBlock - 1) / tokensPerBlock
                                     : fixedBlocks;
    // (b past a grid's limit is returned as is: the launch is refused.)
    return timesSplit && b <= limits::kMaxGridBlocks ? b * s : b;
  }
};

/// What ptxas reported for an entry (filled when a cubin is built).
struct Resources {
  int registers = -1;
  int spillStores = -1;
  int spillLoads = -1;
  int stackBytes = -1;
  int sharedBytes = -1;
};

/// The buffer name of a tensor-map parameter ("tmap" then up to five
/// comma-separated numbers, a colon and the buffer: TensorMapShape), or
/// null for any other.
const char *tensorMapBuffer(const std::string &param);
/// What a tensor-map parameter maps: "tmap:<b>" boxes of 64 x 64;
/// "tmap<R>:<b>" boxes of 64 elements x R tokens; "tmap<R>,<P>,<r>:<b>"
/// the same over tokens r, r + P, r + 2P, ... (rows P tokens apart); and
/// "tmap<R>,<P>,<r>,<W>:<b>" those tokens in boxes W elements wide, not
/// swizzled; "tmap<R>,<P>,<r>,<W>,<G>:<b>" the same box as W / G granules
/// of G elements (a 3-D map: one copy may pass TMA's 256 elements a box
/// dimension; in shared memory the box is [R][W] as a 2-D one). A row's
/// last granule reads up to G - 1 elements past the row, into the next
/// token's: the kernel must not box the buffer's last token through it.
/// Where token r's row does not start on 16 bytes (TMA's alignment), the
/// map starts at the 16-byte boundary below it: its column c is element
/// c - shift of the token (the runtime's encodeTensorMap).
struct TensorMapShape {
  int rows = 64, every = 1, first = 0, width = 64;
  int granule = 0;      // elements per granule; 0: a 2-D map
  bool swizzled = true; // 128-byte swizzle (boxes 64 wide, 2-byte elements)
};
/// The shape of a tensor-map parameter (tensorMapBuffer's), or false with
/// the shape unchanged where its numbers do not parse.
bool parseTensorMapShape(const std::string &param, TensorMapShape &shape);
/// The launch parameter "sync": the runtime's grid-barrier words for the
/// launch's (device, stream) (kSyncWords u32, zero between launches; see
/// docs/design/serve.md), passed as a buffer's memref descriptor.
inline constexpr const char *kSyncParam = "sync";
inline constexpr int64_t kSyncWords = 2;
/// PTX parameters a launch parameter takes: 1 for M, S and a tensor map, 5
/// for a buffer (its memref descriptor) and for "sync".
int ptxParamWidth(const std::string &param);

struct LaunchDesc {
  std::string entry;
  /// Buffer names, "M" and "S", in parameter order; "tmap:<buffer>" is a
  /// TMA tensor map of that buffer (a 128-byte kernel parameter the runtime
  /// encodes per launch): the buffer as a 2-D tensor [M, its elements per
  /// token], boxes of 64 x 64 elements (128-byte rows for 2-byte types),
  /// 128-byte swizzle, zero fill past M; "tmap<R>...:<buffer>" the boxes
  /// and tokens of TensorMapShape.
  std::vector<std::string> params;
  int block = 256;
  GridRule grid;
  int64_t dynamicSharedBytes = 0;
  /// Launched cooperatively (cuLaunchCooperativeKernel): its fixed grid is
  /// co-resident, so its blocks may wait on each other (grid barriers on
  /// the "sync" parameter). Written to JSON only when set.
  bool cooperative = false;
  /// Launched with programmatic stream serialization (sm_90+,
  /// cuLaunchKernelEx): the grid may start while the stream's previous
  /// kernel finishes; it issues griddepcontrol.wait before touching memory
  /// that kernel may write (docs/design/serve.md). Written to JSON ("pdl")
  /// only when set.
  bool programmatic = false;
  Resources resources;
};

struct Manifest {
  static constexpr int kFormat = 2;
  std::string spec;  // KernelSpec::canonical()
  std::string hash;  // 16 hex digits of KernelSpec::hash()
  std::string arch;
  std::string compiler;  // "mhc <version>, MLIR <version>"
  std::string ptxas;     // "ptxas <version>" or "" when only PTX was made
  SplitRule split;
  std::vector<BufferDesc> buffers;
  std::vector<LaunchDesc> launches;

  const BufferDesc *buffer(const std::string &name) const;
  /// Number of PTX parameters of `launch` under the kernel ABI.
  static int ptxParamCount(const LaunchDesc &launch);

  std::string toJson() const;
  /// Reads what toJson wrote and checks every field against `limits` and the
  /// manifest's own consistency (parameters name its buffers, the spec
  /// parses); on failure returns false and sets `error`, which names the
  /// first bad field.
  static bool fromJson(const std::string &text, Manifest &out,
                       std::string &error);
};

} // namespace mhc

#endif // MHC_SUPPORT_MANIFEST_H
