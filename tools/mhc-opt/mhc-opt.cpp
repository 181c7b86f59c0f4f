//===- mhc-opt.cpp - the mhc optimizer driver -----------------------------===//
//
// mlir-opt with the mhc dialect, its passes and the upstream dialects mhc
// graphs are written with (func for model functions and opaque blocks,
// arith/tensor for constants).
//
//===----------------------------------------------------------------------===//

#include "mhc/Dialect/MhcOps.h"
#include "mhc/Passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::mhc::MhcDialect, mlir::arith::ArithDialect,
                  mlir::func::FuncDialect, mlir::tensor::TensorDialect>();
  mlir::registerTransformsPasses();
  mlir::mhc::registerMhcPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "mhc optimizer driver: the mhc dialect and its passes\n",
      registry));
}
