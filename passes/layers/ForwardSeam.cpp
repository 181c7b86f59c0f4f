//===- ForwardSeam.cpp - expand_combine + mhc.pre -> mhc.post_pre ---------===//
//
// Layer l's post step and the next layer's pre step reading its result
// become one mhc.post_pre (docs/design/seam.md).
//
//===----------------------------------------------------------------------===//

#include "layers/LayerSeam.h"

using namespace mlir;

namespace mlir::mhc::layers {

std::optional<ForwardSeam> matchForward(ExpandCombineOp post) {
  PreOp first;
  for (Operation *user : post.getOut().getUsers()) {
    auto pre = dyn_cast<PreOp>(user);
    if (!pre || pre.getX() != post.getOut() ||
        pre->getBlock() != post->getBlock() || pre.getN() != post.getN() ||
        pre.getLayout() != post.getLayout() ||
        !sameParamType(post.getBias(), pre.getPhi()))
      continue;
    if (!first || pre->isBeforeInBlock(first))
      first = pre;
  }
  if (!first)
    return std::nullopt;
  SmallVector<Value> tokenValues{post.getF(), post.getPost(), post.getX(),
                                 post.getP(), post.getOut()};
  llvm::append_range(tokenValues, first->getResults());
  FailureOr<int64_t> tokens = tokensOf(tokenValues);
  if (failed(tokens) || !seamFusesAt(post, post.getN(), *tokens))
    return std::nullopt;
  return ForwardSeam{post, first};
}

bool fuseForward(ForwardSeam s, IRRewriter &rewriter) {
  ExpandCombineOp post = s.post;
  PreOp pre = s.pre;
  SmallVector<Value> operands{post.getF(),    post.getPost(), post.getX(),
                              post.getP(),    post.getBias(), pre.getPhi(),
                              pre.getAlpha(), pre.getBeta(),  pre.getWeight()};
  llvm::erase(operands, Value());
  SmallVector<Value> results{post.getOut()};
  llvm::append_range(results, pre->getResults());
  FailureOr<Block::iterator> at = placement({post, pre}, operands, results);
  if (failed(at))
    return false;
  rewriter.setInsertionPoint(post->getBlock(), *at);
  Location loc = rewriter.getFusedLoc({post.getLoc(), pre.getLoc()});
  auto fused = PostPreOp::create(
      rewriter, loc, post.getOut().getType(), pre.getH().getType(),
      pre.getMs().getType(), pre.getPre().getType(), pre.getPost().getType(),
      pre.getLogits().getType(), pre.getP().getType(), pre.getY().getType(),
      post.getF(), post.getPost(), post.getX(), post.getP(), post.getBias(),
      pre.getPhi(), pre.getAlpha(), pre.getBeta(), pre.getWeight(),
      pre.getNAttr(), pre.getLayoutAttr(), pre.getTf32Attr(),
      pre.getNormEpsAttr(), pre.getPreEpsAttr(), pre.getPostMultAttr(),
      pre.getModeAttr(), pre.getItersAttr(), pre.getEpsAttr());
  rewriter.replaceOp(pre, {fused.getH(), fused.getMs(), fused.getPre(),
                           fused.getPostNext(), fused.getLogits(),
                           fused.getPNext(), fused.getY()});
  rewriter.replaceOp(post, fused.getXNext());
  return true;
}

} // namespace mlir::mhc::layers
