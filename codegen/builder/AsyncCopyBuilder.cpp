//===- AsyncCopyBuilder.cpp - async copies, mbarriers, TMA ----------------===//

#include "builder/AsyncCopyBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;

void AsyncCopyBuilder::mbarrierInit(Value bar, int64_t arrivals) {
  NVVM::MBarrierInitOp::create(b, loc, bar, i32(arrivals), Value());
}
void AsyncCopyBuilder::fenceMbarrierInit() { NVVM::FenceMbarrierInitOp::create(b, loc); }
void AsyncCopyBuilder::mbarrierArriveExpectTx(Value bar, int64_t bytes) {
  mbarrierArriveExpectTx(bar, i32(bytes));
}
void AsyncCopyBuilder::mbarrierArriveExpectTx(Value bar, Value bytes) {
  NVVM::MBarrierArriveExpectTxOp::create(b, loc, Type(), bar, bytes,
                                         NVVM::MemScopeKind::CTA,
                                         /*relaxed=*/false, Value());
}
void AsyncCopyBuilder::mbarrierArrive(Value bar) {
  NVVM::MBarrierArriveOp::create(b, loc, Type(), bar, Value());
}
void AsyncCopyBuilder::mbarrierWait(Value bar, Value parity) {
  // Each try_wait may suspend the thread up to 10 ms (the hint) before the
  // op retries; it returns as soon as the phase completes.
  NVVM::MBarrierTryWaitParityOp::create(b, loc, bar, parity, i32(10000000));
}

/// `ptr` (shared) as a shared::cluster pointer, the form the bulk copies
/// take (PTX 8.0); a CTA's own shared addresses are valid cluster addresses.
static Value toCluster(AsyncCopyBuilder &kb, Value ptr) {
  auto cluster = LLVM::LLVMPointerType::get(
      kb.b.getContext(), static_cast<unsigned>(NVVM::NVVMMemorySpace::SharedCluster));
  return LLVM::AddrSpaceCastOp::create(kb.b, kb.loc, cluster, ptr);
}

void AsyncCopyBuilder::bulkCopy(Value dst, Value src, int64_t bytes, Value bar) {
  bulkCopy(dst, src, i32(bytes), bar);
}
void AsyncCopyBuilder::bulkCopy(Value dst, Value src, Value bytes, Value bar) {
  NVVM::CpAsyncBulkGlobalToSharedClusterOp::create(
      b, loc, toCluster(*this, dst), src, bar, bytes, Value(), Value());
}
void AsyncCopyBuilder::fenceProxyAsyncShared() {
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
}

void AsyncCopyBuilder::tensorLoad(Value dst, Value map, ValueRange coords, Value bar) {
  NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
      b, loc, toCluster(*this, dst), map, coords, bar, ValueRange{}, Value(), Value(),
      NVVM::TMALoadMode::TILE, /*isCTAOnly=*/false, NVVM::CTAGroupKindAttr(), Value());
}
void AsyncCopyBuilder::tensorLoad2d(Value dst, Value map, Value col, Value row,
                                    Value bar) {
  tensorLoad(dst, map, ValueRange{col, row}, bar);
}
void AsyncCopyBuilder::tensorLoad3d(Value dst, Value map, Value granule, Value row,
                                    Value bar) {
  tensorLoad(dst, map, ValueRange{i32(0), granule, row}, bar);
}
void AsyncCopyBuilder::tensorStore2d(Value map, Value src, Value col, Value row) {
  NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
      b, loc, map, src, ValueRange{col, row}, Value(), NVVM::TMAStoreMode::TILE,
      Value());
}
void AsyncCopyBuilder::bulkCommit() { NVVM::CpAsyncBulkCommitGroupOp::create(b, loc); }
void AsyncCopyBuilder::bulkWait(int64_t pending, bool readOnly) {
  NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, static_cast<uint32_t>(pending),
                                       readOnly ? b.getUnitAttr() : UnitAttr());
}

void AsyncCopyBuilder::copyAsync(Value dst, Value src, int64_t bytes,
                                 Value srcBytes) {
  // .cg (L2 only) exists for 16-byte copies; smaller ones use .ca.
  auto modifier = bytes == 16 ? NVVM::LoadCacheModifierKind::CG
                              : NVVM::LoadCacheModifierKind::CA;
  NVVM::CpAsyncOp::create(b, loc, dst, src, b.getI32IntegerAttr(bytes),
                          NVVM::LoadCacheModifierKindAttr::get(b.getContext(), modifier),
                          srcBytes);
}
void AsyncCopyBuilder::copyAsyncCommit() { NVVM::CpAsyncCommitGroupOp::create(b, loc); }
void AsyncCopyBuilder::copyAsyncWait(int64_t pending) {
  NVVM::CpAsyncWaitGroupOp::create(b, loc, b.getI32IntegerAttr(pending));
}
void AsyncCopyBuilder::copyAsyncArrive(Value bar) {
  NVVM::CpAsyncMBarrierArriveOp::create(b, loc, bar, /*noinc=*/true);
}

void AsyncCopyBuilder::setMaxRegisters(int64_t count, bool increase) {
  NVVM::SetMaxRegisterOp::create(b, loc, static_cast<uint32_t>(count),
                                 increase ? NVVM::SetMaxRegisterAction::increase
                                          : NVVM::SetMaxRegisterAction::decrease);
}
void AsyncCopyBuilder::counterAdd(Value ptr, Value v) {
  inlinePtx(Type(), {ptr, v}, "red.relaxed.gpu.global.add.u32 [$0], $1;", "l,r,~{memory}");
}
Value AsyncCopyBuilder::counterWaitUntil(Value ptr, Value target, int64_t ns) {
  // Polls with a short sleep between loads and gives up after `ns` (PTX
  // labels are local to the braces).
  std::string text = "{\n.reg .pred p;\n.reg .b32 c;\n.reg .b64 t0, t1;\n"
                     "mov.u64 t0, %globaltimer;\nmov.u32 $0, 1;\n"
                     "CW_POLL:\nld.relaxed.gpu.global.u32 c, [$1];\nsub.s32 c, c, $2;\n"
                     "setp.ge.s32 p, c, 0;\n@p bra CW_DONE;\n"
                     "mov.u64 t1, %globaltimer;\nsub.u64 t1, t1, t0;\n"
                     "setp.lt.u64 p, t1, " + std::to_string(ns) + ";\n"
                     "@p nanosleep.u32 32;\n@p bra CW_POLL;\nmov.u32 $0, 0;\nCW_DONE:\n}";
  Value got = inlinePtx(b.getI32Type(), {ptr, target}, text, "=r,l,r,~{memory}");
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, got, i32(0));
}
