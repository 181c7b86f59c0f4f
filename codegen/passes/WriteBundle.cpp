//===- WriteBundle.cpp - kernel modules -> PTX, cubin, manifests on disk ---===//

#include "mhc/Codegen/Codegen.h"
#include "mhc/Codegen/Passes.h"
#include "mhc/Support/Bundle.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_WRITEBUNDLE
#include "mhc/Codegen/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

/// A name that is one file in the bundle directory: letters, digits, '_',
/// '-' and '.', not starting with '.' (so never "..", a path or hidden).
bool isPlainFileName(StringRef name) {
  return !name.empty() && name.front() != '.' &&
         llvm::all_of(name, [](char c) {
           return llvm::isAlnum(c) || c == '_' || c == '-' || c == '.';
         });
}

struct WriteBundlePass : mlir::mhc::impl::WriteBundleBase<WriteBundlePass> {
  using WriteBundleBase::WriteBundleBase;

  void runOnOperation() override {
    ModuleOp top = getOperation();
    std::string toolkit = defaultToolkitPath();
    if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
      top.emitError() << "cannot create " << dir << ": " << ec.message();
      return signalPassFailure();
    }
    ::mhc::BundleIndex index;
    for (auto module : top.getOps<gpu::GPUModuleOp>()) {
      auto manifestAttr = module->getAttrOfType<StringAttr>("mhc.manifest");
      if (!manifestAttr)
        continue;
      if (!isPlainFileName(module.getName())) {
        module.emitError() << "gpu.module name " << module.getNameAttr()
                           << " is not a plain file name (letters, digits, "
                              "'_', '-', '.'; not starting with '.')";
        return signalPassFailure();
      }
      ::mhc::BundleKernel kernel;
      if (failed(writeKernel(module, manifestAttr.getValue(), toolkit, kernel)))
        return signalPassFailure();
      index.kernels.push_back(kernel);
    }
    if (index.kernels.empty())
      top.emitWarning() << "mhc-write-bundle: no kernel modules to write "
                           "(run mhc-generate-kernels first); index.json "
                           "lists none";
    if (failed(writeIndex(index)))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }

  /// Lowers a copy of `module` (so the IR stays at the gpu.func level) and
  /// writes its .ptx, .cubin and .json; `kernel` gets its index entry.
  LogicalResult writeKernel(gpu::GPUModuleOp module, StringRef manifestText,
                            const std::string &toolkit,
                            ::mhc::BundleKernel &kernel) {
    std::string error;
    ::mhc::Manifest manifest;
    if (!::mhc::Manifest::fromJson(manifestText.str(), manifest, error))
      return module.emitError() << "invalid mhc.manifest: " << error;
    auto parsed = ::mhc::KernelSpec::parse(manifest.spec, &error);
    if (!parsed)
      return module.emitError() << "invalid spec in mhc.manifest: " << error;
    ModuleOp top = getOperation();
    OwningOpRef<ModuleOp> copy = ModuleOp::create(module.getLoc());
    (*copy)->setAttrs(top->getAttrDictionary());
    OpBuilder b(copy->getBody(), copy->getBody()->end());
    b.clone(*module);
    FailureOr<std::map<std::string, std::string>> ptx = lowerToPTX(*copy, toolkit);
    if (failed(ptx) || ptx->size() != 1)
      return module.emitError() << "lowering to PTX failed";
    SmallString<256> base(dir);
    llvm::sys::path::append(base, module.getName());
    std::string ptxText = ptx->begin()->second;
    if (failed(writeFile((base + ".ptx").str(), ptxText)))
      return failure();
    kernel = {module.getName().str(), manifest.spec,
              compilerVersionInfo(toolkit), "", ""};
    if (cubin) {
      std::string log;
      if (!assembleCubin(toolkit, ptxText, parsed->arch, (base + ".cubin").str(),
                         manifest, log))
        return module.emitError()
               << "ptxas failed for '" << manifest.spec << "': " << log;
      auto image = llvm::MemoryBuffer::getFile(base + ".cubin");
      if (!image)
        return module.emitError() << "cannot read " << base << ".cubin";
      kernel.cubin = ::mhc::fileDigest((*image)->getBuffer().str());
    }
    std::string json = manifest.toJson();
    if (failed(writeFile((base + ".json").str(), json)))
      return failure();
    kernel.json = ::mhc::fileDigest(json);
    return success();
  }

  /// index.json (mhc/Support/Bundle.h), written last.
  LogicalResult writeIndex(const ::mhc::BundleIndex &index) {
    SmallString<256> path(dir);
    llvm::sys::path::append(path, "index.json");
    return writeFile(path.str().str(), index.toJson());
  }

  LogicalResult writeFile(const std::string &path, const std::string &text) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      return getOperation().emitError() << "cannot write " << path << ": "
                                        << ec.message();
    os << text;
    os.close();
    if (!os.has_error())
      return success();
    ec = os.error();
    os.clear_error(); // else the stream's destructor aborts
    return getOperation().emitError() << "cannot write " << path << ": "
                                      << ec.message();
  }
};

} // namespace
