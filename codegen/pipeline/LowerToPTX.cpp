//===- LowerToPTX.cpp - gpu.module -> NVVM (LLVM dialect) -> PTX ----------===//
//
// The second stage: MLIR's conversions take the gpu.funcs to the LLVM
// dialect with NVVM ops (plus mhc's noalias and dynamic shared memory
// fixes), and the NVVM target serialises each module to PTX. A module's
// launches are lowered as one module each, on parallel threads.
//
//===----------------------------------------------------------------------===//

#include "mhc/Codegen/Codegen.h"
#include "mhc/Codegen/Passes.h"
#include "mhc/Support/PTXMerge.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Threading.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/CommandLine.h"

#include <map>

using namespace mlir;
using namespace mlir::mhc;

void mlir::mhc::addNVVMLoweringPasses(OpPassManager &pm) {
  OpPassManager &gpm = pm.nest<gpu::GPUModuleOp>();
  gpm.addPass(createConvertNVGPUToNVVMPass());
  gpm.addPass(createSCFToControlFlowPass());
  // vector, ub, arith, math and memref lower inside gpu-to-nvvm (their
  // ConvertToLLVM interfaces, registerCodegenDialects), where shared
  // memory's address space is mapped: a convert-vector-to-llvm pass ahead of
  // it printed "conversion of memref memory space" errors on workgroup
  // memrefs that it then left to gpu-to-nvvm (the PTX is the same).
  ConvertGpuOpsToNVVMOpsOptions options;
  options.indexBitwidth = 64;
  gpm.addPass(createConvertGpuOpsToNVVMOps(options));
  // NVVM ops without an LLVM intrinsic (mbarrier waits) become inline PTX.
  gpm.addPass(createConvertNVVMToLLVMPass());
  gpm.addPass(createKernelNoAlias());
  gpm.addPass(createExternDynamicShared());
  // No canonicalizer here: LLVM folds the same (the PTX of every spec is
  // the same without it); it was 4% of the largest kernels' cold JIT.
  gpm.addPass(createCSEPass());
  gpm.addPass(createReconcileUnrealizedCastsPass());
}

/// Sets LLVM option `name` to `value` for this lowering, as `-name=value`
/// would, unless the command line gave it.
static void setLLVMOption(StringRef name, StringRef value) {
  static std::map<std::string, llvm::cl::Option *> known;
  auto [it, added] = known.try_emplace(name.str(), nullptr);
  if (added) {
    auto &options = llvm::cl::getRegisteredOptions();
    auto found = options.find(name);
    if (found != options.end() && !found->second->getNumOccurrences())
      it->second = found->second;
  }
  if (it->second)
    (void)it->second->addOccurrence(0, name, value);
}

/// LLVM's SLP vectorizer runs unless every module to lower opted out
/// (mhc.llvm_slp = false, KernelContext::llvmSLP). Its search for
/// horizontal reductions vectorizes none before sm_100a (the PTX of every
/// sm_80 / sm_90a spec is the same without it) and was a fifth of the n = 8
/// pre step's LLVM time, spent on the Sinkhorn iteration's loop-carried
/// values.
static void chooseSLPVectorizer(ModuleOp top) {
  bool slp = false, sm100 = false;
  top.walk([&](gpu::GPUModuleOp module) {
    auto flag = module->getAttrOfType<BoolAttr>("mhc.llvm_slp");
    slp |= !flag || flag.getValue();
    if (ArrayAttr targets = module.getTargetsAttr())
      for (Attribute t : targets)
        if (auto nvvm = dyn_cast<NVVM::NVVMTargetAttr>(t))
          sm100 |= nvvm.getChip().starts_with("sm_100");
  });
  setLLVMOption("vectorize-slp", slp ? "true" : "false");
  // sm_100a has f32x2 arithmetic, and there the search does pair sums (the
  // n = 8 Sinkhorn backward's PTX changes without it).
  setLLVMOption("slp-vectorize-hor", sm100 ? "true" : "false");
}

/// A part whose one kernel asks for its own LLVM optimisation level
/// (mhc.llvm_opt_level: a stage of a composed spec whose own spec lowers it,
/// builder/Composition.h) is lowered at that level.
static void applyLaunchOptLevel(gpu::GPUModuleOp part) {
  auto funcs = part.getOps<gpu::GPUFuncOp>();
  if (std::distance(funcs.begin(), funcs.end()) != 1)
    return;
  gpu::GPUFuncOp func = *funcs.begin();
  auto level = func->getAttrOfType<IntegerAttr>("mhc.llvm_opt_level");
  if (level) // (read here only: the lowering below need not see it)
    func->removeAttr("mhc.llvm_opt_level");
  ArrayAttr targets = part.getTargetsAttr();
  if (!level || !targets || targets.size() != 1)
    return;
  auto nvvm = dyn_cast<NVVM::NVVMTargetAttr>(targets[0]);
  if (!nvvm)
    return;
  MLIRContext *ctx = part.getContext();
  part.setTargetsAttr(ArrayAttr::get(
      ctx, {NVVM::NVVMTargetAttr::get(ctx, level.getInt(), nvvm.getTriple(),
                                      nvvm.getChip(), nvvm.getFeatures())}));
}

/// The modules to lower, per original gpu.module name, in launch order.
using ModuleParts =
    std::vector<std::pair<std::string, SmallVector<gpu::GPUModuleOp>>>;

/// The kernels of each gpu.module with several, one gpu.module each (the
/// copies follow the original; launch order kept), so that MLIR's
/// conversions and LLVM lower a spec's launches on parallel threads: the
/// cold JIT of a multi-launch spec then takes about its largest launch's
/// time, as ptxas already does (-split-compile). Modules with anything
/// besides kernel functions stay whole.
static ModuleParts splitByKernel(ModuleOp top) {
  ModuleParts out;
  for (auto module : llvm::make_early_inc_range(top.getOps<gpu::GPUModuleOp>())) {
    out.emplace_back(module.getName().str(), SmallVector<gpu::GPUModuleOp>{module});
    SmallVector<gpu::GPUModuleOp> &parts = out.back().second;
    int64_t kernels = 0;
    bool onlyKernels = true;
    for (Operation &op : module.getBody()->without_terminator()) {
      auto func = dyn_cast<gpu::GPUFuncOp>(op);
      onlyKernels &= func && func.isKernel();
      kernels += func ? 1 : 0;
    }
    if (!onlyKernels || kernels < 2)
      continue;
    OpBuilder b(module->getContext());
    b.setInsertionPointAfter(module);
    for (int64_t k = 1; k < kernels; ++k) {
      auto copy = cast<gpu::GPUModuleOp>(b.clone(*module));
      copy.setName((module.getName() + "__launch" + Twine(k)).str());
      parts.push_back(copy);
    }
    // Part k keeps kernel k.
    for (auto [k, part] : llvm::enumerate(parts)) {
      SmallVector<gpu::GPUFuncOp> others;
      for (auto [i, func] : llvm::enumerate(part.getOps<gpu::GPUFuncOp>()))
        if (i != k)
          others.push_back(func);
      for (gpu::GPUFuncOp func : others)
        func.erase();
    }
  }
  for (auto &entry : out)
    for (gpu::GPUModuleOp part : entry.second)
      applyLaunchOptLevel(part);
  return out;
}

/// Serialises every lowered module to PTX (gpu-module-to-binary,
/// format=isa), one thread per module, and joins each original module's
/// parts (mergePTXModules).
static FailureOr<std::map<std::string, std::string>>
serializeToPTX(MLIRContext *ctx, const ModuleParts &modules,
               const std::string &toolkit) {
  SmallVector<gpu::GPUModuleOp> all;
  for (auto &entry : modules)
    all.append(entry.second);
  std::vector<std::optional<SmallVector<char>>> objects(all.size());
  gpu::TargetOptions options(toolkit, {}, {}, {},
                             gpu::CompilationTarget::Assembly);
  LogicalResult serialized = failableParallelForEachN(
      ctx, 0, all.size(), [&](size_t i) -> LogicalResult {
        auto targets = all[i].getTargetsAttr();
        if (!targets || targets.size() != 1)
          return all[i].emitError("expected one target");
        auto target = cast<gpu::TargetAttrInterface>(targets[0]);
        objects[i] = target.serializeToObject(all[i], options);
        if (!objects[i])
          return all[i].emitError("failed to serialize to PTX");
        return success();
      });
  if (failed(serialized))
    return failure();

  std::map<std::string, std::string> ptx;
  size_t next = 0;
  for (auto &[name, parts] : modules) {
    std::vector<std::string> texts;
    for (size_t k = 0; k < parts.size(); ++k, ++next)
      texts.emplace_back(objects[next]->begin(), objects[next]->end());
    ptx[name] = ::mhc::mergePTXModules(texts);
  }
  return ptx;
}

FailureOr<std::map<std::string, std::string>>
mlir::mhc::lowerToPTX(ModuleOp top, const std::string &toolkit) {
  chooseSLPVectorizer(top);
  ModuleParts modules = splitByKernel(top);
  PassManager pm(top.getContext());
  // buildKernelModule verified the kernels; verifying again after every
  // upstream conversion was 12% of a cold JIT of the largest kernel.
  pm.enableVerifier(false);
  addNVVMLoweringPasses(pm);
  if (failed(pm.run(top)))
    return failure();
  return serializeToPTX(top.getContext(), modules, toolkit);
}
