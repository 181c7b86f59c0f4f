//===- SimtControl.cpp - SimtBuilder's loops and branches -----------------===//
//
// scf loops and branches with the kernel's values carried through them,
// and the in-order sum that split-K reductions use.
//
//===----------------------------------------------------------------------===//

#include "builder/SimtBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::mhc;

void SimtBuilder::loop(Value lb, Value ub, Value step,
                       function_ref<void(Value)> body) {
  scf::ForOp::create(b, loc, lb, ub, step, ValueRange{},
                     [&](OpBuilder &nested, Location, Value iv, ValueRange) {
                       OpBuilder::InsertionGuard guard(b);
                       b.setInsertionPoint(nested.getInsertionBlock(),
                                           nested.getInsertionPoint());
                       body(iv);
                       scf::YieldOp::create(b, loc);
                     });
}

SmallVector<Value>
SimtBuilder::loop(Value lb, Value ub, Value step, ValueRange init,
                  function_ref<SmallVector<Value>(Value, ValueRange)> body) {
  auto forOp = scf::ForOp::create(
      b, loc, lb, ub, step, init,
      [&](OpBuilder &nested, Location, Value iv, ValueRange iter) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(),
                            nested.getInsertionPoint());
        SmallVector<Value> next = body(iv, iter);
        scf::YieldOp::create(b, loc, next);
      });
  return SmallVector<Value>(forOp.getResults());
}

Value SimtBuilder::sumInOrder(Value begin, Value end, int64_t inFlight,
                              function_ref<Value(Value)> load) {
  Value steps = div(sub(end, begin), idx(inFlight));
  Value whole = add(begin, mul(steps, idx(inFlight)));
  auto addAll = [&](Value acc, ArrayRef<Value> values) {
    for (Value v : values)
      acc = add(acc, v);
    return acc;
  };
  SmallVector<Value> sum = loop(
      begin, whole, idx(inFlight), ValueRange{f32(0.0)},
      [&](Value i, ValueRange it) -> SmallVector<Value> {
        SmallVector<Value> v;
        for (int64_t u = 0; u < inFlight; ++u)
          v.push_back(load(add(i, idx(u))));
        return {addAll(it[0], v)};
      });
  return loop(whole, end, idx(1), sum,
              [&](Value i, ValueRange it) -> SmallVector<Value> {
                return {add(it[0], load(i))};
              })[0];
}

void SimtBuilder::when(Value cond, function_ref<void()> body) {
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  body();
}

SmallVector<Value>
SimtBuilder::ifElse(Value cond, function_ref<SmallVector<Value>()> then,
                    function_ref<SmallVector<Value>()> otherwise) {
  SmallVector<Value> thenValues, elseValues;
  auto ifOp = scf::IfOp::create(
      b, loc, cond,
      [&](OpBuilder &nested, Location) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(), nested.getInsertionPoint());
        scf::YieldOp::create(b, loc, then());
      },
      [&](OpBuilder &nested, Location) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(), nested.getInsertionPoint());
        scf::YieldOp::create(b, loc, otherwise());
      });
  return SmallVector<Value>(ifOp.getResults());
}

Value SimtBuilder::opaque(Value v) {
  Value moved = inlinePtx(b.getI64Type(), {indexToI64(v)}, "mov.b64 $0, $1;", "=l,l");
  return i64ToIndex(moved);
}
