//===- LaunchBuilder.cpp - one kernel launch's gpu.func -------------------===//

#include "builder/LaunchBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace mlir::mhc;

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
  assert((name == "M" || name == "S" || name == ::mhc::kSyncParam ||
          manifest.buffer(tmap ? tmap : name)) &&
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
LaunchBuilder &LaunchBuilder::cooperative() {
  isCooperative = true;
  return *this;
}
LaunchBuilder &LaunchBuilder::programmaticDependent() {
  isProgrammatic = true;
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

SmallVector<Type> LaunchBuilder::paramTypes(MLIRContext *ctx) const {
  SmallVector<Type> types;
  for (const std::string &p : params) {
    if (p == "M" || p == "S") {
      types.push_back(IntegerType::get(ctx, 64));
      continue;
    }
    if (::mhc::tensorMapBuffer(p)) {
      types.push_back(LLVM::LLVMPointerType::get(ctx));
      continue;
    }
    if (p == ::mhc::kSyncParam) {
      types.push_back(MemRefType::get({ShapedType::kDynamic},
                                      IntegerType::get(ctx, 32)));
      continue;
    }
    const ::mhc::BufferDesc *desc = manifest.buffer(p);
    types.push_back(MemRefType::get({ShapedType::kDynamic},
                                    elementType(ctx, desc->dtype)));
  }
  return types;
}

MemRefType LaunchBuilder::sharedType(MLIRContext *ctx, unsigned i) const {
  const SharedBuffer &sb = sharedBuffers[i];
  Type elem = sb.i64 ? Type(IntegerType::get(ctx, 64)) : Type(Float32Type::get(ctx));
  return MemRefType::get(
      {sb.elems}, elem, MemRefLayoutAttrInterface{},
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup));
}

gpu::GPUFuncOp LaunchBuilder::create(OpBuilder &b, gpu::GPUModuleOp module) {
  MLIRContext *ctx = b.getContext();
  SmallVector<Type> workgroup;
  bool dynamic = sharedBytes() > kStaticSharedLimit;
  if (!dynamic)
    for (unsigned i = 0; i < sharedBuffers.size(); ++i)
      workgroup.push_back(sharedType(ctx, i));

  b.setInsertionPointToEnd(module.getBody());
  func = gpu::GPUFuncOp::create(b, module.getLoc(), entry,
                                b.getFunctionType(paramTypes(ctx), {}), workgroup);
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
  if (dynamic)
    sliceDynamicShared(b);
  // The body goes before the terminator the builder added.
  gpu::ReturnOp::create(b, func.getLoc());
  b.setInsertionPoint(entryBlock.getTerminator());
  return func;
}

void LaunchBuilder::sliceDynamicShared(OpBuilder &b) {
  SmallVector<int64_t> offsets = sharedOffsets(sharedBuffers);
  Value bytes = gpu::DynamicSharedMemoryOp::create(
      b, func.getLoc(),
      MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                      MemRefLayoutAttrInterface{},
                      gpu::AddressSpaceAttr::get(b.getContext(),
                                                 gpu::AddressSpace::Workgroup)));
  for (unsigned i = 0; i < sharedBuffers.size(); ++i) {
    Value offset = arith::ConstantIndexOp::create(b, func.getLoc(), offsets[i]);
    dynamicViews.push_back(memref::ViewOp::create(
        b, func.getLoc(), sharedType(b.getContext(), i), bytes, offset, ValueRange{}));
  }
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
  d.cooperative = isCooperative;
  d.programmatic = isProgrammatic;
  return d;
}
