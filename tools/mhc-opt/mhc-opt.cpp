//===- mhc-opt.cpp - the mhc optimizer driver -----------------------------===//
//
// mlir-opt with the mhc dialect, its passes, the upstream dialects mhc graphs
// are written with (func, arith, tensor) and those its kernels are generated
// in (gpu, scf, vector, math, memref, nvgpu, nvvm, llvm), plus the named
// pipeline --mhc-lower-to-nvvm that takes generated kernels to NVVM.
//
//===----------------------------------------------------------------------===//

#include "mhc/Codegen/Codegen.h"
#include "mhc/Dialect/MhcOps.h"
#include "mhc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::mhc::MhcDialect, mlir::arith::ArithDialect,
                  mlir::func::FuncDialect, mlir::tensor::TensorDialect>();
  mlir::mhc::registerCodegenDialects(registry);
  mlir::registerTransformsPasses();
  mlir::registerGpuModuleToBinaryPass();
  mlir::mhc::registerMhcPasses();
  mlir::PassPipelineRegistration<>(
      "mhc-lower-to-nvvm",
      "lower the kernels of every gpu.module to NVVM (LLVM dialect)",
      [](mlir::OpPassManager &pm) { mlir::mhc::addNVVMLoweringPasses(pm); });
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "mhc optimizer driver: the mhc dialect and its passes\n",
      registry));
}
