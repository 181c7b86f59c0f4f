//===- KernelBuilder.cpp - terse construction of gpu.func kernels ---------===//

#include "builder/KernelBuilder.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

static bool isFloatLike(Value v) {
  return isa<FloatType>(getElementTypeOrSelf(v.getType()));
}

Value KernelBuilder::idx(int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}
Value KernelBuilder::i32(int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
}
Value KernelBuilder::f32(double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}
Value KernelBuilder::f64(double v) {
  return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
}
Value KernelBuilder::constLike(Value like, double v) {
  return like.getType().isF64() ? f64(v) : f32(v);
}
Value KernelBuilder::boolean(bool v) {
  return arith::ConstantIntOp::create(b, loc, b.getI1Type(), v);
}

Value KernelBuilder::add(Value a, Value c) {
  if (isFloatLike(a))
    return arith::AddFOp::create(b, loc, a, c);
  return arith::AddIOp::create(b, loc, a, c);
}
Value KernelBuilder::sub(Value a, Value c) {
  if (isFloatLike(a))
    return arith::SubFOp::create(b, loc, a, c);
  return arith::SubIOp::create(b, loc, a, c);
}
Value KernelBuilder::mul(Value a, Value c) {
  if (isFloatLike(a))
    return arith::MulFOp::create(b, loc, a, c);
  return arith::MulIOp::create(b, loc, a, c);
}
Value KernelBuilder::div(Value a, Value c) {
  if (isFloatLike(a))
    return arith::DivFOp::create(b, loc, a, c);
  return arith::DivUIOp::create(b, loc, a, c);
}
Value KernelBuilder::rem(Value a, Value c) {
  return arith::RemUIOp::create(b, loc, a, c);
}
Value KernelBuilder::min(Value a, Value c) {
  if (isFloatLike(a))
    return arith::MinimumFOp::create(b, loc, a, c);
  return arith::MinUIOp::create(b, loc, a, c);
}
Value KernelBuilder::max(Value a, Value c) {
  // maximumf propagates NaN, as the float64 reference does.
  if (isFloatLike(a))
    return arith::MaximumFOp::create(b, loc, a, c);
  return arith::MaxUIOp::create(b, loc, a, c);
}
Value KernelBuilder::neg(Value a) { return arith::NegFOp::create(b, loc, a); }
Value KernelBuilder::fma(Value a, Value c, Value d) {
  return math::FmaOp::create(b, loc, a, c, d);
}
Value KernelBuilder::lt(Value a, Value c) {
  if (isFloatLike(a))
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, a, c);
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c);
}
Value KernelBuilder::eq(Value a, Value c) {
  if (isFloatLike(a))
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, a, c);
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, a, c);
}
Value KernelBuilder::select(Value cond, Value t, Value f) {
  return arith::SelectOp::create(b, loc, cond, t, f);
}
Value KernelBuilder::andi(Value a, Value c) {
  return arith::AndIOp::create(b, loc, a, c);
}

Value KernelBuilder::exp(Value a) { return math::ExpOp::create(b, loc, a); }
Value KernelBuilder::log(Value a) { return math::LogOp::create(b, loc, a); }
Value KernelBuilder::exp2(Value a) { return math::Exp2Op::create(b, loc, a); }
/// An f32 -> f32 NVVM intrinsic (a single MUFU instruction).
static Value nvvmUnary(KernelBuilder &kb, const char *intrinsic, Value a) {
  return LLVM::CallIntrinsicOp::create(kb.b, kb.loc, kb.b.getF32Type(),
                                       kb.b.getStringAttr(intrinsic), ValueRange{a})
      .getResult(0);
}
Value KernelBuilder::log2(Value a) {
  // libdevice's log2f is a ~20-instruction polynomial; lg2.approx.f32 is one
  // MUFU instruction (max abs error ~2^-22 on [0.5, 2]).
  return nvvmUnary(*this, "llvm.nvvm.lg2.approx.f", a);
}
Value KernelBuilder::sqrt(Value a) { return math::SqrtOp::create(b, loc, a); }
Value KernelBuilder::rsqrtApprox(Value a) {
  return nvvmUnary(*this, "llvm.nvvm.rsqrt.approx.f", a);
}
Value KernelBuilder::sigmoidApprox(Value a) {
  Value e = nvvmUnary(*this, "llvm.nvvm.ex2.approx.f32", mul(a, f32(-1.4426950408889634)));
  return nvvmUnary(*this, "llvm.nvvm.rcp.approx.ftz.f", add(f32(1.0), e));
}
Value KernelBuilder::sigmoid(Value a) {
  Value one = constLike(a, 1.0);
  return div(one, add(one, exp(neg(a))));
}

Value KernelBuilder::toF32(Value a) {
  Type t = a.getType();
  Type f32Type = b.getF32Type();
  if (auto vt = dyn_cast<VectorType>(t)) {
    if (vt.getElementType().isF32())
      return a;
    return arith::ExtFOp::create(b, loc, vt.clone(f32Type), a);
  }
  if (t.isF32())
    return a;
  return arith::ExtFOp::create(b, loc, f32Type, a);
}

Value KernelBuilder::toF64(Value a) {
  if (a.getType().isF64())
    return a;
  return arith::ExtFOp::create(b, loc, b.getF64Type(), a);
}

Value KernelBuilder::toType(Value a, Type elemType) {
  Type t = a.getType();
  auto vt = dyn_cast<VectorType>(t);
  Type target = vt ? Type(vt.clone(elemType)) : elemType;
  if (target == t)
    return a;
  return arith::TruncFOp::create(b, loc, target, a);
}

Value KernelBuilder::indexToI64(Value a) {
  return arith::IndexCastOp::create(b, loc, b.getI64Type(), a);
}
Value KernelBuilder::indexToI32(Value a) {
  return arith::IndexCastOp::create(b, loc, b.getI32Type(), a);
}
Value KernelBuilder::i64ToIndex(Value a) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), a);
}

static LLVM::InlineAsmOp ptx(KernelBuilder &kb, Type result, ValueRange operands,
                             StringRef text, StringRef constraints);

Value KernelBuilder::load(Value mem, Value offset) {
  return memref::LoadOp::create(b, loc, mem, ValueRange{offset});
}
void KernelBuilder::store(Value v, Value mem, Value offset) {
  memref::StoreOp::create(b, loc, v, mem, ValueRange{offset});
}

static int64_t elementBytes(Value mem) {
  return cast<MemRefType>(mem.getType()).getElementTypeBitWidth() / 8;
}

Value KernelBuilder::vload(Value mem, Value offset, int64_t width) {
  auto memType = cast<MemRefType>(mem.getType());
  auto vt = VectorType::get({width}, memType.getElementType());
  auto op = vector::LoadOp::create(b, loc, vt, mem, ValueRange{offset});
  op.setAlignment(static_cast<uint64_t>(width * elementBytes(mem)));
  return op;
}

void KernelBuilder::vstore(Value vec, Value mem, Value offset) {
  int64_t width = cast<VectorType>(vec.getType()).getNumElements();
  if (streamingStores && width * elementBytes(mem) == 16 &&
      !cast<MemRefType>(mem.getType()).getMemorySpace()) {
    // LLVM's NVPTX backend drops !nontemporal: the cache hint is written out.
    Value words = vector::BitCastOp::create(
        b, loc, VectorType::get({4}, b.getI32Type()), vec);
    SmallVector<Value> operands = {globalPtr(mem, offset)};
    for (int64_t k = 0; k < 4; ++k)
      operands.push_back(extract(words, k));
    ptx(*this, Type(), operands, "st.global.cs.v4.b32 [$0], {$1, $2, $3, $4};",
        "l,r,r,r,r");
    return;
  }
  auto op = vector::StoreOp::create(b, loc, vec, mem, ValueRange{offset});
  op.setAlignment(static_cast<uint64_t>(width * elementBytes(mem)));
}

SmallVector<Value> KernelBuilder::loadF32(Value mem, Value offset,
                                          int64_t width) {
  SmallVector<Value> out;
  if (width == 1) {
    out.push_back(toF32(load(mem, offset)));
    return out;
  }
  Value v = toF32(vload(mem, offset, width));
  for (int64_t i = 0; i < width; ++i)
    out.push_back(extract(v, i));
  return out;
}

void KernelBuilder::storeFrom(ArrayRef<Value> values, Value mem,
                              Value offset) {
  Type elem = cast<MemRefType>(mem.getType()).getElementType();
  if (values.size() == 1) {
    store(toType(values[0], elem), mem, offset);
    return;
  }
  vstore(toType(vector(values), elem), mem, offset);
}

Value KernelBuilder::extract(Value vec, int64_t i) {
  return vector::ExtractOp::create(b, loc, vec, ArrayRef<int64_t>{i});
}

Value KernelBuilder::vector(ArrayRef<Value> elems) {
  auto vt = VectorType::get({static_cast<int64_t>(elems.size())},
                            elems.front().getType());
  return vector::FromElementsOp::create(b, loc, vt, elems);
}

void KernelBuilder::loop(Value lb, Value ub, Value step,
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
KernelBuilder::loop(Value lb, Value ub, Value step, ValueRange init,
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

void KernelBuilder::when(Value cond, function_ref<void()> body) {
  auto ifOp = scf::IfOp::create(b, loc, cond, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  body();
}

Value KernelBuilder::threadId() {
  return gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
}
Value KernelBuilder::blockId() {
  return gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
}
Value KernelBuilder::gridDim() {
  return gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
}
void KernelBuilder::barrier() { gpu::BarrierOp::create(b, loc); }

Value KernelBuilder::shuffleXor(Value v, int offset) {
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

void KernelBuilder::laneGroupSum(MutableArrayRef<Value> values, int lanes) {
  for (int offset = lanes / 2; offset >= 1; offset /= 2)
    for (Value &v : values)
      v = add(v, shuffleXor(v, offset));
}

void KernelBuilder::syncWarp() {
  NVVM::SyncWarpOp::create(b, loc, i32(-1));
}

/// The address of element `elem` of `mem` in its address space, as an index.
static Value addressOf(KernelBuilder &kb, Value mem, Value elem) {
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(kb.b, kb.loc, mem);
  int64_t bytes = cast<MemRefType>(mem.getType()).getElementTypeBitWidth() / 8;
  return kb.add(base, kb.mul(elem, kb.idx(bytes)));
}

static Value pointerTo(KernelBuilder &kb, Value mem, Value elem,
                       unsigned addressSpace) {
  Value addr = addressOf(kb, mem, elem);
  Value i64 = arith::IndexCastOp::create(kb.b, kb.loc, kb.b.getI64Type(), addr);
  auto ptrType = LLVM::LLVMPointerType::get(kb.b.getContext(), addressSpace);
  return LLVM::IntToPtrOp::create(kb.b, kb.loc, ptrType, i64);
}

Value KernelBuilder::sharedPtr(Value mem, Value elem) {
  return pointerTo(*this, mem, elem, static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared));
}
Value KernelBuilder::globalPtr(Value mem, Value elem) {
  return pointerTo(*this, mem, elem, static_cast<unsigned>(NVVM::NVVMMemorySpace::Global));
}
Value KernelBuilder::bytePtr(Value ptr, Value bytes) {
  return LLVM::GEPOp::create(b, loc, ptr.getType(), b.getI8Type(), ptr,
                             ValueRange{indexToI64(bytes)});
}
void KernelBuilder::mbarrierInit(Value bar, int64_t arrivals) {
  NVVM::MBarrierInitOp::create(b, loc, bar, i32(arrivals), Value());
}
void KernelBuilder::fenceMbarrierInit() { NVVM::FenceMbarrierInitOp::create(b, loc); }
void KernelBuilder::mbarrierArriveExpectTx(Value bar, int64_t bytes) {
  mbarrierArriveExpectTx(bar, i32(bytes));
}
void KernelBuilder::mbarrierArriveExpectTx(Value bar, Value bytes) {
  NVVM::MBarrierArriveExpectTxOp::create(b, loc, Type(), bar, bytes,
                                         NVVM::MemScopeKind::CTA,
                                         /*relaxed=*/false, Value());
}
void KernelBuilder::mbarrierArrive(Value bar) {
  NVVM::MBarrierArriveOp::create(b, loc, Type(), bar, Value());
}
void KernelBuilder::mbarrierWait(Value bar, Value parity) {
  // Each try_wait may suspend the thread up to 10 ms (the hint) before the
  // op retries; it returns as soon as the phase completes.
  NVVM::MBarrierTryWaitParityOp::create(b, loc, bar, parity, i32(10000000));
}
void KernelBuilder::bulkCopy(Value dst, Value src, int64_t bytes, Value bar) {
  bulkCopy(dst, src, i32(bytes), bar);
}
void KernelBuilder::bulkCopy(Value dst, Value src, Value bytes, Value bar) {
  // The shared::cluster form (PTX 8.0); a CTA's own shared addresses are
  // valid cluster addresses.
  auto cluster = LLVM::LLVMPointerType::get(
      b.getContext(), static_cast<unsigned>(NVVM::NVVMMemorySpace::SharedCluster));
  Value dstCluster = LLVM::AddrSpaceCastOp::create(b, loc, cluster, dst);
  NVVM::CpAsyncBulkGlobalToSharedClusterOp::create(
      b, loc, dstCluster, src, bar, bytes, Value(), Value());
}
void KernelBuilder::copyAsync(Value dst, Value src, int64_t bytes,
                              Value srcBytes) {
  // .cg (L2 only) exists for 16-byte copies; smaller ones use .ca.
  auto modifier = bytes == 16 ? NVVM::LoadCacheModifierKind::CG
                              : NVVM::LoadCacheModifierKind::CA;
  NVVM::CpAsyncOp::create(b, loc, dst, src, b.getI32IntegerAttr(bytes),
                          NVVM::LoadCacheModifierKindAttr::get(b.getContext(), modifier),
                          srcBytes);
}
void KernelBuilder::copyAsyncCommit() { NVVM::CpAsyncCommitGroupOp::create(b, loc); }
void KernelBuilder::copyAsyncWait(int64_t pending) {
  NVVM::CpAsyncWaitGroupOp::create(b, loc, b.getI32IntegerAttr(pending));
}

void KernelBuilder::fenceProxyAsyncShared() {
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
}

Value KernelBuilder::wgmmaDescriptorSwizzled(Value mem, Value elem,
                                             int64_t lbo, int64_t sbo) {
  // Layout type 1 in bits 62-63: 128-byte swizzle.
  return arith::OrIOp::create(
      b, loc, wgmmaDescriptor(mem, elem, lbo, sbo),
      arith::ConstantIntOp::create(b, loc, b.getI64Type(), int64_t(1) << 62));
}

/// Inline PTX with side effects; `result` is its type (a struct for
/// several values) or null for none.
static LLVM::InlineAsmOp ptx(KernelBuilder &kb, Type result, ValueRange operands,
                             StringRef text, StringRef constraints) {
  if (!result)
    result = LLVM::LLVMVoidType::get(kb.b.getContext());
  return LLVM::InlineAsmOp::create(
      kb.b, kb.loc, result, operands, text, constraints, /*has_side_effects=*/true,
      /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(kb.b.getContext(), LLVM::AsmDialect::AD_ATT),
      ArrayAttr());
}

Value KernelBuilder::wgmmaDescriptor(Value mem, Value elem, int64_t lbo,
                                     int64_t sbo) {
  // Bits 0-13: the shared address / 16; 16-29: lbo / 16; 32-45: sbo / 16;
  // 62-63: swizzle mode (0: none).
  Value start = andi(div(addressOf(*this, mem, elem), idx(16)), idx(0x3FFF));
  Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), start);
  int64_t fixed = ((lbo >> 4) << 16) | ((sbo >> 4) << 32);
  return arith::OrIOp::create(
      b, loc, i64, arith::ConstantIntOp::create(b, loc, b.getI64Type(), fixed));
}
void KernelBuilder::wgmmaFence() { NVVM::WgmmaFenceAlignedOp::create(b, loc); }
void KernelBuilder::wgmmaCommit() { NVVM::WgmmaGroupSyncAlignedOp::create(b, loc); }
void KernelBuilder::wgmmaWait(int64_t pending) {
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, pending);
}
/// acc += A B through inline PTX, the accumulators tied in place ("+f"):
/// NVVM's wgmma op has no register-A form and no operand for the
/// transpose immediates we need. `a` is either the four words of A's
/// register fragment or A's shared-memory descriptor (one i64). The shape
/// is m64nNkK with N = 2 acc.size(); `types` is "f32.<a>.<b>", `immediates`
/// what follows the scale-d predicate (scale-a, scale-b, transposes).
static void wgmmaInline(KernelBuilder &kb, MutableArrayRef<Value> acc,
                        ArrayRef<Value> a, Value desc, int64_t k,
                        StringRef types, StringRef immediates) {
  int64_t n = static_cast<int64_t>(acc.size());
  int64_t na = static_cast<int64_t>(a.size()); // 4 registers or 1 descriptor
  auto arg = [](int64_t i) { return "$" + std::to_string(i); };
  std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, " + arg(n + na + 1) +
                     ", 0;\nwgmma.mma_async.sync.aligned.m64n" +
                     std::to_string(2 * n) + "k" + std::to_string(k) + "." +
                     types.str() + " {";
  std::string constraints;
  for (int64_t i = 0; i < n; ++i) {
    text += (i ? ", " : "") + arg(i);
    constraints += "=f,";
  }
  text += "}, ";
  if (na == 1) {
    text += arg(n);
    constraints += "l,";
  } else {
    text += "{" + arg(n) + ", " + arg(n + 1) + ", " + arg(n + 2) + ", " + arg(n + 3) + "}";
    constraints += "r,r,r,r,";
  }
  text += ", " + arg(n + na) + ", p, " + immediates.str() + ";\n}";
  constraints += "l,r";
  SmallVector<Value> operands;
  for (Value v : a) // f32-typed words go in as their bits
    operands.push_back(v.getType().isF32()
                           ? arith::BitcastOp::create(kb.b, kb.loc, kb.b.getI32Type(), v)
                           : v);
  operands.push_back(desc);
  operands.push_back(kb.i32(1)); // scale-d: D = A B + D
  for (int64_t i = 0; i < n; ++i) {
    constraints += "," + std::to_string(i);
    operands.push_back(acc[i]);
  }
  SmallVector<Type> types32(n, kb.b.getF32Type());
  auto result = LLVM::LLVMStructType::getLiteral(kb.b.getContext(), types32);
  auto op = ptx(kb, result, operands, text, constraints);
  for (int64_t i = 0; i < n; ++i)
    acc[i] = LLVM::ExtractValueOp::create(kb.b, kb.loc, op.getRes(), ArrayRef<int64_t>{i});
}

void KernelBuilder::wgmmaBf16(MutableArrayRef<Value> acc, ArrayRef<Value> a,
                              Value desc) {
  wgmmaInline(*this, acc, a, desc, 16, "f32.bf16.bf16", "1, 1, 0");
}
void KernelBuilder::wgmmaBf16Shared(MutableArrayRef<Value> acc, Value descA,
                                    Value descB, bool transA, bool transB) {
  std::string imm = std::string("1, 1, ") + (transA ? "1" : "0") + ", " + (transB ? "1" : "0");
  wgmmaInline(*this, acc, {descA}, descB, 16, "f32.bf16.bf16", imm);
}

void KernelBuilder::wgmmaF16Shared(MutableArrayRef<Value> acc, Value descA,
                                   Value descB) {
  wgmmaInline(*this, acc, {descA}, descB, 16, "f32.f16.f16", "1, 1, 0, 0");
}

SmallVector<Value> KernelBuilder::ldmatrixX4Trans(Value ptr) {
  Type i32 = b.getI32Type();
  Value at = LLVM::PtrToIntOp::create(b, loc, i32, ptr);
  auto result = LLVM::LLVMStructType::getLiteral(b.getContext(), {i32, i32, i32, i32});
  auto op = ptx(*this, result, {at},
                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4];",
                "=r,=r,=r,=r,r");
  SmallVector<Value> words;
  for (int64_t i = 0; i < 4; ++i)
    words.push_back(LLVM::ExtractValueOp::create(b, loc, op.getRes(), ArrayRef<int64_t>{i}));
  return words;
}
Value KernelBuilder::opaque(Value v) {
  Value moved = ptx(*this, b.getI64Type(), {indexToI64(v)}, "mov.b64 $0, $1;", "=l,l").getRes();
  return i64ToIndex(moved);
}
void KernelBuilder::stmatrixX4Trans(Value ptr, ArrayRef<Value> words) {
  Value at = LLVM::PtrToIntOp::create(b, loc, b.getI32Type(), ptr);
  ptx(*this, Type(), {at, words[0], words[1], words[2], words[3]},
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [$0], {$1, $2, $3, $4};",
      "r,r,r,r,r,~{memory}");
}

void KernelBuilder::tensorLoad2d(Value dst, Value map, Value col, Value row,
                                 Value bar) {
  auto cluster = LLVM::LLVMPointerType::get(
      b.getContext(), static_cast<unsigned>(NVVM::NVVMMemorySpace::SharedCluster));
  Value dstCluster = LLVM::AddrSpaceCastOp::create(b, loc, cluster, dst);
  NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
      b, loc, dstCluster, map, ValueRange{col, row}, bar, ValueRange{}, Value(),
      Value(), NVVM::TMALoadMode::TILE, /*isCTAOnly=*/false,
      NVVM::CTAGroupKindAttr(), Value());
}
void KernelBuilder::tensorStore2d(Value map, Value src, Value col, Value row) {
  NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
      b, loc, map, src, ValueRange{col, row}, Value(), NVVM::TMAStoreMode::TILE,
      Value());
}
void KernelBuilder::bulkCommit() { NVVM::CpAsyncBulkCommitGroupOp::create(b, loc); }
void KernelBuilder::bulkWait(int64_t pending, bool readOnly) {
  NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, static_cast<uint32_t>(pending),
                                       readOnly ? b.getUnitAttr() : UnitAttr());
}
void KernelBuilder::counterAdd(Value ptr, Value v) {
  ptx(*this, Type(), {ptr, v}, "red.relaxed.gpu.global.add.u32 [$0], $1;", "l,r,~{memory}");
}
Value KernelBuilder::counterWaitUntil(Value ptr, Value target, int64_t ns) {
  // Polls with a short sleep between loads and gives up after `ns` (PTX
  // labels are local to the braces).
  std::string text = "{\n.reg .pred p;\n.reg .b32 c;\n.reg .b64 t0, t1;\n"
                     "mov.u64 t0, %globaltimer;\nmov.u32 $0, 1;\n"
                     "CW_POLL:\nld.relaxed.gpu.global.u32 c, [$1];\nsub.s32 c, c, $2;\n"
                     "setp.ge.s32 p, c, 0;\n@p bra CW_DONE;\n"
                     "mov.u64 t1, %globaltimer;\nsub.u64 t1, t1, t0;\n"
                     "setp.lt.u64 p, t1, " + std::to_string(ns) + ";\n"
                     "@p nanosleep.u32 32;\n@p bra CW_POLL;\nmov.u32 $0, 0;\nCW_DONE:\n}";
  Value got = ptx(*this, b.getI32Type(), {ptr, target}, text, "=r,l,r,~{memory}").getRes();
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, got, i32(0));
}

void KernelBuilder::setMaxRegisters(int64_t count, bool increase) {
  NVVM::SetMaxRegisterOp::create(b, loc, static_cast<uint32_t>(count),
                                 increase ? NVVM::SetMaxRegisterAction::increase
                                          : NVVM::SetMaxRegisterAction::decrease);
}
void KernelBuilder::namedBarrier(Value id, int64_t threads) {
  NVVM::BarrierOp::create(b, loc, TypeRange{}, id, i32(threads),
                          NVVM::BarrierReductionAttr(), Value());
}
Value KernelBuilder::packBf16x2(Value lo, Value hi) {
  auto bf16 = [&](Value v) { return v.getType().isBF16() ? v : toType(v, b.getBF16Type()); };
  Value v = vector::FromElementsOp::create(
      b, loc, VectorType::get({2}, b.getBF16Type()), ValueRange{bf16(lo), bf16(hi)});
  return LLVM::BitcastOp::create(b, loc, b.getI32Type(), v);
}

//===----------------------------------------------------------------------===//
// LaunchBuilder
//===----------------------------------------------------------------------===//

Type mlir::mhc::elementType(MLIRContext *ctx, ::mhc::DType dtype) {
  switch (dtype) {
  case ::mhc::DType::BF16:
    return BFloat16Type::get(ctx);
  case ::mhc::DType::F16:
    return Float16Type::get(ctx);
  case ::mhc::DType::F32:
    return Float32Type::get(ctx);
  }
  return {};
}

LaunchBuilder &LaunchBuilder::param(const std::string &name) {
  [[maybe_unused]] const char *tmap = ::mhc::tensorMapBuffer(name);
  assert((name == "M" || name == "S" || manifest.buffer(tmap ? tmap : name)) &&
         "unknown buffer");
  params.push_back(name);
  return *this;
}
LaunchBuilder &LaunchBuilder::block(int threads) {
  blockThreads = threads;
  return *this;
}
LaunchBuilder &LaunchBuilder::grid(::mhc::GridRule rule) {
  gridRule = rule;
  return *this;
}
LaunchBuilder &LaunchBuilder::minBlocksPerSM(int blocks) {
  minBlocks = blocks;
  return *this;
}

LaunchBuilder &LaunchBuilder::sharedF32(int64_t elems, int64_t align) {
  sharedBuffers.push_back({elems, false, align});
  return *this;
}
LaunchBuilder &LaunchBuilder::sharedI64(int64_t elems) {
  sharedBuffers.push_back({elems, true, 8});
  return *this;
}

int64_t LaunchBuilder::sharedLimit(const std::string &arch) {
  // Per block, after the 1 KB the driver reserves: A100 163 KB, H100 and
  // B200 227 KB.
  return arch == "sm_80" ? 163 * 1024 : 227 * 1024;
}

/// Each buffer's byte offset in a block's shared memory, in declaration
/// order, aligned to max(16, its alignment); the total is the last entry.
template <typename Buffers>
static SmallVector<int64_t> sharedOffsets(const Buffers &buffers) {
  SmallVector<int64_t> offsets;
  int64_t at = 0;
  for (const auto &sb : buffers) {
    int64_t align = std::max<int64_t>(16, sb.align);
    at = (at + align - 1) / align * align;
    offsets.push_back(at);
    at += sb.elems * (sb.i64 ? 8 : 4);
  }
  offsets.push_back(at);
  return offsets;
}

int64_t LaunchBuilder::sharedBytes() const {
  return sharedOffsets(sharedBuffers).back();
}

gpu::GPUFuncOp LaunchBuilder::create(OpBuilder &b, gpu::GPUModuleOp module) {
  MLIRContext *ctx = b.getContext();
  SmallVector<Type> types;
  for (const std::string &p : params) {
    if (p == "M" || p == "S") {
      types.push_back(b.getI64Type());
      continue;
    }
    if (::mhc::tensorMapBuffer(p)) {
      types.push_back(LLVM::LLVMPointerType::get(ctx));
      continue;
    }
    const ::mhc::BufferDesc *desc = manifest.buffer(p);
    types.push_back(MemRefType::get({ShapedType::kDynamic},
                                    elementType(ctx, desc->dtype)));
  }
  SmallVector<Type> workgroup;
  auto wgSpace = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  auto bufferType = [&](const SharedBuffer &sb) {
    return MemRefType::get(
        {sb.elems}, sb.i64 ? Type(b.getI64Type()) : Type(b.getF32Type()),
        MemRefLayoutAttrInterface{}, wgSpace);
  };
  bool dynamic = sharedBytes() > kStaticSharedLimit;
  if (!dynamic)
    for (const SharedBuffer &sb : sharedBuffers)
      workgroup.push_back(bufferType(sb));

  b.setInsertionPointToEnd(module.getBody());
  func = gpu::GPUFuncOp::create(b, module.getLoc(), entry,
                                b.getFunctionType(types, {}), workgroup);
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  for (auto [i, sb] : llvm::enumerate(sharedBuffers))
    if (!dynamic && sb.align > 0)
      func.setWorkgroupAttributionAttr(
          i, LLVM::LLVMDialect::getAlignAttrName(),
          b.getI64IntegerAttr(sb.align));
  func.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({blockThreads, 1, 1}));
  if (minBlocks > 0) // .minnctapersm: ptxas caps registers to fit them.
    func->setAttr("nvvm.minctasm", b.getI32IntegerAttr(minBlocks));

  Block &entryBlock = func.getBody().front();
  b.setInsertionPointToStart(&entryBlock);
  for (auto [name, value] : llvm::zip(params, entryBlock.getArguments()))
    args[name] = value;
  if (args.count("M"))
    tokensIndex = arith::IndexCastOp::create(b, func.getLoc(),
                                             b.getIndexType(), args["M"]);
  if (args.count("S"))
    splitIndex = arith::IndexCastOp::create(b, func.getLoc(),
                                            b.getIndexType(), args["S"]);
  if (dynamic) {
    // One dynamic allocation, sliced into the declared buffers.
    SmallVector<int64_t> offsets = sharedOffsets(sharedBuffers);
    Value bytes = gpu::DynamicSharedMemoryOp::create(
        b, func.getLoc(),
        MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                        MemRefLayoutAttrInterface{}, wgSpace));
    for (auto [i, sb] : llvm::enumerate(sharedBuffers)) {
      Value offset = arith::ConstantIndexOp::create(b, func.getLoc(), offsets[i]);
      dynamicViews.push_back(memref::ViewOp::create(
          b, func.getLoc(), bufferType(sb), bytes, offset, ValueRange{}));
    }
  }
  // The body goes before the terminator the builder added.
  gpu::ReturnOp::create(b, func.getLoc());
  b.setInsertionPoint(entryBlock.getTerminator());
  return func;
}

Value LaunchBuilder::arg(const std::string &name) const {
  auto it = args.find(name);
  assert(it != args.end() && "not a parameter of this launch");
  return it->second;
}

Value LaunchBuilder::shared(unsigned i) const {
  if (!dynamicViews.empty())
    return dynamicViews[i];
  return const_cast<gpu::GPUFuncOp &>(func).getWorkgroupAttributions()[i];
}

::mhc::LaunchDesc LaunchBuilder::describe() const {
  ::mhc::LaunchDesc d;
  d.entry = entry;
  d.params = params;
  d.block = blockThreads;
  d.grid = gridRule;
  int64_t bytes = sharedBytes();
  d.dynamicSharedBytes = bytes > kStaticSharedLimit ? bytes : 0;
  return d;
}
