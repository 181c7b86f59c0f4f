//===- OpContract.h - the facts every layer asks of an op -------*- C++ -*-===//
//
// N of n, whether a layer's pre step runs fused at M tokens, and each torch
// op's tensor arguments (names, shapes, element classes, in check order).
// The dialect (its operands' shapes), the passes, codegen, the torch ops and
// (through mhc._C) the Python package read them here instead of restating
// them. No MLIR dependency: the runtime links this too.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_SUPPORT_OPCONTRACT_H
#define MHC_SUPPORT_OPCONTRACT_H

#include <cstdint>
#include <string_view>
#include <vector>

namespace mhc {

/// N = 2n + n^2, the mixing logits per token ([pre (n) | post (n) | res
/// (n*n)]), for an n within kMaxStreams (KernelLimits.h).
constexpr int64_t numLogits(int64_t n) { return 2 * n + n * n; }

/// The n whose numLogits is N, or 0 when there is none.
int64_t streamsOfLogits(int64_t N);

/// Up to this many streams the fused pre kernel is as fast as the four ops
/// at any M; with more, up to kFusedPreMaxTokens tokens only.
inline constexpr int64_t kFusedPreMaxStreamsAnyM = 4;
inline constexpr int64_t kFusedPreMaxTokens = 512;

/// Whether one layer's pre step (project -> scale -> sinkhorn -> aggregate)
/// runs as the fused mhc.pre for n streams and M tokens (M < 0: not known).
/// Why: the tail's Sinkhorn thread keeps the n x n plan in registers, which
/// for n > 4 caps it at two blocks per SM, and past a few hundred tokens the
/// four kernels are faster. Unknown M fuses only where M does not matter.
constexpr bool preStepFuses(int64_t n, int64_t M) {
  return n <= kFusedPreMaxStreamsAnyM || (M >= 0 && M <= kFusedPreMaxTokens);
}

/// Up to this many tokens the forward of the pre step (pre.fwd) and of the
/// layer seam (post_pre.fwd) runs as one cooperative launch (spec field
/// `coop`, docs/design/serve.md): at decode sizes launches and the
/// projection's cross-SM reduction dominate, and one launch with grid
/// barriers removes both; above it the multi-launch path is faster.
/// 4: on the H100 (bench/probes/one_launch_probe.py, n = 4, bf16, TE
/// conventions) one launch beats the multi-launch path in a CUDA graph and
/// eager at C = 4096 and 7168 for M = 1 and 4 and loses at M = 16 in a graph
/// (C = 4096: 16.2 vs 12.9 us; C = 7168: 20.7 vs 18.4; docs/design/serve.md).
inline constexpr int64_t kOneLaunchMaxTokens = 4;

/// Whether the pre step's or the seam's forward runs in one launch at M
/// tokens (M < 0: not known). Unknown M takes the multi-launch path, which
/// serves every M at its speed; the one-launch kernel is a decode-size
/// kernel. The runtime (torch ops) and mhc-specialize both ask this.
constexpr bool forwardRunsInOneLaunch(int64_t M) {
  return M >= 1 && M <= kOneLaunchMaxTokens;
}

/// A dimension of an op's tensor argument: tokens, channels, streams,
/// N = numLogits(n), K = n*C, or the literal 3 (alpha).
enum class Sym : uint8_t { M, C, n, N, K, Three };
/// Which element types an argument may have: activations bf16/f16/f32,
/// mixing values f32, parameters f32/bf16 (float64 for all, on the
/// reference path).
enum class ElemClass : uint8_t { Activation, Mixing, Param };

/// One tensor argument of a torch op. Streams arguments (x, gout) are
/// [M, n, C] or [M, C, n] by the op's layout and leave `dims` empty.
struct ArgRule {
  std::string_view name;
  std::vector<Sym> dims;
  /// What the dims are, as error messages write them ("[N, K] = [2n + n^2,
  /// n*C]"); empty: the dims' symbols ("[M, n]").
  std::string_view symbolic;
  ElemClass elem = ElemClass::Mixing;
  bool streams = false;  // x-shaped by the layout
  bool optional = false; // may be absent (weight, bias, acc)
  /// The argument whose dtype this one must have, or empty.
  std::string_view sameTypeAs;
};

/// The tensor arguments of torch.ops.mhc.<op> ("project", "scale_backward",
/// "pre", ...) in the order they are checked (a forward op's inputs, then a
/// gradient's), or nullptr for an unknown op.
const std::vector<ArgRule> *argRules(std::string_view op);

/// The rule of argument `name` of torch op `op`, or nullptr.
const ArgRule *argRule(std::string_view op, std::string_view name);

/// A dimension's symbol as error messages write it ("M", "N", "3").
std::string_view symbolName(Sym s);

} // namespace mhc

#endif // MHC_SUPPORT_OPCONTRACT_H
