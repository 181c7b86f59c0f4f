//===- mhc-compile.cpp - one kernel spec to a kernel bundle ---------------===//
//
// The JIT's compiler: builds every launch of one spec, lowers it to PTX and
// (unless --ptx-only) a cubin with ptxas, and writes
// <dir>/<kernel>.{ptx,cubin,json}, adding the kernel to <dir>/index.json (the
// bundle format of mhc/Support/Bundle.h; concurrent compiles into one
// directory take turns through <dir>/.index.lock).
// Runs out of process from the runtime, so a crash here never takes the
// caller down.
//
//   mhc-compile --spec 'aggregate.fwd;n=4;act=bf16;layout=nc;C=2048;arch=sm_90a' -o out/
//   mhc-compile --spec ... --print-ir        # the gpu.func kernels
//   mhc-compile --spec ... --print-nvvm      # after lowering to NVVM
//
//===----------------------------------------------------------------------===//

#include "mhc/Codegen/Codegen.h"
#include "mhc/Support/Bundle.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <unistd.h>

using namespace mlir;
namespace cl = llvm::cl;

// Named to sort before LLVM's "Generic Options" in --help.
static cl::OptionCategory compileOptions("Compiler options");

static cl::opt<std::string> specText("spec", cl::desc("canonical kernel spec"),
                                     cl::value_desc("spec"),
                                     cl::cat(compileOptions));
static cl::opt<std::string> fileName("name",
                                     cl::desc("file name of the bundle's files "
                                              "(default: the kernel name)"),
                                     cl::value_desc("name"), cl::init(""),
                                     cl::cat(compileOptions));
static cl::opt<bool> versionInfo(
    "version-info",
    cl::desc("print the compiler, MLIR and ptxas versions and exit"),
    cl::cat(compileOptions));
static cl::opt<std::string> outDir("o", cl::desc("bundle directory"),
                                   cl::value_desc("dir"), cl::init("."),
                                   cl::cat(compileOptions));
static cl::opt<bool> ptxOnly("ptx-only", cl::desc("skip ptxas (no cubin)"),
                             cl::cat(compileOptions));
static cl::opt<bool> printIR("print-ir",
                             cl::desc("print the gpu.func kernels and exit"),
                             cl::cat(compileOptions));
static cl::opt<bool> printNVVM("print-nvvm",
                               cl::desc("print the NVVM-level IR and exit"),
                               cl::cat(compileOptions));

/// The contents of `path`, or nullopt when it cannot be read.
static std::optional<std::string> readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return std::nullopt;
  return (*buffer)->getBuffer().str();
}

/// Adds (or replaces) kernel `name` in `dir`/index.json, written aside and
/// renamed so a reader sees the old index or the new one.
static bool addToIndex(const std::string &dir, const std::string &name,
                       const ::mhc::KernelSpec &spec, std::string &error) {
  std::string base = dir + "/" + name;
  // Concurrent compiles into one directory update the index one at a time.
  std::error_code ec;
  llvm::raw_fd_ostream lockFile(dir + "/.index.lock", ec, llvm::sys::fs::OF_Append);
  if (ec) {
    error = "cannot open " + dir + "/.index.lock: " + ec.message();
    return false;
  }
  llvm::Expected<llvm::sys::fs::FileLocker> locked = lockFile.lock();
  if (!locked) {
    error = "cannot lock " + dir + "/.index.lock: " + llvm::toString(locked.takeError());
    return false;
  }
  ::mhc::BundleIndex index;
  if (auto old = readFile(dir + "/index.json"))
    if (!::mhc::BundleIndex::fromJson(*old, index, error)) {
      error = dir + "/index.json: " + error + " (remove it or use another directory)";
      return false;
    }
  auto json = readFile(base + ".json");
  auto cubin = readFile(base + ".cubin");
  if (!json) {
    error = "cannot read " + base + ".json";
    return false;
  }
  index.put({name, spec.canonical(),
             mlir::mhc::compilerVersionInfo(mlir::mhc::defaultToolkitPath()),
             ptxOnly || !cubin ? "" : ::mhc::fileDigest(*cubin),
             ::mhc::fileDigest(*json)});
  std::string staging = dir + "/.index.json." + std::to_string(::getpid());
  {
    llvm::raw_fd_ostream os(staging, ec);
    if (!ec) {
      os << index.toJson();
      os.close();
      ec = os.error();
      os.clear_error();
    }
  }
  if (!ec)
    ec = llvm::sys::fs::rename(staging, dir + "/index.json");
  if (ec) {
    llvm::sys::fs::remove(staging);
    error = "cannot write " + dir + "/index.json: " + ec.message();
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // --help lists mhc-compile's own options; LLVM's backend flags, linked in
  // for the NVPTX target, are no part of its interface.
  cl::HideUnrelatedOptions(compileOptions);
  cl::ParseCommandLineOptions(argc, argv, "mhc kernel compiler\n");
  if (versionInfo) {
    // The version, then the toolkit whose ptxas it names (the runtime
    // remembers the version until either file changes).
    std::string toolkit = mlir::mhc::defaultToolkitPath();
    llvm::outs() << mlir::mhc::compilerVersionInfo(toolkit) << "\ntoolkit "
                 << toolkit << "\n";
    return 0;
  }
  if (specText.empty()) {
    llvm::errs() << "mhc-compile: --spec is required\n";
    return 2;
  }
  std::string error;
  auto spec = ::mhc::KernelSpec::parse(specText, &error);
  if (!spec) {
    llvm::errs() << "mhc-compile: invalid --spec: " << error << "\n";
    return 2;
  }
  DialectRegistry registry;
  mlir::mhc::registerCodegenDialects(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();

  if (printIR || printNVVM) {
    OwningOpRef<ModuleOp> top = ModuleOp::create(UnknownLoc::get(&ctx));
    ::mhc::Manifest manifest;
    if (failed(mlir::mhc::buildKernelModule(*top, *spec, manifest)))
      return 1;
    // The kernels as a reader wants them: folded and deduplicated.
    PassManager pm(&ctx);
    pm.nest<gpu::GPUModuleOp>().addPass(createCanonicalizerPass());
    pm.nest<gpu::GPUModuleOp>().addPass(createCSEPass());
    if (printNVVM)
      mlir::mhc::addNVVMLoweringPasses(pm);
    if (failed(pm.run(*top)))
      return 1;
    top->print(llvm::outs());
    return 0;
  }
  if (failed(mlir::mhc::compileSpecToBundle(&ctx, *spec, outDir, !ptxOnly,
                                            error, fileName))) {
    llvm::errs() << "mhc-compile: " << error << "\n";
    return 1;
  }
  std::string name = fileName.empty() ? spec->kernelName() : fileName;
  if (!addToIndex(outDir, name, *spec, error)) {
    llvm::errs() << "mhc-compile: " << error << "\n";
    return 1;
  }
  llvm::outs() << outDir << "/" << name << "\n";
  return 0;
}
