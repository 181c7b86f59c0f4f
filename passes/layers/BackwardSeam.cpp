//===- BackwardSeam.cpp - the seam's gradient chain -> mhc.post_pre_grad --===//
//
// Layer l+1's pre-step gradients and layer l's expand_combine_grad,
// linked as the contract links them, become one mhc.post_pre_grad.
//
//===----------------------------------------------------------------------===//

#include "layers/LayerSeam.h"

using namespace mlir;

namespace mlir::mhc::layers {

/// The chain's ops, linked as the contract links them, or nullopt.
static std::optional<BackwardSeam> linkBackward(ExpandCombineGradOp post) {
  Value g = post.getGout();
  auto project = g.getDefiningOp<ProjectGradOp>();
  if (post.getAcc() || !project || project.getGx() != g || !g.hasOneUse())
    return std::nullopt;
  Value g1 = project.getAcc();
  auto aggregate = g1 ? g1.getDefiningOp<AggregateGradOp>() : nullptr;
  if (!aggregate || aggregate.getGx() != g1 || !g1.hasOneUse() ||
      !aggregate.getAcc())
    return std::nullopt;
  auto scale = project.getGh().getDefiningOp<ScaleGradOp>();
  if (!scale || project.getGh() != scale.getGh() ||
      project.getGms() != scale.getGms() || !scale.getGh().hasOneUse() ||
      !scale.getGms().hasOneUse() || scale.getGpre() != aggregate.getGpre() ||
      !aggregate.getGpre().hasOneUse())
    return std::nullopt;
  auto sinkhorn = scale.getGlogits().getDefiningOp<SinkhornGradOp>();
  if (!sinkhorn || !scale.getGlogits().hasOneUse())
    return std::nullopt;
  return BackwardSeam{aggregate, sinkhorn, scale, project, post};
}

std::optional<BackwardSeam> matchBackward(ExpandCombineGradOp post) {
  std::optional<BackwardSeam> s = linkBackward(post);
  if (!s)
    return std::nullopt;
  Block *block = post->getBlock();
  uint64_t n = post.getN();
  for (Operation *op : {s->aggregate.getOperation(), s->sinkhorn.getOperation(),
                        s->scale.getOperation(), s->project.getOperation()})
    if (op->getBlock() != block)
      return std::nullopt;
  Value phi = s->project.getPhi();
  if (s->aggregate.getN() != n || s->sinkhorn.getN() != n ||
      s->scale.getN() != n || s->project.getN() != n ||
      s->aggregate.getLayout() != post.getLayout() ||
      s->project.getLayout() != post.getLayout() ||
      s->aggregate.getX() != s->project.getX() ||
      !sameParamType(s->scale.getAlpha(), phi) ||
      !sameParamType(s->scale.getBeta(), phi) ||
      !sameParamType(s->project.getWeight(), phi) ||
      !sameParamType(post.getBias(), phi))
    return std::nullopt;
  FailureOr<int64_t> tokens = tokensOf(
      {s->aggregate.getAcc(), s->aggregate.getGy(), s->scale.getGpost(),
       s->sinkhorn.getGP(), post.getF(), post.getPost(), post.getX(),
       post.getP(), s->aggregate.getX(), s->scale.getH(), s->scale.getMs(),
       s->aggregate.getPre(), s->sinkhorn.getLogits(), post.getGf(),
       post.getGpost(), post.getGx(), post.getGP()});
  if (failed(tokens) || !seamFusesAt(post, n, *tokens))
    return std::nullopt;
  return s;
}

bool fuseBackward(BackwardSeam s, IRRewriter &rewriter) {
  ExpandCombineGradOp post = s.post;
  SmallVector<Value> operands{s.aggregate.getAcc(), s.aggregate.getGy(),
                              s.scale.getGpost(),   s.sinkhorn.getGP(),
                              post.getF(),          post.getPost(),
                              post.getX(),          post.getP(),
                              post.getBias(),       s.aggregate.getX(),
                              s.scale.getH(),       s.scale.getMs(),
                              s.aggregate.getPre(), s.sinkhorn.getLogits(),
                              s.project.getPhi(),   s.scale.getAlpha(),
                              s.scale.getBeta(),    s.project.getWeight()};
  SmallVector<Value> results(post->getResults());
  llvm::append_range(
      results,
      ValueRange{s.project.getGphi(), s.scale.getGalpha(), s.scale.getGbeta()});
  if (s.project.getGweight())
    results.push_back(s.project.getGweight());
  SmallVector<Operation *> chain{s.aggregate, s.sinkhorn, s.scale, s.project,
                                 post};
  SmallVector<Value> present(operands);
  llvm::erase(present, Value());
  FailureOr<Block::iterator> at = placement(chain, present, results);
  if (failed(at))
    return false;
  rewriter.setInsertionPoint(post->getBlock(), *at);
  SmallVector<Location> locs;
  for (Operation *op : chain)
    locs.push_back(op->getLoc());
  Value gweight = s.project.getGweight(), gbias = post.getGbias();
  auto fused = PostPreGradOp::create(
      rewriter, rewriter.getFusedLoc(locs), post.getGx().getType(),
      post.getGf().getType(), post.getGpost().getType(), post.getGP().getType(),
      gbias ? gbias.getType() : Type(), s.project.getGphi().getType(),
      s.scale.getGalpha().getType(), s.scale.getGbeta().getType(),
      gweight ? gweight.getType() : Type(), operands[0], operands[1],
      operands[2], operands[3], operands[4], operands[5], operands[6],
      operands[7], operands[8], operands[9], operands[10], operands[11],
      operands[12], operands[13], operands[14], operands[15], operands[16],
      operands[17], post.getNAttr(), post.getLayoutAttr(),
      s.project.getTf32Attr(), s.scale.getNormEpsAttr(),
      s.scale.getPreEpsAttr(), s.scale.getPostMultAttr(),
      s.sinkhorn.getModeAttr(), s.sinkhorn.getItersAttr(),
      s.sinkhorn.getEpsAttr());

  rewriter.replaceAllUsesWith(post.getGx(), fused.getGx());
  rewriter.replaceAllUsesWith(post.getGf(), fused.getGf());
  rewriter.replaceAllUsesWith(post.getGpost(), fused.getGpost());
  rewriter.replaceAllUsesWith(post.getGP(), fused.getGP());
  if (gbias)
    rewriter.replaceAllUsesWith(gbias, fused.getGbias());
  rewriter.replaceAllUsesWith(s.project.getGphi(), fused.getGphi());
  if (gweight)
    rewriter.replaceAllUsesWith(gweight, fused.getGweight());
  rewriter.replaceAllUsesWith(s.scale.getGalpha(), fused.getGalpha());
  rewriter.replaceAllUsesWith(s.scale.getGbeta(), fused.getGbeta());
  // Each op after its users: post reads project's gx, project scale's gh
  // and gms and aggregate's gx, scale the sinkhorn's and aggregate's values.
  for (Operation *op : llvm::reverse(chain))
    rewriter.eraseOp(op);
  return true;
}

} // namespace mlir::mhc::layers
