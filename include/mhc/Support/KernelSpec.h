//===- KernelSpec.h - the identity of one generated kernel ------*- C++ -*-===//
//
// A KernelSpec says everything that changes a kernel's code: op, direction,
// n, dtypes, layout, C, arch and the variant parameters of MATH.md. Its
// canonical string is what mhc-specialize stamps on ops, what codegen builds
// from, and (hashed) the runtime's cache key. No MLIR dependency: the runtime
// links this too.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_SUPPORT_KERNELSPEC_H
#define MHC_SUPPORT_KERNELSPEC_H

#include "mhc/Support/OpContract.h" // N of n and the ops' other shape facts

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mhc {

/// Pre is one layer's pre step fused (project -> scale -> sinkhorn ->
/// aggregate, forward only): the fields of those ops together. PostPre is the
/// layer seam (docs/design/seam.md): expand_combine of layer l, then the pre
/// step of layer l+1, forward and backward: the fields of all five ops.
enum class OpKind { Project, Scale, Sinkhorn, Aggregate, ExpandCombine, Pre, PostPre };
enum class Direction { Forward, Backward };
enum class DType { BF16, F16, F32 };
enum class Layout { NC, CN };
enum class SinkhornMode { Log, SoftmaxEps };

const char *toString(OpKind);
const char *toString(Direction);
const char *toString(DType);
const char *toString(Layout);
const char *toString(SinkhornMode);
unsigned byteWidth(DType);
/// A float field as the canonical text writes it (%.9g: round-trips f32).
std::string formatFloat(float v);

/// The architectures codegen targets (ptxas-verified in CI).
bool isSupportedArch(std::string_view arch);

struct KernelSpec {
  OpKind op = OpKind::Project;
  Direction dir = Direction::Forward;
  int64_t n = 4;
  DType act = DType::BF16;   // x, f, y, out and their grads
  DType param = DType::F32;  // phi, alpha, beta, weight, bias
  Layout layout = Layout::NC;
  int64_t channels = 0;      // C; 0 = not known statically
  std::string arch = "sm_90a";
  // Variant parameters; only those the op uses enter the canonical string.
  bool tf32 = false;         // project
  bool hasWeight = false;    // project
  bool hasBias = false;      // expand_combine, post_pre
  /// Backward of aggregate, project, expand_combine: gx = acc + the op's
  /// own gradient of x, summed in the kernel (x's gradient from its other
  /// users, so autograd adds nothing). Printed only when set ("acc=1"), so
  /// the specs without it keep their names.
  bool acc = false;
  /// Forward of pre and post_pre: the one-launch cooperative kernel for
  /// small M (docs/design/serve.md; mhc::forwardRunsInOneLaunch picks it).
  /// Printed only when set ("coop=1"), so the other specs keep their names.
  bool cooperative = false;
  /// TE's fp32 x-gradient buffer (mhc.te's fused_grad_x_acc_buffer; 2-byte
  /// activations; printed "acc=f32" instead of acc's "acc=1"). Backward of
  /// expand_combine: gx is stored in f32 (the buffer's first writer reads
  /// nothing); aggregate: gx = acc + own, both f32, summed in f32 (the
  /// runtime passes the buffer as acc and gx: in place); project: acc is
  /// f32 and gx = acc + own in the activation dtype (x's gradient).
  bool accF32 = false;
  float normEps = 1e-6f;     // scale
  float preEps = 1e-6f;      // scale
  float postMult = 2.0f;     // scale
  SinkhornMode mode = SinkhornMode::Log;  // sinkhorn
  int64_t iters = 20;        // sinkhorn
  float eps = 1e-6f;         // sinkhorn, softmax_eps mode only

  /// Which fields this op's code depends on.
  bool usesActivations() const;
  bool usesLayout() const { return usesActivations(); }
  bool usesParams() const;
  /// Whether the op has the projection's, scale's, sinkhorn's fields (its
  /// own, or as part of a fused op).
  bool usesProjectFields() const;
  bool usesScaleFields() const;
  bool usesSinkhornFields() const;
  bool usesBias() const;
  /// Whether `acc` may be set: the backward of aggregate, project and
  /// expand_combine.
  bool acceptsAcc() const;
  /// Whether `cooperative` may be set: the forward of pre and post_pre.
  bool acceptsCooperative() const;
  /// Whether the backward reads an `acc` buffer (acc, or accF32 but for
  /// expand_combine), its dtype, and gx's dtype.
  bool readsAcc() const;
  DType accType() const { return accF32 ? DType::F32 : act; }
  DType gxType() const { return accF32 && op != OpKind::Project ? DType::F32 : act; }

  /// "project.fwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=0;weight=0;arch=sm_90a".
  /// Fields an op does not depend on are left out, so specs that generate the
  /// same code have the same string. Floats print with 9 significant digits,
  /// which round-trips every float.
  std::string canonical() const;
  /// 64-bit FNV-1a of canonical(): stable across processes and builds.
  uint64_t hash() const;
  /// A valid C identifier naming the kernel, unique per canonical string.
  std::string kernelName() const;
  /// A hash of every field, cheap to compute (no strings built): the
  /// runtime's in-memory lookup key. Specs with equal canonical strings may
  /// have different structural hashes (unused fields differ); that only
  /// costs a second lookup.
  uint64_t structuralHash() const;

  /// Parses a canonical string; on failure returns nullopt and sets *error.
  static std::optional<KernelSpec> parse(std::string_view text,
                                         std::string *error = nullptr);
};

/// SMs of the arch's flagship part (A100 108, H100 132, B200 148): a
/// compile-time constant, never the device's count, so the fixed grids of
/// persistent and cooperative launches sum in the same order everywhere.
int64_t flagshipSMs(std::string_view arch);
/// Blocks of the one-launch forward (a `cooperative` spec): one per
/// flagship SM, at most one per channel (each owns a slice of C).
int64_t oneLaunchBlocks(const KernelSpec &s);
/// Shared memory the one-launch forward needs for one token's x_next slice
/// (n * ceil(C / blocks) f32), and the most it may: larger specs take the
/// multi-launch path (unsupportedReason says why).
int64_t oneLaunchSliceBytes(const KernelSpec &s);
inline constexpr int64_t kOneLaunchMaxSliceBytes = 32 * 1024;

bool operator==(const KernelSpec &a, const KernelSpec &b);
inline bool operator!=(const KernelSpec &a, const KernelSpec &b) { return !(a == b); }

/// Why codegen cannot build this spec, or the empty string when it can. The
/// one place that decides between a generated kernel and the reference path.
std::string unsupportedReason(const KernelSpec &spec);

/// The ops the layer seam (PostPre) is made of, in order, each with the
/// seam's fields (docs/design/seam.md): forward expand_combine, pre;
/// backward aggregate (acc), sinkhorn, scale, project (acc), expand_combine.
/// The seam is supported where every part is (unsupportedReason); codegen
/// builds the composed kernels from these specs.
std::vector<KernelSpec> postPreParts(const KernelSpec &seam);

/// The specs whose backward folds aggregate's x gradient into the
/// projection backward's main launch (post_pre.bwd, pre.bwd): n = 4, bf16
/// activations, f32 parameters, sm_90a, layout (C, n). Codegen also needs
/// the mma.sync plan's lanes to hold whole channels
/// (projectBackwardFoldsAggregate); pre.bwd exists only for these specs.
bool foldsAggregateGrad(const KernelSpec &s);

/// The pre step's backward (pre.bwd) as the ops the separate path runs, in
/// order, each with the pre step's fields: aggregate (pre.bwd's acc: none,
/// acc=1 or acc=f32), sinkhorn, scale, project (acc=1: aggregate's gx; with
/// acc=f32 the f32 sum of the buffer and aggregate's gx).
std::vector<KernelSpec> preBackwardParts(const KernelSpec &pre);

/// Floats of iteration history per token that the sinkhorn backward keeps in
/// shared memory: log mode the potentials f^t, g^t (2n per iteration),
/// softmax_eps mode the row and column sums (2 iters - 1 of n). A warp's
/// worth (32 tokens) must fit in kSinkhornHistoryBytes: unsupportedReason
/// rejects specs whose history does not.
int64_t sinkhornHistoryFloats(const KernelSpec &spec);
inline constexpr int64_t kSinkhornHistoryBytes = 48 * 1024;

} // namespace mhc

#endif // MHC_SUPPORT_KERNELSPEC_H
