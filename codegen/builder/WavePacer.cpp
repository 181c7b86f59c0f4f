//===- WavePacer.cpp - a wave of producers in lockstep --------------------===//

#include "builder/WavePacer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;

WavePacer::WavePacer(KernelBuilder &kb, Value counter, Value flag, Value peers,
                     int64_t epoch, int64_t lag, Value on)
    : kb(kb), counter(counter), flag(flag), peers(peers), on(on), epoch(epoch),
      lag(lag) {
  Value start = on ? kb.select(on, kb.i32(1), kb.i32(0)) : kb.i32(1);
  LLVM::StoreOp::create(kb.b, kb.loc, start, flag);
}

void WavePacer::before(Value i) {
  Value pacing = arith::CmpIOp::create(
      kb.b, kb.loc, arith::CmpIPredicate::ne,
      LLVM::LoadOp::create(kb.b, kb.loc, kb.b.getI32Type(), flag), kb.i32(0));
  Value e = kb.div(i, kb.idx(epoch));
  Value first = kb.eq(kb.rem(i, kb.idx(epoch)), kb.idx(0));
  kb.when(kb.andi(kb.andi(pacing, first), kb.lt(kb.idx(lag), e)), [&] {
    Value want = kb.indexToI32(kb.mul(kb.mul(kb.sub(e, kb.idx(lag)), kb.idx(epoch)), peers));
    Value got = kb.counterWaitUntil(counter, want, 20000);
    kb.when(arith::XOrIOp::create(kb.b, kb.loc, got, kb.boolean(true)),
            [&] { LLVM::StoreOp::create(kb.b, kb.loc, kb.i32(0), flag); });
  });
}

void WavePacer::after(Value i) {
  Value last = kb.eq(kb.rem(kb.add(i, kb.idx(1)), kb.idx(epoch)), kb.idx(0));
  kb.when(on ? kb.andi(on, last) : last, [&] { kb.counterAdd(counter, kb.i32(epoch)); });
}

void WavePacer::clear(KernelBuilder &kb, Value counters, int64_t waves,
                      int64_t threads) {
  kb.loop(kb.threadId(), kb.idx(waves), kb.idx(threads),
          [&](Value w) { kb.store(kb.f32(0.0), counters, w); });
}

void WavePacer::finish(Value per, Value count) {
  auto add = [&] {
    Value added = kb.mul(kb.div(count, kb.idx(epoch)), kb.idx(epoch));
    kb.counterAdd(counter, kb.indexToI32(kb.sub(per, added)));
  };
  if (on)
    kb.when(on, add);
  else
    add();
}
