//===- CompileSpec.cpp - one kernel spec through every stage --------------===//
//
// What the stages need registered, and the stages in order for one spec
// (mhc-compile, the JIT's compiler): build the module, lower it to PTX,
// assemble the cubin, write the bundle's files.
//
//===----------------------------------------------------------------------===//

#include "mhc/Codegen/Codegen.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/UBToLLVM/UBToLLVM.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mhc;

void mlir::mhc::registerCodegenDialects(DialectRegistry &registry) {
  registry.insert<arith::ArithDialect, cf::ControlFlowDialect,
                  func::FuncDialect, gpu::GPUDialect, LLVM::LLVMDialect,
                  math::MathDialect, memref::MemRefDialect,
                  nvgpu::NVGPUDialect, NVVM::NVVMDialect, scf::SCFDialect,
                  vector::VectorDialect>();
  arith::registerConvertArithToLLVMInterface(registry);
  cf::registerConvertControlFlowToLLVMInterface(registry);
  registerConvertFuncToLLVMInterface(registry);
  registerConvertMathToLLVMInterface(registry);
  registerConvertMemRefToLLVMInterface(registry);
  registerConvertNVVMToLLVMInterface(registry);
  ub::registerConvertUBToLLVMInterface(registry);
  vector::registerConvertVectorToLLVMInterface(registry);
  NVVM::registerConvertGpuToNVVMInterface(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
}

/// Writes `text` to `path`; false if it cannot.
static bool writeFile(const std::string &path, const std::string &text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return false;
  os << text;
  os.close();
  bool written = !os.has_error();
  os.clear_error(); // reported by the caller; else the destructor aborts
  return written;
}

LogicalResult mlir::mhc::compileSpecToBundle(MLIRContext *ctx,
                                             const ::mhc::KernelSpec &spec,
                                             const std::string &dir,
                                             bool cubin, std::string &error,
                                             const std::string &fileName) {
  OwningOpRef<ModuleOp> top = ModuleOp::create(UnknownLoc::get(ctx));
  ::mhc::Manifest manifest;
  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return success();
    });
    if (failed(buildKernelModule(*top, spec, manifest))) {
      error = "kernel construction failed: " + diagnostics;
      return failure();
    }
  }
  std::string toolkit = defaultToolkitPath();
  FailureOr<std::map<std::string, std::string>> ptx;
  {
    ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return success();
    });
    ptx = lowerToPTX(*top, toolkit);
  }
  if (failed(ptx) || ptx->size() != 1) {
    error = "lowering to PTX failed: " + diagnostics;
    return failure();
  }
  std::string name = fileName.empty() ? spec.kernelName() : fileName;
  llvm::sys::fs::create_directories(dir);
  std::string base = dir + "/" + name;
  if (!writeFile(base + ".ptx", ptx->begin()->second)) {
    error = "cannot write " + base + ".ptx";
    return failure();
  }
  if (cubin) {
    std::string log;
    if (!assembleCubin(toolkit, ptx->begin()->second, spec.arch,
                       base + ".cubin", manifest, log)) {
      error = "ptxas failed for '" + spec.canonical() + "': " + log;
      return failure();
    }
  }
  if (!writeFile(base + ".json", manifest.toJson())) {
    error = "cannot write " + base + ".json";
    return failure();
  }
  return success();
}
