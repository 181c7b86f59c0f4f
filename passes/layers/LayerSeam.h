//===- LayerSeam.h - mhc-fuse-layers' three rewrites ------------*- C++ -*-===//
//
// What mhc-fuse-layers (FuseLayers.cpp) does, in the order it does it: the
// forward seam (ForwardSeam.cpp), x's gradient sums as acc chains
// (GradSums.cpp) and the seam's gradient chain (BackwardSeam.cpp), each a
// match that finds a candidate and a rewrite that may still refuse it; and
// the rules they share (SeamRules.cpp). docs/design/seam.md has the
// contract.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_PASSES_LAYERS_LAYERSEAM_H
#define MHC_PASSES_LAYERS_LAYERSEAM_H

#include "mhc/Dialect/MhcOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"

#include <optional>

namespace mlir::mhc::layers {

//===- Shared rules (SeamRules.cpp) ---------------------------------------===//

/// Where one op replacing `chain` (ops of one block) goes: before the last
/// of them when every other user of `results` (the replaced values) comes
/// after it; else right after the last definition of an `operand` in the
/// block, if that is before every such user. Failure otherwise.
FailureOr<Block::iterator> placement(ArrayRef<Operation *> chain,
                                     ValueRange operands, ValueRange results);
/// One parameter dtype per seam kernel: `v` (bias, alpha, beta, weight; may
/// be absent) has phi's element type.
bool sameParamType(Value v, Value phi);
/// Whether the seam's pre step runs fused at `tokens` (::mhc::preStepFuses);
/// if not, a remark on `at` says why the seam stays unfused.
bool seamFusesAt(Operation *at, int64_t n, int64_t tokens);
/// The token count the fused op's token-indexed values (null ones skipped)
/// agree on.
FailureOr<int64_t> tokensOf(ValueRange values);

//===- Forward: expand_combine -> mhc.pre (ForwardSeam.cpp) ---------------===//

struct ForwardSeam {
  ExpandCombineOp post; // layer l's post step
  PreOp pre;            // layer l+1's pre step, reading post's result
};
/// The first pre (in block order) that reads `post`'s result as its x and
/// can form a seam with it.
std::optional<ForwardSeam> matchForward(ExpandCombineOp post);
/// The seam as one mhc.post_pre, where one op can stand; false if not.
bool fuseForward(ForwardSeam s, IRRewriter &rewriter);

//===- Gradient sums -> acc chains (GradSums.cpp) -------------------------===//

/// An addf tree: the root, its inner adds (each used only by its parent, in
/// the root's block), the contributions that can take an acc (in block
/// order) and the other leaves.
struct GradSum {
  SmallVector<arith::AddFOp> adds; // root first, each before its operands
  SmallVector<Operation *> takers;
  SmallVector<Value> others;
};
/// Whether `add` is not an inner node of a larger sum.
bool isSumRoot(arith::AddFOp add);
GradSum collectSum(arith::AddFOp root);
/// Rewrites the sum as an acc chain: in block order each taker adds the
/// previous one's gx (the first the one other leaf, if any); the last gx
/// is the sum. Needs a taker, at most one other leaf, and that leaf defined
/// before the first taker.
bool threadSum(GradSum sum, DominanceInfo &dom, IRRewriter &rewriter);

//===- Backward: the gradient chain -> mhc.post_pre_grad (BackwardSeam.cpp) ===//

/// Layer l+1's pre-step gradients and layer l's expand_combine_grad, each
/// intermediate used only by the next op (the contract's "value").
struct BackwardSeam {
  AggregateGradOp aggregate; // acc = gx_next
  SinkhornGradOp sinkhorn;
  ScaleGradOp scale;
  ProjectGradOp project;    // acc = aggregate's gx
  ExpandCombineGradOp post; // gout = project's gx
};
std::optional<BackwardSeam> matchBackward(ExpandCombineGradOp post);
/// The chain as one mhc.post_pre_grad, where one op can stand; false if not.
bool fuseBackward(BackwardSeam s, IRRewriter &rewriter);

} // namespace mlir::mhc::layers

#endif // MHC_PASSES_LAYERS_LAYERSEAM_H
