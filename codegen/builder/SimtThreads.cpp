//===- SimtThreads.cpp - SimtBuilder's threads, barriers, warps -----------===//
//
// Thread and block indices, block, named and grid barriers, programmatic
// dependent launch, warp shuffles and sums, and inline PTX.
//
//===----------------------------------------------------------------------===//

#include "builder/SimtBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;

Value SimtBuilder::threadId() {
  return gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
}
Value SimtBuilder::blockId() {
  return gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
}
Value SimtBuilder::gridDim() {
  return gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
}
void SimtBuilder::barrier() { gpu::BarrierOp::create(b, loc); }

void SimtBuilder::gridBarrier(Value sync, int64_t blocks) {
  barrier();
  when(eq(threadId(), idx(0)), [&] {
    // The generation is read before arriving: it cannot move until this
    // block's arrival, so a change means every block has arrived. No
    // fences: the arrival's release (after the block barrier, so it covers
    // every thread's writes: causality order) and the generation's release
    // and acquire order the blocks' writes (CUTLASS's GenericBarrier: the
    // equivalent fence + red.relaxed, then ld.acquire); the two extra
    // fence.acq_rel.gpu cost 0.6-1.1 us per seam on the H100.
    // ${:uid} makes the labels unique per inline copy.
    inlinePtx(Type(),
              {globalPtr(sync, idx(0)), globalPtr(sync, idx(1)),
               i32(blocks - 1)},
              "{\n"
              ".reg .u32 %gen, %old, %now;\n"
              ".reg .pred %last, %same;\n"
              "ld.relaxed.gpu.global.u32 %gen, [$1];\n"
              "atom.acq_rel.gpu.global.add.u32 %old, [$0], 1;\n"
              "setp.eq.u32 %last, %old, $2;\n"
              "@!%last bra MHC_GRID_WAIT_${:uid};\n"
              "st.relaxed.gpu.global.u32 [$0], 0;\n"
              "red.release.gpu.global.add.u32 [$1], 1;\n"
              "bra MHC_GRID_DONE_${:uid};\n"
              "MHC_GRID_WAIT_${:uid}:\n"
              "ld.acquire.gpu.global.u32 %now, [$1];\n"
              "setp.eq.u32 %same, %now, %gen;\n"
              "@%same bra MHC_GRID_WAIT_${:uid};\n"
              "MHC_GRID_DONE_${:uid}:\n"
              "}",
              "l,l,r");
  });
  barrier();
}
void SimtBuilder::prefetchL1(Value ptr) {
  inlinePtx(Type(), {ptr}, "prefetch.global.L1 [$0];", "l");
}
void SimtBuilder::waitGridDependency() {
  inlinePtx(Type(), {}, "griddepcontrol.wait;", "");
}
void SimtBuilder::launchDependents() {
  inlinePtx(Type(), {}, "griddepcontrol.launch_dependents;", "");
}
void SimtBuilder::namedBarrier(Value id, int64_t threads) {
  NVVM::BarrierOp::create(b, loc, TypeRange{}, id, i32(threads),
                          NVVM::BarrierReductionAttr(), Value());
}

Value SimtBuilder::shuffleXor(Value v, int offset) {
  auto shuffle = [&](Value x) {
    return gpu::ShuffleOp::create(b, loc, x, offset, 32, gpu::ShuffleMode::XOR)
        .getShuffleResult();
  };
  if (!v.getType().isF64())
    return shuffle(v);
  // gpu.shuffle moves 32 bits: an f64 goes as its two halves.
  Type i32 = b.getI32Type(), i64 = b.getI64Type();
  Value bits = arith::BitcastOp::create(b, loc, i64, v);
  Value lo = arith::TruncIOp::create(b, loc, i32, bits);
  Value hi = arith::TruncIOp::create(
      b, loc, i32,
      arith::ShRUIOp::create(b, loc, bits, arith::ConstantIntOp::create(b, loc, i64, 32)));
  Value lo2 = arith::ExtUIOp::create(b, loc, i64, shuffle(lo));
  Value hi2 = arith::ShLIOp::create(b, loc, arith::ExtUIOp::create(b, loc, i64, shuffle(hi)),
                                    arith::ConstantIntOp::create(b, loc, i64, 32));
  return arith::BitcastOp::create(b, loc, b.getF64Type(),
                                  arith::OrIOp::create(b, loc, hi2, lo2));
}

void SimtBuilder::laneGroupSum(MutableArrayRef<Value> values, int lanes) {
  for (int offset = lanes / 2; offset >= 1; offset /= 2)
    for (Value &v : values)
      v = add(v, shuffleXor(v, offset));
}

void SimtBuilder::syncWarp() {
  NVVM::SyncWarpOp::create(b, loc, i32(-1));
}

Value SimtBuilder::inlinePtx(Type result, ValueRange operands, StringRef text,
                             StringRef constraints) {
  if (!result)
    result = LLVM::LLVMVoidType::get(b.getContext());
  auto op = LLVM::InlineAsmOp::create(
      b, loc, result, operands, text, constraints, /*has_side_effects=*/true,
      /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
  return op.getRes();
}
