//===- TensorCoreBuilder.cpp - wgmma and matrix fragments -----------------===//

#include "builder/TensorCoreBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace mlir::mhc;

Value TensorCoreBuilder::wgmmaDescriptor(Value mem, Value elem, int64_t lbo,
                                         int64_t sbo) {
  // Bits 0-13: the shared address / 16; 16-29: lbo / 16; 32-45: sbo / 16;
  // 62-63: swizzle mode (0: none).
  Value start = andi(div(addressOf(mem, elem), idx(16)), idx(0x3FFF));
  Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), start);
  int64_t fixed = ((lbo >> 4) << 16) | ((sbo >> 4) << 32);
  return arith::OrIOp::create(
      b, loc, i64, arith::ConstantIntOp::create(b, loc, b.getI64Type(), fixed));
}
Value TensorCoreBuilder::wgmmaDescriptorSwizzled(Value mem, Value elem,
                                                 int64_t lbo, int64_t sbo) {
  // Layout type 1 in bits 62-63: 128-byte swizzle.
  return arith::OrIOp::create(
      b, loc, wgmmaDescriptor(mem, elem, lbo, sbo),
      arith::ConstantIntOp::create(b, loc, b.getI64Type(), int64_t(1) << 62));
}
void TensorCoreBuilder::wgmmaFence() { NVVM::WgmmaFenceAlignedOp::create(b, loc); }
void TensorCoreBuilder::wgmmaCommit() { NVVM::WgmmaGroupSyncAlignedOp::create(b, loc); }
void TensorCoreBuilder::wgmmaWait(int64_t pending) {
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, pending);
}

/// The accumulators are tied in place ("+f"): NVVM's wgmma op has no
/// register-A form and no operand for the transpose immediates we need. The
/// shape is m64nNkK with N = 2 acc.size(); `types` is "f32.<a>.<b>",
/// `immediates` what follows the scale-d predicate (scale-a, scale-b,
/// transposes).
void TensorCoreBuilder::wgmmaAsync(MutableArrayRef<Value> acc,
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
                           ? arith::BitcastOp::create(b, loc, b.getI32Type(), v)
                           : v);
  operands.push_back(desc);
  operands.push_back(i32(1)); // scale-d: D = A B + D
  for (int64_t i = 0; i < n; ++i) {
    constraints += "," + std::to_string(i);
    operands.push_back(acc[i]);
  }
  SmallVector<Type> types32(n, b.getF32Type());
  auto result = LLVM::LLVMStructType::getLiteral(b.getContext(), types32);
  Value sum = inlinePtx(result, operands, text, constraints);
  for (int64_t i = 0; i < n; ++i)
    acc[i] = LLVM::ExtractValueOp::create(b, loc, sum, ArrayRef<int64_t>{i});
}

void TensorCoreBuilder::wgmmaBf16(MutableArrayRef<Value> acc, ArrayRef<Value> a,
                                  Value desc) {
  wgmmaAsync(acc, a, desc, 16, "f32.bf16.bf16", "1, 1, 0");
}
void TensorCoreBuilder::wgmmaBf16Shared(MutableArrayRef<Value> acc, Value descA,
                                        Value descB, bool transA, bool transB) {
  std::string imm = std::string("1, 1, ") + (transA ? "1" : "0") + ", " + (transB ? "1" : "0");
  wgmmaAsync(acc, {descA}, descB, 16, "f32.bf16.bf16", imm);
}
void TensorCoreBuilder::wgmmaF16Shared(MutableArrayRef<Value> acc, Value descA,
                                       Value descB) {
  wgmmaAsync(acc, {descA}, descB, 16, "f32.f16.f16", "1, 1, 0, 0");
}

SmallVector<Value> TensorCoreBuilder::ldmatrixX4Trans(Value ptr) {
  Type i32 = b.getI32Type();
  Value at = LLVM::PtrToIntOp::create(b, loc, i32, ptr);
  auto result = LLVM::LLVMStructType::getLiteral(b.getContext(), {i32, i32, i32, i32});
  Value loaded = inlinePtx(
      result, {at}, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4];",
      "=r,=r,=r,=r,r");
  SmallVector<Value> words;
  for (int64_t i = 0; i < 4; ++i)
    words.push_back(LLVM::ExtractValueOp::create(b, loc, loaded, ArrayRef<int64_t>{i}));
  return words;
}
void TensorCoreBuilder::stmatrixX4Trans(Value ptr, ArrayRef<Value> words) {
  Value at = LLVM::PtrToIntOp::create(b, loc, b.getI32Type(), ptr);
  inlinePtx(Type(), {at, words[0], words[1], words[2], words[3]},
            "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [$0], {$1, $2, $3, $4};",
            "r,r,r,r,r,~{memory}");
}
