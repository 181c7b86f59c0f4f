//===- SeamRules.cpp - what every layer fusion checks ---------------------===//
//
// Where a fused op goes in its block, the seam's parameter dtypes, its
// token count and whether its pre step runs fused (mhc-fuse-layers'
// forward and backward both ask).
//
//===----------------------------------------------------------------------===//

#include "layers/LayerSeam.h"

#include "FusionRules.h"

#include "mlir/IR/TypeUtilities.h" // getElementTypeOrSelf

using namespace mlir;

namespace mlir::mhc::layers {

/// The later of two ops of one block (either may be null).
static Operation *later(Operation *a, Operation *b) {
  if (!a || !b)
    return a ? a : b;
  return a->isBeforeInBlock(b) ? b : a;
}

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

bool sameParamType(Value v, Value phi) {
  return !v || getElementTypeOrSelf(v.getType()) ==
                   getElementTypeOrSelf(phi.getType());
}

bool seamFusesAt(Operation *at, int64_t n, int64_t tokens) {
  std::string slow = preStepSlowReason(n, tokens);
  if (slow.empty())
    return true;
  at->emitRemark() << "layer seam not fused, as its pre step would not be: "
                   << slow;
  return false;
}

FailureOr<int64_t> tokensOf(ValueRange values) {
  SmallVector<Type> types;
  for (Value v : values)
    if (v)
      types.push_back(v.getType());
  return commonTokens(types);
}

} // namespace mlir::mhc::layers
