//===- FusePre.cpp - project + scale + sinkhorn + aggregate -> mhc.pre ----===//

#include "FusionRules.h"
#include "mhc/Passes/Passes.h"

#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h" // getElementTypeOrSelf

namespace mlir::mhc {
#define GEN_PASS_DEF_FUSEPRE
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

/// The four ops of one layer's pre step.
struct PreChain {
  ProjectOp project;
  ScaleOp scale;
  SinkhornOp sinkhorn;
  AggregateOp aggregate;
};

/// Sinkhorns computing the same P: mode, iters and the eps in effect (an
/// absent eps is the default).
bool sameSinkhorn(SinkhornOp a, SinkhornOp b) {
  return a.getN() == b.getN() && a.getMode() == b.getMode() &&
         a.getIters() == b.getIters() &&
         sinkhornEps(a.getMode(), a.getEps()) ==
             sinkhornEps(b.getMode(), b.getEps());
}

/// The sinkhorn to fuse among those reading `scale`'s logits in its block:
/// the one whose P the layer's expand_combine reads (it also reads this
/// scale's post), else the first in block order.
SinkhornOp pickSinkhorn(ScaleOp scale) {
  SinkhornOp first;
  for (Operation *user : scale.getLogits().getUsers()) {
    auto sinkhorn = dyn_cast<SinkhornOp>(user);
    if (!sinkhorn || sinkhorn->getBlock() != scale->getBlock() ||
        sinkhorn.getN() != scale.getN())
      continue;
    for (Operation *pUser : sinkhorn.getP().getUsers())
      if (auto combine = dyn_cast<ExpandCombineOp>(pUser))
        if (combine.getPost() == scale.getPost())
          return sinkhorn;
    if (!first || sinkhorn->isBeforeInBlock(first))
      first = sinkhorn;
  }
  return first;
}

/// Whether the runtime would run this pre step fused at this token count
/// (::mhc::preStepFuses, which torch.ops.mhc.pre asks too); if not, a remark
/// on `aggregate` says why the chain stays as four ops.
bool fusesAt(AggregateOp aggregate, int64_t n, int64_t tokens) {
  std::string slow = preStepSlowReason(n, tokens);
  if (slow.empty())
    return true;
  aggregate.emitRemark() << "pre step not fused: " << slow;
  return false;
}

/// The chain ending in `aggregate`, if it can become one mhc.pre.
std::optional<PreChain> matchChain(AggregateOp aggregate, DominanceInfo &dom) {
  auto scale = aggregate.getPre().getDefiningOp<ScaleOp>();
  if (!scale || aggregate.getPre() != scale.getPre())
    return std::nullopt;
  auto project = scale.getH().getDefiningOp<ProjectOp>();
  if (!project || scale.getMs() != project.getMs() ||
      project.getX() != aggregate.getX())
    return std::nullopt;
  uint64_t n = aggregate.getN();
  if (project.getN() != n || scale.getN() != n ||
      project.getLayout() != aggregate.getLayout())
    return std::nullopt;
  SinkhornOp sinkhorn = pickSinkhorn(scale);
  if (!sinkhorn)
    return std::nullopt;

  // One kernel, one parameter dtype.
  Type param = getElementTypeOrSelf(project.getPhi().getType());
  for (Value v : {scale.getAlpha(), scale.getBeta(), project.getWeight()})
    if (v && getElementTypeOrSelf(v.getType()) != param)
      return std::nullopt;

  // mhc.pre replaces all four at the first of them, the project (the others
  // read its results): the four must share a block, and scale's alpha and
  // beta must already be defined there (project's operands are).
  Block *block = project->getBlock();
  if (scale->getBlock() != block || aggregate->getBlock() != block)
    return std::nullopt;
  for (Value v : {scale.getAlpha(), scale.getBeta()})
    if (!dom.properlyDominates(v, project))
      return std::nullopt;

  // Each result type comes from the op it replaces, so users see the same
  // types; they must agree on M where one of them refined it.
  SmallVector<Type> types{
      project.getX().getType(),      project.getH().getType(),
      project.getMs().getType(),     scale.getPre().getType(),
      scale.getPost().getType(),     scale.getLogits().getType(),
      sinkhorn.getP().getType(),     aggregate.getY().getType()};
  FailureOr<int64_t> tokens = commonTokens(types);
  if (failed(tokens) || !fusesAt(aggregate, n, *tokens))
    return std::nullopt;
  return PreChain{project, scale, sinkhorn, aggregate};
}

void fuse(PreChain c, IRRewriter &rewriter) {
  rewriter.setInsertionPoint(c.project);
  Location loc = rewriter.getFusedLoc({c.project.getLoc(), c.scale.getLoc(),
                                       c.sinkhorn.getLoc(),
                                       c.aggregate.getLoc()});
  auto pre = PreOp::create(
      rewriter, loc, c.project.getH().getType(), c.project.getMs().getType(),
      c.scale.getPre().getType(), c.scale.getPost().getType(),
      c.scale.getLogits().getType(), c.sinkhorn.getP().getType(),
      c.aggregate.getY().getType(), c.project.getX(), c.project.getPhi(),
      c.scale.getAlpha(), c.scale.getBeta(), c.project.getWeight(),
      c.project.getNAttr(), c.project.getLayoutAttr(), c.project.getTf32Attr(),
      c.scale.getNormEpsAttr(), c.scale.getPreEpsAttr(),
      c.scale.getPostMultAttr(), c.sinkhorn.getModeAttr(),
      c.sinkhorn.getItersAttr(), c.sinkhorn.getEpsAttr());

  // Duplicates of the fused sinkhorn take its P; other sinkhorns stay and
  // read the fused logits.
  SmallVector<SinkhornOp> sinkhorns{c.sinkhorn};
  for (Operation *user : c.scale.getLogits().getUsers())
    if (auto other = dyn_cast<SinkhornOp>(user))
      if (other != c.sinkhorn && sameSinkhorn(other, c.sinkhorn))
        sinkhorns.push_back(other);
  for (SinkhornOp s : sinkhorns) {
    rewriter.replaceAllUsesWith(s.getP(), pre.getP());
    rewriter.eraseOp(s);
  }
  rewriter.replaceOp(c.aggregate, pre.getY());
  rewriter.replaceOp(c.scale, {pre.getPre(), pre.getPost(), pre.getLogits()});
  rewriter.replaceOp(c.project, {pre.getH(), pre.getMs()});
}

struct FusePrePass : mlir::mhc::impl::FusePreBase<FusePrePass> {
  void runOnOperation() override {
    SmallVector<AggregateOp> aggregates;
    getOperation()->walk([&](AggregateOp op) { aggregates.push_back(op); });
    // Fusing only erases the matched chain's ops; an aggregate collected
    // here is never one of another chain's (each chain has its own).
    DominanceInfo &dom = getAnalysis<DominanceInfo>();
    IRRewriter rewriter(&getContext());
    for (AggregateOp aggregate : aggregates)
      if (std::optional<PreChain> chain = matchChain(aggregate, dom))
        fuse(*chain, rewriter);
  }
};

} // namespace
