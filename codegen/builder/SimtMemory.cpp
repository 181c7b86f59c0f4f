//===- SimtMemory.cpp - SimtBuilder's loads, stores and pointers ----------===//
//
// Scalar and vector accesses to 1-D memrefs (vectors split into the
// pieces a memref's access limit allows), and the addresses NVVM ops take.
//
//===----------------------------------------------------------------------===//

#include "builder/SimtBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <numeric>

using namespace mlir;
using namespace mlir::mhc;

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

void SimtBuilder::withAccessLimit(int64_t bytes, function_ref<void()> body) {
  llvm::DenseMap<Value, int64_t> limits = accessLimit;
  for (auto &entry : accessLimit)
    entry.second = bytes;
  body();
  accessLimit = std::move(limits);
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

Value SimtBuilder::addressOf(Value mem, Value elem) {
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, mem);
  return add(base, mul(elem, idx(elementBytes(mem))));
}
