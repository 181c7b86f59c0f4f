//===- SimtBuilder.cpp - arithmetic, memory, loops, warps -----------------===//

#include "builder/SimtBuilder.h"

#include <numeric>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::mhc;

static bool isFloatLike(Value v) {
  return isa<FloatType>(getElementTypeOrSelf(v.getType()));
}

Value SimtBuilder::idx(int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}
Value SimtBuilder::i32(int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
}
Value SimtBuilder::f32(double v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}
Value SimtBuilder::f64(double v) {
  return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
}
Value SimtBuilder::constLike(Value like, double v) {
  return like.getType().isF64() ? f64(v) : f32(v);
}
Value SimtBuilder::boolean(bool v) {
  return arith::ConstantIntOp::create(b, loc, b.getI1Type(), v);
}

Value SimtBuilder::add(Value a, Value c) {
  if (isFloatLike(a))
    return arith::AddFOp::create(b, loc, a, c);
  return arith::AddIOp::create(b, loc, a, c);
}
Value SimtBuilder::sub(Value a, Value c) {
  if (isFloatLike(a))
    return arith::SubFOp::create(b, loc, a, c);
  return arith::SubIOp::create(b, loc, a, c);
}
Value SimtBuilder::mul(Value a, Value c) {
  if (isFloatLike(a))
    return arith::MulFOp::create(b, loc, a, c);
  return arith::MulIOp::create(b, loc, a, c);
}
Value SimtBuilder::div(Value a, Value c) {
  if (isFloatLike(a))
    return arith::DivFOp::create(b, loc, a, c);
  return arith::DivUIOp::create(b, loc, a, c);
}
Value SimtBuilder::rem(Value a, Value c) {
  return arith::RemUIOp::create(b, loc, a, c);
}
Value SimtBuilder::min(Value a, Value c) {
  if (isFloatLike(a))
    return arith::MinimumFOp::create(b, loc, a, c);
  return arith::MinUIOp::create(b, loc, a, c);
}
Value SimtBuilder::max(Value a, Value c) {
  // maximumf propagates NaN, as the float64 reference does.
  if (isFloatLike(a))
    return arith::MaximumFOp::create(b, loc, a, c);
  return arith::MaxUIOp::create(b, loc, a, c);
}
Value SimtBuilder::neg(Value a) { return arith::NegFOp::create(b, loc, a); }
Value SimtBuilder::fma(Value a, Value c, Value d) {
  return math::FmaOp::create(b, loc, a, c, d);
}
Value SimtBuilder::lt(Value a, Value c) {
  if (isFloatLike(a))
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, a, c);
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, a, c);
}
Value SimtBuilder::eq(Value a, Value c) {
  if (isFloatLike(a))
    return arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, a, c);
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, a, c);
}
Value SimtBuilder::select(Value cond, Value t, Value f) {
  return arith::SelectOp::create(b, loc, cond, t, f);
}
Value SimtBuilder::andi(Value a, Value c) {
  return arith::AndIOp::create(b, loc, a, c);
}

Value SimtBuilder::exp(Value a) { return math::ExpOp::create(b, loc, a); }
Value SimtBuilder::log(Value a) { return math::LogOp::create(b, loc, a); }
Value SimtBuilder::exp2(Value a) { return math::Exp2Op::create(b, loc, a); }
/// An f32 -> f32 NVVM intrinsic (a single MUFU instruction).
static Value nvvmUnary(SimtBuilder &kb, const char *intrinsic, Value a) {
  return LLVM::CallIntrinsicOp::create(kb.b, kb.loc, kb.b.getF32Type(),
                                       kb.b.getStringAttr(intrinsic), ValueRange{a})
      .getResult(0);
}
Value SimtBuilder::log2(Value a) {
  // libdevice's log2f is a ~20-instruction polynomial; lg2.approx.f32 is one
  // MUFU instruction (max abs error ~2^-22 on [0.5, 2]).
  return nvvmUnary(*this, "llvm.nvvm.lg2.approx.f", a);
}
Value SimtBuilder::sqrt(Value a) { return math::SqrtOp::create(b, loc, a); }
Value SimtBuilder::rsqrtApprox(Value a) {
  return nvvmUnary(*this, "llvm.nvvm.rsqrt.approx.f", a);
}
Value SimtBuilder::sigmoidApprox(Value a) {
  Value e = nvvmUnary(*this, "llvm.nvvm.ex2.approx.f32", mul(a, f32(-1.4426950408889634)));
  return nvvmUnary(*this, "llvm.nvvm.rcp.approx.ftz.f", add(f32(1.0), e));
}
Value SimtBuilder::sigmoid(Value a) {
  Value one = constLike(a, 1.0);
  return div(one, add(one, exp(neg(a))));
}

Value SimtBuilder::toF32(Value a) {
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

Value SimtBuilder::toF64(Value a) {
  if (a.getType().isF64())
    return a;
  return arith::ExtFOp::create(b, loc, b.getF64Type(), a);
}

Value SimtBuilder::toType(Value a, Type elemType) {
  Type t = a.getType();
  auto vt = dyn_cast<VectorType>(t);
  Type target = vt ? Type(vt.clone(elemType)) : elemType;
  if (target == t)
    return a;
  return arith::TruncFOp::create(b, loc, target, a);
}

Value SimtBuilder::indexToI64(Value a) {
  return arith::IndexCastOp::create(b, loc, b.getI64Type(), a);
}
Value SimtBuilder::indexToI32(Value a) {
  return arith::IndexCastOp::create(b, loc, b.getI32Type(), a);
}
Value SimtBuilder::i64ToIndex(Value a) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), a);
}

Value SimtBuilder::packBf16x2(Value lo, Value hi) {
  auto bf16 = [&](Value v) { return v.getType().isBF16() ? v : toType(v, b.getBF16Type()); };
  Value v = vector::FromElementsOp::create(
      b, loc, VectorType::get({2}, b.getBF16Type()), ValueRange{bf16(lo), bf16(hi)});
  return LLVM::BitcastOp::create(b, loc, b.getI32Type(), v);
}

Value SimtBuilder::load(Value mem, Value offset) {
  return memref::LoadOp::create(b, loc, mem, ValueRange{offset});
}
void SimtBuilder::store(Value v, Value mem, Value offset) {
  memref::StoreOp::create(b, loc, v, mem, ValueRange{offset});
}

static int64_t elementBytes(Value mem) {
  return cast<MemRefType>(mem.getType()).getElementTypeBitWidth() / 8;
}

/// Elements per access to `mem` of a `width`-wide vector: all of them, or
/// the piece its accessLimit allows.
static int64_t accessPiece(const SimtBuilder &kb, Value mem, int64_t width,
                           int64_t elemBytes) {
  auto it = kb.accessLimit.find(mem);
  if (it == kb.accessLimit.end())
    return width;
  return std::gcd(width, std::max<int64_t>(1, it->second / elemBytes));
}

Value SimtBuilder::vload(Value mem, Value offset, int64_t width) {
  auto memType = cast<MemRefType>(mem.getType());
  int64_t piece = accessPiece(*this, mem, width, elementBytes(mem));
  auto vt = VectorType::get({piece}, memType.getElementType());
  SmallVector<Value> parts;
  for (int64_t i = 0; i < width; i += piece) {
    Value at = i == 0 ? offset : add(offset, idx(i));
    auto op = vector::LoadOp::create(b, loc, vt, mem, ValueRange{at});
    op.setAlignment(static_cast<uint64_t>(piece * elementBytes(mem)));
    if (piece == width)
      return op;
    for (int64_t e = 0; e < piece; ++e)
      parts.push_back(extract(op, e));
  }
  return vector(parts);
}

void SimtBuilder::vstore(Value vec, Value mem, Value offset) {
  int64_t width = cast<VectorType>(vec.getType()).getNumElements();
  if (streamingStores && width * elementBytes(mem) == 16 &&
      accessPiece(*this, mem, width, elementBytes(mem)) == width &&
      !cast<MemRefType>(mem.getType()).getMemorySpace()) {
    // LLVM's NVPTX backend drops !nontemporal: the cache hint is written out.
    Value words = vector::BitCastOp::create(
        b, loc, VectorType::get({4}, b.getI32Type()), vec);
    SmallVector<Value> operands = {globalPtr(mem, offset)};
    for (int64_t k = 0; k < 4; ++k)
      operands.push_back(extract(words, k));
    inlinePtx(Type(), operands, "st.global.cs.v4.b32 [$0], {$1, $2, $3, $4};",
              "l,r,r,r,r");
    return;
  }
  int64_t piece = accessPiece(*this, mem, width, elementBytes(mem));
  for (int64_t i = 0; i < width; i += piece) {
    Value part = vec;
    if (piece < width) {
      SmallVector<Value> elems;
      for (int64_t e = 0; e < piece; ++e)
        elems.push_back(extract(vec, i + e));
      part = piece == 1 ? elems[0] : vector(elems);
    }
    Value at = i == 0 ? offset : add(offset, idx(i));
    if (piece == 1 && piece < width) {
      store(part, mem, at);
      continue;
    }
    auto op = vector::StoreOp::create(b, loc, part, mem, ValueRange{at});
    op.setAlignment(static_cast<uint64_t>(piece * elementBytes(mem)));
  }
}

SmallVector<Value> SimtBuilder::loadF32(Value mem, Value offset,
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

void SimtBuilder::storeFrom(ArrayRef<Value> values, Value mem,
                            Value offset) {
  Type elem = cast<MemRefType>(mem.getType()).getElementType();
  if (values.size() == 1) {
    store(toType(values[0], elem), mem, offset);
    return;
  }
  vstore(toType(vector(values), elem), mem, offset);
}

Value SimtBuilder::extract(Value vec, int64_t i) {
  return vector::ExtractOp::create(b, loc, vec, ArrayRef<int64_t>{i});
}

Value SimtBuilder::vector(ArrayRef<Value> elems) {
  auto vt = VectorType::get({static_cast<int64_t>(elems.size())},
                            elems.front().getType());
  return vector::FromElementsOp::create(b, loc, vt, elems);
}

static Value pointerTo(SimtBuilder &kb, Value addr, unsigned addressSpace) {
  Value i64 = arith::IndexCastOp::create(kb.b, kb.loc, kb.b.getI64Type(), addr);
  auto ptrType = LLVM::LLVMPointerType::get(kb.b.getContext(), addressSpace);
  return LLVM::IntToPtrOp::create(kb.b, kb.loc, ptrType, i64);
}

Value SimtBuilder::sharedPtr(Value mem, Value elem) {
  return pointerTo(*this, addressOf(mem, elem),
                   static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared));
}
Value SimtBuilder::globalPtr(Value mem, Value elem) {
  return pointerTo(*this, addressOf(mem, elem),
                   static_cast<unsigned>(NVVM::NVVMMemorySpace::Global));
}
Value SimtBuilder::bytePtr(Value ptr, Value bytes) {
  return LLVM::GEPOp::create(b, loc, ptr.getType(), b.getI8Type(), ptr,
                             ValueRange{indexToI64(bytes)});
}

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

Value SimtBuilder::addressOf(Value mem, Value elem) {
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, mem);
  return add(base, mul(elem, idx(elementBytes(mem))));
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
