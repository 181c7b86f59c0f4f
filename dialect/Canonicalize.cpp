//===- Canonicalize.cpp - canonicalisation patterns of mhc ops ------------===//
//
// Only rewrites that are exact in IEEE arithmetic: an all-ones RMSNorm weight
// multiplies by 1, an all-zero bias or gradient accumulator (`acc`) adds 0
// (up to the sign of a zero result). Dropping the operand lets
// specialisation pick the simpler kernel.
//
//===----------------------------------------------------------------------===//

#include "mhc/Dialect/MhcOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::mhc;

/// True if `v` is a constant tensor whose every element is `expected`.
static bool isSplatOf(Value v, double expected) {
  DenseFPElementsAttr attr;
  if (!v || !matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return false;
  APFloat value = attr.getSplatValue<APFloat>();
  return expected == 0.0 ? value.isZero() : value.isExactlyValue(expected);
}

namespace {

/// project(x, phi, weight = 1) -> project(x, phi).
struct DropUnitWeight : OpRewritePattern<ProjectOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ProjectOp op,
                                PatternRewriter &rewriter) const override {
    if (!isSplatOf(op.getWeight(), 1.0))
      return failure();
    rewriter.modifyOpInPlace(op, [&] { op.getWeightMutable().clear(); });
    return success();
  }
};

/// project_grad(..., weight = 1) whose gweight is unused -> no weight.
struct DropUnitWeightGrad : OpRewritePattern<ProjectGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ProjectGradOp op,
                                PatternRewriter &rewriter) const override {
    if (!isSplatOf(op.getWeight(), 1.0) || !op.getGweight().use_empty())
      return failure();
    auto simpler = ProjectGradOp::create(
        rewriter, op.getLoc(), op.getGx().getType(), op.getGphi().getType(),
        /*gweight=*/Type(), op.getGh(), op.getGms(), op.getX(), op.getPhi(),
        /*weight=*/Value(), op.getAcc(), op.getNAttr(), op.getLayoutAttr(),
        op.getTf32Attr());
    simpler->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    rewriter.replaceAllUsesWith(op.getGx(), simpler.getGx());
    rewriter.replaceAllUsesWith(op.getGphi(), simpler.getGphi());
    rewriter.eraseOp(op);
    return success();
  }
};

/// expand_combine(..., bias = 0) -> expand_combine(...).
struct DropZeroBias : OpRewritePattern<ExpandCombineOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ExpandCombineOp op,
                                PatternRewriter &rewriter) const override {
    if (!isSplatOf(op.getBias(), 0.0))
      return failure();
    rewriter.modifyOpInPlace(op, [&] { op.getBiasMutable().clear(); });
    return success();
  }
};

/// expand_combine_grad(..., bias = 0) whose gbias is unused -> no bias.
struct DropZeroBiasGrad : OpRewritePattern<ExpandCombineGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ExpandCombineGradOp op,
                                PatternRewriter &rewriter) const override {
    if (!isSplatOf(op.getBias(), 0.0) || !op.getGbias().use_empty())
      return failure();
    auto simpler = ExpandCombineGradOp::create(
        rewriter, op.getLoc(), op.getGf().getType(), op.getGpost().getType(),
        op.getGx().getType(), op.getGP().getType(), /*gbias=*/Type(),
        op.getGout(), op.getF(), op.getPost(), op.getX(), op.getP(),
        /*bias=*/Value(), op.getAcc(), op.getNAttr(), op.getLayoutAttr());
    simpler->setDiscardableAttrs(op->getDiscardableAttrDictionary());
    for (unsigned i = 0; i < 4; ++i)
      rewriter.replaceAllUsesWith(op->getResult(i), simpler->getResult(i));
    rewriter.eraseOp(op);
    return success();
  }
};

/// A backward op's acc = 0 (x's gradient from no other user) -> no acc.
template <typename OpT>
struct DropZeroAcc : OpRewritePattern<OpT> {
  using OpRewritePattern<OpT>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpT op,
                                PatternRewriter &rewriter) const override {
    if (!isSplatOf(op.getAcc(), 0.0))
      return failure();
    rewriter.modifyOpInPlace(op, [&] { op.getAccMutable().clear(); });
    return success();
  }
};

} // namespace

void ProjectOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<DropUnitWeight>(context);
}

void ProjectGradOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                MLIRContext *context) {
  results.add<DropUnitWeightGrad, DropZeroAcc<ProjectGradOp>>(context);
}

void ExpandCombineOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                  MLIRContext *context) {
  results.add<DropZeroBias>(context);
}

void ExpandCombineGradOp::getCanonicalizationPatterns(
    RewritePatternSet &results, MLIRContext *context) {
  results.add<DropZeroBiasGrad, DropZeroAcc<ExpandCombineGradOp>>(context);
}

void AggregateGradOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                  MLIRContext *context) {
  results.add<DropZeroAcc<AggregateGradOp>>(context);
}
