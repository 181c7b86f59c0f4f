//===- GradSums.cpp - x's gradient sums -> acc chains ---------------------===//
//
// An arith.addf tree of x's gradient contributions becomes a chain in
// which each backward op adds the previous one's gx (its `acc`), so no
// n-stream add is left in the backward IR.
//
//===----------------------------------------------------------------------===//

#include "layers/LayerSeam.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace mlir::mhc::layers {

namespace {

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

/// An inner add of a sum: `v`'s definition, used only by its parent, in
/// `block`.
arith::AddFOp innerAdd(Value v, Block *block) {
  auto add = v.getDefiningOp<arith::AddFOp>();
  return add && add->getBlock() == block && v.hasOneUse() ? add : nullptr;
}

} // namespace

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

} // namespace mlir::mhc::layers
