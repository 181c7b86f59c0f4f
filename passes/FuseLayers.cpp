//===- FuseLayers.cpp - the layer seam, forward and backward --------------===//
//
// expand_combine of layer l + mhc.pre of layer l+1 -> mhc.post_pre; x's
// gradient sums -> acc chains; the seam's gradient chain -> mhc.post_pre_grad
// (docs/design/seam.md). See the pass description in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "FusionRules.h"
#include "mhc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h" // getElementTypeOrSelf
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_FUSELAYERS
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

//===----------------------------------------------------------------------===//
// Shared rules
//===----------------------------------------------------------------------===//

/// The later of two ops of one block (either may be null).
Operation *later(Operation *a, Operation *b) {
  if (!a || !b)
    return a ? a : b;
  return a->isBeforeInBlock(b) ? b : a;
}

/// Where one op replacing `chain` (ops of one block) goes: before the last
/// of them when every other user of `results` (the replaced values) comes
/// after it; else right after the last definition of an `operand` in the
/// block, if that is before every such user. Failure otherwise.
FailureOr<Block::iterator> placement(ArrayRef<Operation *> chain,
                                     ValueRange operands, ValueRange results) {
  Block *block = chain.front()->getBlock();
  Operation *last = nullptr;
  for (Operation *op : chain)
    last = later(last, op);
  Operation *firstUser = nullptr;
  for (Value v : results) {
    for (Operation *user : v.getUsers()) {
      if (llvm::is_contained(chain, user))
        continue;
      Operation *inBlock = block->findAncestorOpInBlock(*user);
      if (!inBlock) // a successor block's use: not ours to move
        return failure();
      if (!firstUser || inBlock->isBeforeInBlock(firstUser))
        firstUser = inBlock;
    }
  }
  if (!firstUser || last->isBeforeInBlock(firstUser))
    return Block::iterator(last);
  Operation *lastDef = nullptr;
  for (Value v : operands)
    if (Operation *def = v.getDefiningOp())
      lastDef = later(lastDef, block->findAncestorOpInBlock(*def));
  if (!lastDef)
    return block->begin();
  if (!lastDef->isBeforeInBlock(firstUser))
    return failure();
  return std::next(Block::iterator(lastDef));
}

/// One parameter dtype per seam kernel: `v` (bias, alpha, beta, weight; may
/// be absent) has phi's element type.
bool sameParamType(Value v, Value phi) {
  return !v || getElementTypeOrSelf(v.getType()) ==
                   getElementTypeOrSelf(phi.getType());
}

/// Whether the seam's pre step runs fused at `tokens` (::mhc::preStepFuses);
/// if not, a remark on `at` says why the seam stays unfused.
bool seamFusesAt(Operation *at, int64_t n, int64_t tokens) {
  std::string slow = preStepSlowReason(n, tokens);
  if (slow.empty())
    return true;
  at->emitRemark() << "layer seam not fused, as its pre step would not be: "
                   << slow;
  return false;
}

/// The token count the fused op's token-indexed values agree on.
FailureOr<int64_t> tokensOf(ValueRange values) {
  SmallVector<Type> types;
  for (Value v : values)
    if (v)
      types.push_back(v.getType());
  return commonTokens(types);
}

//===----------------------------------------------------------------------===//
// Forward: expand_combine -> mhc.pre
//===----------------------------------------------------------------------===//

struct ForwardSeam {
  ExpandCombineOp post; // layer l's post step
  PreOp pre;            // layer l+1's pre step, reading post's result
};

/// The first pre (in block order) that reads `post`'s result as its x and
/// can form a seam with it.
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

//===----------------------------------------------------------------------===//
// Gradient sums: arith.addf trees of x's contributions -> acc chains
//===----------------------------------------------------------------------===//

/// The op whose `gx` is `v`, when it can take an acc: aggregate_grad,
/// project_grad or expand_combine_grad without one, `v` used only once.
Operation *accTaker(Value v) {
  Operation *op = v.getDefiningOp();
  if (!op || !v.hasOneUse())
    return nullptr;
  return TypeSwitch<Operation *, Operation *>(op)
      .Case<AggregateGradOp, ProjectGradOp, ExpandCombineGradOp>(
          [&](auto taker) -> Operation * {
            return taker.getGx() == v && !taker.getAcc() ? op : nullptr;
          })
      .Default([](Operation *) { return nullptr; });
}

Value gxOf(Operation *taker) {
  return TypeSwitch<Operation *, Value>(taker)
      .Case<AggregateGradOp, ProjectGradOp, ExpandCombineGradOp>(
          [](auto op) { return op.getGx(); });
}

void setAcc(Operation *taker, Value acc, RewriterBase &rewriter) {
  TypeSwitch<Operation *>(taker)
      .Case<AggregateGradOp, ProjectGradOp, ExpandCombineGradOp>([&](auto op) {
        rewriter.modifyOpInPlace(op, [&] { op.getAccMutable().assign(acc); });
      });
}

/// An addf tree: the root, its inner adds (each used only by its parent, in
/// the root's block), the contributions that can take an acc (in block
/// order) and the other leaves.
struct GradSum {
  SmallVector<arith::AddFOp> adds; // root first, each before its operands
  SmallVector<Operation *> takers;
  SmallVector<Value> others;
};

arith::AddFOp innerAdd(Value v, Block *block) {
  auto add = v.getDefiningOp<arith::AddFOp>();
  return add && add->getBlock() == block && v.hasOneUse() ? add : nullptr;
}

/// Whether `add` is not an inner node of a larger sum (innerAdd's converse).
bool isSumRoot(arith::AddFOp add) {
  Value r = add.getResult();
  if (!r.hasOneUse())
    return true;
  Operation *user = *r.getUsers().begin();
  return !isa<arith::AddFOp>(user) || user->getBlock() != add->getBlock();
}

GradSum collectSum(arith::AddFOp root) {
  GradSum sum;
  Block *block = root->getBlock();
  SmallVector<arith::AddFOp> stack{root};
  while (!stack.empty()) {
    arith::AddFOp add = stack.pop_back_val();
    sum.adds.push_back(add);
    for (Value operand : {add.getLhs(), add.getRhs()}) {
      if (arith::AddFOp inner = innerAdd(operand, block)) {
        stack.push_back(inner);
        continue;
      }
      Operation *taker = accTaker(operand);
      if (taker && taker->getBlock() == block)
        sum.takers.push_back(taker);
      else
        sum.others.push_back(operand);
    }
  }
  llvm::sort(sum.takers,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return sum;
}

/// Rewrites the sum as an acc chain: in block order each taker adds the
/// previous one's gx (the first the one other leaf, if any); the last gx
/// is the sum. Needs a taker, at most one other leaf, and that leaf defined
/// before the first taker.
bool threadSum(GradSum sum, DominanceInfo &dom, IRRewriter &rewriter) {
  if (sum.takers.empty() || sum.others.size() > 1)
    return false;
  Value acc = sum.others.empty() ? Value() : sum.others.front();
  if (acc && !dom.properlyDominates(acc, sum.takers.front()))
    return false;
  for (Operation *taker : sum.takers) {
    if (acc)
      setAcc(taker, acc, rewriter);
    acc = gxOf(taker);
  }
  rewriter.replaceAllUsesWith(sum.adds.front().getResult(), acc);
  for (arith::AddFOp add : sum.adds)
    rewriter.eraseOp(add);
  return true;
}

//===----------------------------------------------------------------------===//
// Backward: the seam's gradient chain -> mhc.post_pre_grad
//===----------------------------------------------------------------------===//

/// Layer l+1's pre-step gradients and layer l's expand_combine_grad, each
/// intermediate used only by the next op (the contract's "value").
struct BackwardSeam {
  AggregateGradOp aggregate; // acc = gx_next
  SinkhornGradOp sinkhorn;
  ScaleGradOp scale;
  ProjectGradOp project;    // acc = aggregate's gx
  ExpandCombineGradOp post; // gout = project's gx
};

/// The chain's ops, linked as the contract links them, or nullopt.
std::optional<BackwardSeam> linkBackward(ExpandCombineGradOp post) {
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

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

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
