//===- Pipeline.cpp - kernel modules, NVVM lowering, PTX, cubin -----------===//

#include "mhc/Codegen/Codegen.h"

#include "kernels/Kernels.h"
#include "mhc/Codegen/SourceHash.h"
#include "mhc/Support/PTXMerge.h"
#include "mhc/Passes/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
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
#include "mlir/IR/Threading.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Transforms/Passes.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>

using namespace mlir;
using namespace mlir::mhc;

static const char *kMhcVersion = "0.1.0";

/// "mhc <release> (codegen <source digest>), MLIR <version>": what produced a
/// kernel, in manifests and in --version-info (the JIT cache key).
static std::string generatorVersion() {
  return std::string("mhc ") + kMhcVersion + " (codegen " +
         MHC_CODEGEN_SOURCE_HASH + "), MLIR " + LLVM_VERSION_STRING;
}

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
  vector::registerConvertVectorToLLVMInterface(registry);
  NVVM::registerConvertGpuToNVVMInterface(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
}

/// The PTX ISA version each arch needs (sm_90a: 7.8, sm_100a: 8.6).
static const char *ptxFeatures(const std::string &arch) {
  if (arch == "sm_100a")
    return "+ptx86";
  if (arch == "sm_90a")
    return "+ptx80";
  return "+ptx70";
}

FailureOr<gpu::GPUModuleOp>
mlir::mhc::buildKernelModule(ModuleOp top, const ::mhc::KernelSpec &spec,
                             ::mhc::Manifest &manifest) {
  std::string reason = ::mhc::unsupportedReason(spec);
  if (!reason.empty())
    return top.emitError() << "cannot generate kernels for '"
                           << spec.canonical() << "': " << reason;
  MLIRContext *ctx = top.getContext();
  OpBuilder b(ctx);
  top->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(top.getBody());
  auto targets = [&](unsigned optLevel) {
    return b.getArrayAttr({NVVM::NVVMTargetAttr::get(
        ctx, optLevel, "nvptx64-nvidia-cuda", spec.arch, ptxFeatures(spec.arch))});
  };
  auto module =
      gpu::GPUModuleOp::create(b, top.getLoc(), spec.kernelName(), targets(3));

  manifest = ::mhc::Manifest();
  manifest.spec = spec.canonical();
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(spec.hash()));
  manifest.hash = hash;
  manifest.arch = spec.arch;
  manifest.compiler = generatorVersion();

  KernelContext kc(b, module, spec, manifest);
  LogicalResult built = failure();
  switch (spec.op) {
  case ::mhc::OpKind::Project:
    built = buildProject(kc);
    break;
  case ::mhc::OpKind::Scale:
    built = buildScale(kc);
    break;
  case ::mhc::OpKind::Sinkhorn:
    built = buildSinkhorn(kc);
    break;
  case ::mhc::OpKind::Aggregate:
    built = buildAggregate(kc);
    break;
  case ::mhc::OpKind::ExpandCombine:
    built = buildExpandCombine(kc);
    break;
  case ::mhc::OpKind::Pre:
    built = buildPre(kc);
    break;
  }
  if (failed(built))
    return failure();
  if (kc.llvmOptLevel != 3)
    module.setTargetsAttr(targets(kc.llvmOptLevel));
  if (!kc.llvmSLP)
    module->setAttr("mhc.llvm_slp", b.getBoolAttr(false));
  kc.finish();
  // The launch manifest travels with the module (mhc-write-bundle reads it;
  // mhc-kernel-noalias only touches modules that have one).
  module->setAttr("mhc.manifest", b.getStringAttr(manifest.toJson()));
  if (failed(verify(module)))
    return failure();
  return module;
}

void mlir::mhc::addNVVMLoweringPasses(OpPassManager &pm) {
  OpPassManager &gpm = pm.nest<gpu::GPUModuleOp>();
  gpm.addPass(createConvertNVGPUToNVVMPass());
  gpm.addPass(createSCFToControlFlowPass());
  gpm.addPass(createConvertVectorToLLVMPass());
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

std::string mlir::mhc::defaultToolkitPath() {
  for (const char *var : {"MHC_CUDA_HOME", "CUDA_HOME"})
    if (const char *v = std::getenv(var); v && *v)
      return v;
  return "/usr/local/cuda";
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

/// The kernels of each gpu.module with several, one gpu.module each (the
/// copies follow the original; launch order kept), so that MLIR's
/// conversions and LLVM lower a spec's launches on parallel threads: the
/// cold JIT of a multi-launch spec then takes about its largest launch's
/// time, as ptxas already does (-split-compile). Returns the modules to
/// lower per original name. Modules with anything besides kernel functions
/// stay whole.
static std::vector<std::pair<std::string, SmallVector<gpu::GPUModuleOp>>>
splitByKernel(ModuleOp top) {
  std::vector<std::pair<std::string, SmallVector<gpu::GPUModuleOp>>> out;
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
  return out;
}

FailureOr<std::map<std::string, std::string>>
mlir::mhc::lowerToPTX(ModuleOp top, const std::string &toolkit) {
  chooseSLPVectorizer(top);
  auto modules = splitByKernel(top);
  PassManager pm(top.getContext());
  // buildKernelModule verified the kernels; verifying again after every
  // upstream conversion was 12% of a cold JIT of the largest kernel.
  pm.enableVerifier(false);
  addNVVMLoweringPasses(pm);
  if (failed(pm.run(top)))
    return failure();

  // gpu-module-to-binary (format=isa), one thread per module.
  SmallVector<gpu::GPUModuleOp> all;
  for (auto &entry : modules)
    all.append(entry.second);
  std::vector<std::optional<SmallVector<char>>> objects(all.size());
  gpu::TargetOptions options(toolkit, {}, {}, {},
                             gpu::CompilationTarget::Assembly);
  LogicalResult serialized = failableParallelForEachN(
      top.getContext(), 0, all.size(), [&](size_t i) -> LogicalResult {
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

/// Runs `argv`, returning its exit code and combined output.
static int run(ArrayRef<std::string> argv, std::string &output) {
  SmallString<128> outPath;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("mhc-tool", "log", outPath)) {
    output = "cannot create a temporary file: " + ec.message();
    return -1;
  }
  llvm::FileRemover removeOutput(outPath); // on every path
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(outPath),
                                          StringRef(outPath)};
  SmallVector<StringRef> args(argv.begin(), argv.end());
  std::string err;
  int rc = llvm::sys::ExecuteAndWait(argv.front(), args, std::nullopt,
                                     redirects, /*SecondsToWait=*/120, 0, &err);
  if (auto buf = llvm::MemoryBuffer::getFile(outPath))
    output = (*buf)->getBuffer().str();
  output += err;
  return rc;
}

/// `ptxas --version` of the toolkit: its major release and full version
/// ("13.0.88"; empty if unknown). Asked once per toolkit per process.
static std::pair<int, std::string> ptxasVersion(const std::string &toolkit) {
  static std::map<std::string, std::pair<int, std::string>> known;
  auto it = known.find(toolkit);
  if (it != known.end())
    return it->second;
  std::string text;
  run({toolkit + "/bin/ptxas", "--version"}, text);
  std::smatch m;
  std::pair<int, std::string> v{0, ""};
  if (std::regex_search(text, m, std::regex("release ([0-9]+)[0-9.]*, V([0-9.]+)")))
    v = {std::stoi(m[1].str()), m[2].str()};
  return known[toolkit] = v;
}

bool mlir::mhc::assembleCubin(const std::string &toolkit,
                              const std::string &ptx, const std::string &arch,
                              const std::string &cubinPath,
                              ::mhc::Manifest &manifest, std::string &log) {
  std::string ptxas = toolkit + "/bin/ptxas";
  SmallString<128> ptxPath;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("mhc-kernel", "ptx", ptxPath)) {
    log = "cannot create a temporary file for ptxas: " + ec.message();
    return false;
  }
  llvm::FileRemover removePtx(ptxPath); // on every path
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(ptxPath, ec);
    if (!ec) {
      os << ptx;
      os.close();
      ec = os.error();
    }
    if (ec) {
      log = "cannot write " + ptxPath.str().str() + ": " + ec.message();
      return false;
    }
  }
  auto [major, version] = ptxasVersion(toolkit);
  if (!version.empty())
    manifest.ptxas = "ptxas " + version;
  // The launches of a module assembled in parallel (one thread per
  // function): the same SASS, and the cold JIT of a multi-launch kernel
  // (the fused pre step) takes its slowest function's time, not the sum.
  // Known in ptxas 13 (checked); older ones assemble one at a time.
  std::vector<std::string> argv = {ptxas, "-arch=" + arch, "-O3", "-v"};
  if (major >= 13)
    argv.insert(argv.end(), {"-split-compile", "0"});
  argv.insert(argv.end(), {ptxPath.str().str(), "-o", cubinPath});
  int rc = run(argv, log);
  if (rc != 0)
    return false;

  // ptxas -v: "Function properties for NAME" then "N bytes stack frame, N
  // bytes spill stores, N bytes spill loads", and "Compiling entry function
  // 'NAME'" then "Used N registers, ... N bytes smem".
  std::istringstream lines(log);
  std::string line, current;
  std::regex entry("(?:Compiling entry function|Function properties for) '?([A-Za-z0-9_]+)'?");
  std::regex frame("([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  std::regex regs("Used ([0-9]+) registers");
  std::regex smem("([0-9]+) bytes smem");
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) {
      current = m[1];
      continue;
    }
    for (::mhc::LaunchDesc &l : manifest.launches) {
      if (l.entry != current)
        continue;
      if (std::regex_search(line, m, frame)) {
        l.resources.stackBytes = std::stoi(m[1]);
        l.resources.spillStores = std::stoi(m[2]);
        l.resources.spillLoads = std::stoi(m[3]);
      }
      if (std::regex_search(line, m, regs)) {
        l.resources.registers = std::stoi(m[1]);
        l.resources.sharedBytes = 0;
        if (std::regex_search(line, m, smem))
          l.resources.sharedBytes = std::stoi(m[1]);
      }
    }
  }
  return true;
}

std::string mlir::mhc::compilerVersionInfo(const std::string &toolkit) {
  std::string version = ptxasVersion(toolkit).second;
  return generatorVersion() + ", ptxas " + (version.empty() ? "unknown" : version);
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
  auto write = [&](const std::string &path, const std::string &text) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      return false;
    os << text;
    return true;
  };
  std::string base = dir + "/" + name;
  if (!write(base + ".ptx", ptx->begin()->second)) {
    error = "cannot write " + base + ".ptx";
    return failure();
  }
  if (cubin) {
    std::string log;
    if (!assembleCubin(toolkit, ptx->begin()->second, spec.arch,
                       base + ".cubin", manifest, log)) {
      error = "ptxas failed:\n" + log;
      return failure();
    }
  }
  if (!write(base + ".json", manifest.toJson())) {
    error = "cannot write " + base + ".json";
    return failure();
  }
  return success();
}
