//===- consumer.cpp - a program built against an installed mhc -----------===//
//
// Parses and verifies a graph with an mhc op, runs mhc-specialize on it and
// prints the kernel spec it stamps; then round-trips that spec through the
// runtime-side KernelSpec. Exit 0 only if all of it works and the spec is
// the expected one.
//
//===----------------------------------------------------------------------===//

#include "mhc/Dialect/MhcOps.h"
#include "mhc/Passes/Passes.h"
#include "mhc/Support/KernelSpec.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

static const char *kGraph = R"mlir(
func.func @f(%x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>) -> tensor<?x64xbf16> {
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
)mlir";

int main() {
  mlir::MLIRContext ctx;
  ctx.loadDialect<mlir::mhc::MhcDialect, mlir::func::FuncDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(kGraph, &ctx);
  if (!module)
    return 1;
  mlir::PassManager pm(&ctx);
  pm.addPass(mlir::mhc::createSpecialize());
  if (mlir::failed(pm.run(*module)))
    return 2;
  std::string spec;
  module->walk([&](mlir::mhc::AggregateOp op) {
    if (auto attr = op->getAttrOfType<mlir::mhc::KernelSpecAttr>(
            mlir::mhc::kSpecAttrName))
      spec = attr.getKey().str();
  });
  llvm::outs() << "spec: " << spec << "\n";
  auto parsed = ::mhc::KernelSpec::parse(spec);
  if (!parsed || parsed->canonical() != spec)
    return 3;
  return spec == "aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a" ? 0 : 4;
}
