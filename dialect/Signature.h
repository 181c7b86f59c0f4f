//===- Signature.h - shape and dtype rules of mhc ops -----------*- C++ -*-===//
//
// Every mhc op's operands and results are per-token tensors whose shapes are
// built from M (tokens), n, C, K = n*C and N = 2n + n^2. A Signature checks
// them one at a time, learning M and C from the first operand that fixes them,
// and reports a mismatch by naming the operand and the shape it expected.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_DIALECT_SIGNATURE_H
#define MHC_DIALECT_SIGNATURE_H

#include "mhc/Dialect/MhcOps.h"
#include "mhc/Support/KernelLimits.h"
#include "mhc/Support/OpContract.h"

#include <optional>
#include <string>

namespace mlir::mhc {

/// One expected dimension.
struct Dim {
  enum Kind { Tokens, Channels, StreamsTimesChannels, Fixed } kind;
  int64_t value = 0;       // Fixed only
  const char *symbol = ""; // Fixed only: "n", "N", "3"

  static Dim tokens() { return {Tokens}; }
  static Dim channels() { return {Channels}; }
  static Dim k() { return {StreamsTimesChannels}; }
  static Dim fixed(int64_t v, const char *symbol) { return {Fixed, v, symbol}; }
};

/// Which element types a value may have.
enum class ElemKind {
  Activation, // bf16, f16, f32
  Mixing,     // f32
  Param,      // f32, bf16
};

/// The expected dims of x (and its gradient) in `layout`.
SmallVector<Dim, 3> streamDims(int64_t n, Layout layout);
/// N = 2n + n^2, for n <= kMaxStreams (checkStreamCount).
using ::mhc::numLogits;

class Signature {
public:
  Signature(Operation *op, int64_t n) : op(op), n(n) {}

  /// Checks shape and element class; `role` is "operand" or "result".
  LogicalResult check(StringRef role, StringRef name, Value value,
                      ArrayRef<Dim> dims, ElemKind kind);
  /// Checks operand `name` by the rule torch.ops.mhc.<contractOp> checks it
  /// with (::mhc::argRule, OpContract.h): its dims (a streams tensor's by
  /// `layout`) and element class. The dialect's own order and dtype
  /// relations stay with the op.
  LogicalResult operand(StringRef contractOp, StringRef name, Value value,
                        Layout layout = Layout::nc);
  /// Checks that `value`'s element type equals `like`'s (named `likeName`).
  LogicalResult checkSameElementType(StringRef role, StringRef name,
                                     Value value, Value like,
                                     StringRef likeName);

  std::optional<int64_t> channels() const { return c; }

private:
  /// K = n*C once C is known (nullopt before, or if it overflows).
  std::optional<int64_t> knownK() const;
  InFlightDiagnostic error(StringRef role, StringRef name);
  std::string render(ArrayRef<Dim> dims, bool symbolic) const;

  Operation *op;
  int64_t n;
  std::optional<int64_t> m, c;  // static M and C once known
  std::string mFrom, cFrom;     // which value fixed them
};

/// Float attribute range checks shared by ops with the same attributes.
LogicalResult checkNonNegative(Operation *op, StringRef name, APFloat value);
LogicalResult checkPositive(Operation *op, StringRef name, APFloat value);
/// Sinkhorn's attributes: iters at most kMaxSinkhornIters (ODS checks >= 1),
/// eps only in softmax_eps mode, finite and >= 0.
LogicalResult checkSinkhornAttrs(Operation *op, SinkhornMode mode,
                                 int64_t iters, std::optional<APFloat> eps);

/// InferType helpers: the static token count of the first value that has
/// one, else dynamic; C of x in `layout`.
int64_t inferTokens(ValueRange values);
int64_t channelsOf(Value x, Layout layout);
RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elementType);
Type elementTypeOf(Value v);
/// The pre step's result types for x's m tokens, in mhc.pre's order: h, ms,
/// pre, post, logits, P (f32), y (x's element type).
void appendPreStepTypes(SmallVectorImpl<Type> &types, Value x, Layout layout,
                        int64_t m, int64_t n);

/// Result types are compatible when shapes are (a static M may refine `?`)
/// and element types are equal.
bool compatibleTensorTypes(TypeRange inferred, TypeRange actual);

} // namespace mlir::mhc

namespace mlir::mhc {
/// Kernel-spec spellings of the dialect's enums.
::mhc::Layout toKernelLayout(Layout layout);
::mhc::SinkhornMode toKernelMode(SinkhornMode mode);
/// Fills n, layout, C and the activation dtype of `spec` from x.
void describeStreams(::mhc::KernelSpec &spec, int64_t n, Layout layout,
                     Value x);
/// The kernel dtype of a parameter's element type (f32 when unknown).
::mhc::DType paramDType(Value param);
/// `v`'s type with its leading (token) dimension set to `tokens`.
Type withTokens(Value v, int64_t tokens);
/// Rejects n so large that N = 2n + n^2 would not be a sane tensor size.
LogicalResult checkStreamCount(Operation *op, int64_t n);

/// Shared by scale and scale_grad: the attribute ranges of MATH.md step 2.
template <typename OpT>
LogicalResult verifyScaleAttrs(OpT op) {
  if (failed(checkNonNegative(op, "norm_eps", op.getNormEps())) ||
      failed(checkNonNegative(op, "pre_eps", op.getPreEps())) ||
      failed(checkPositive(op, "post_mult", op.getPostMult())))
    return failure();
  return success();
}

/// Shared by mhc.pre and mhc.layer (a pre step each): n, scale's attribute
/// ranges and the Sinkhorn eps rule.
template <typename OpT>
LogicalResult verifyPreStepAttrs(OpT op) {
  if (failed(checkStreamCount(op, op.getN())) || failed(verifyScaleAttrs(op)) ||
      failed(checkSinkhornAttrs(op, op.getMode(), op.getIters(),
                                op.getEps())))
    return failure();
  return success();
}

/// The optional `acc` operand of a backward op (x's gradient from its other
/// users): x's shape in `layout` and x's element type. Success when absent.
LogicalResult checkAcc(Signature &sig, Value acc, Value x, int64_t n,
                       Layout layout);

/// Kernel-spec fields of an op family, shared by the forward op, its grad
/// op and mhc.pre (whose spec holds those of its parts).
template <typename OpT>
void describeProjectFields(::mhc::KernelSpec &spec, OpT op) {
  describeStreams(spec, op.getN(), op.getLayout(), op.getX());
  spec.param = paramDType(op.getPhi());
  spec.tf32 = op.getTf32();
  spec.hasWeight = static_cast<bool>(op.getWeight());
}
template <typename OpT>
void describeScaleFields(::mhc::KernelSpec &spec, OpT op) {
  spec.normEps = op.getNormEps().convertToFloat();
  spec.preEps = op.getPreEps().convertToFloat();
  spec.postMult = op.getPostMult().convertToFloat();
}
template <typename OpT>
void describeSinkhornFields(::mhc::KernelSpec &spec, OpT op) {
  spec.mode = toKernelMode(op.getMode());
  spec.iters = op.getIters();
  spec.eps = sinkhornEps(op.getMode(), op.getEps());
}
} // namespace mlir::mhc

#endif // MHC_DIALECT_SIGNATURE_H
