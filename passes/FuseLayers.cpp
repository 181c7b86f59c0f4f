//===- FuseLayers.cpp - mhc-fuse-layers -----------------------------------===//
//
// expand_combine of layer l + mhc.pre of layer l+1 -> mhc.post_pre; x's
// gradient sums -> acc chains; the seam's gradient chain -> mhc.post_pre_grad
// (docs/design/seam.md). The rewrites are in layers/ (LayerSeam.h); see the
// pass description in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "layers/LayerSeam.h"
#include "mhc/Passes/Passes.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_FUSELAYERS
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;
using namespace mlir::mhc::layers;

namespace {

struct FuseLayersPass : mlir::mhc::impl::FuseLayersBase<FuseLayersPass> {
  void runOnOperation() override {
    Operation *top = getOperation();
    IRRewriter rewriter(&getContext());

    // Each fusion erases only its own post and pre; a post collected here
    // is never another seam's.
    SmallVector<ExpandCombineOp> posts;
    top->walk([&](ExpandCombineOp op) { posts.push_back(op); });
    for (ExpandCombineOp post : posts)
      if (std::optional<ForwardSeam> seam = matchForward(post))
        fuseForward(*seam, rewriter);

    // Roots are collected before any sum is rewritten; a rewrite erases only
    // its own tree's adds.
    SmallVector<arith::AddFOp> roots;
    top->walk([&](arith::AddFOp add) {
      if (isSumRoot(add))
        roots.push_back(add);
    });
    DominanceInfo dom(top);
    for (arith::AddFOp root : roots)
      threadSum(collectSum(root), dom, rewriter);

    // A chain is found from its expand_combine_grad, which no other chain
    // contains.
    SmallVector<ExpandCombineGradOp> grads;
    top->walk([&](ExpandCombineGradOp op) { grads.push_back(op); });
    for (ExpandCombineGradOp post : grads)
      if (std::optional<BackwardSeam> seam = matchBackward(post))
        fuseBackward(*seam, rewriter);
  }
};

} // namespace
