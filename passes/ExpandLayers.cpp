//===- ExpandLayers.cpp - mhc.layer -> the five MATH.md ops ----------------===//

#include "mhc/Passes/Passes.h"

#include "mlir/IR/PatternMatch.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_EXPANDLAYERS
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

void expandLayer(LayerOp layer, IRRewriter &rewriter) {
  Location loc = layer.getLoc();
  rewriter.setInsertionPoint(layer);
  IntegerAttr n = layer.getNAttr();
  LayoutAttr layout = layer.getLayoutAttr();

  auto project = ProjectOp::create(rewriter, loc, layer.getX(), layer.getPhi(),
                                   layer.getWeight(), n, layout,
                                   layer.getTf32Attr());
  auto scale = ScaleOp::create(rewriter, loc, project.getH(), project.getMs(),
                               layer.getAlpha(), layer.getBeta(), n,
                               layer.getNormEpsAttr(), layer.getPreEpsAttr(),
                               layer.getPostMultAttr());
  auto sinkhorn =
      SinkhornOp::create(rewriter, loc, scale.getLogits(), n,
                         layer.getModeAttr(), layer.getItersAttr(),
                         layer.getEpsAttr());
  auto aggregate = AggregateOp::create(rewriter, loc, layer.getX(),
                                       scale.getPre(), n, layout);

  // Inline the block between aggregate and expand_combine, feeding it y.
  Block &body = layer.getBody().front();
  auto yield = cast<YieldOp>(body.getTerminator());
  rewriter.inlineBlockBefore(&body, layer, ValueRange{aggregate.getY()});
  // Read f only now: an identity block yields its argument, which inlining
  // has just replaced with y.
  Value f = yield.getF();
  rewriter.eraseOp(yield);

  auto combine = ExpandCombineOp::create(
      rewriter, loc, f, scale.getPost(), layer.getX(), sinkhorn.getP(),
      layer.getBias(), n, layout);
  rewriter.replaceOp(layer, combine.getOut());
}

struct ExpandLayersPass : mlir::mhc::impl::ExpandLayersBase<ExpandLayersPass> {
  void runOnOperation() override {
    SmallVector<LayerOp> layers;
    getOperation()->walk([&](LayerOp op) { layers.push_back(op); });
    IRRewriter rewriter(&getContext());
    // Post-order: a layer nested in another's block is expanded first.
    for (LayerOp layer : layers)
      expandLayer(layer, rewriter);
  }
};

} // namespace
