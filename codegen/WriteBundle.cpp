//===- WriteBundle.cpp - kernel modules -> PTX, cubin, manifests on disk ---===//

#include "mhc/Codegen/Codegen.h"
#include "mhc/Passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_WRITEBUNDLE
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

struct WriteBundlePass : mlir::mhc::impl::WriteBundleBase<WriteBundlePass> {
  using WriteBundleBase::WriteBundleBase;

  void runOnOperation() override {
    ModuleOp top = getOperation();
    std::string toolkit = defaultToolkitPath();
    llvm::sys::fs::create_directories(dir);
    std::string index = "{\n  \"kernels\": [\n";
    bool first = true;
    for (auto module : top.getOps<gpu::GPUModuleOp>()) {
      auto manifestAttr = module->getAttrOfType<StringAttr>("mhc.manifest");
      if (!manifestAttr)
        continue;
      std::string error;
      ::mhc::Manifest manifest;
      if (!::mhc::Manifest::fromJson(manifestAttr.getValue().str(), manifest,
                                     error)) {
        module.emitError() << "invalid mhc.manifest: " << error;
        return signalPassFailure();
      }
      auto spec = ::mhc::KernelSpec::parse(manifest.spec, &error);
      // Lower a copy, so the IR stays at the gpu.func level.
      OwningOpRef<ModuleOp> copy = ModuleOp::create(module.getLoc());
      (*copy)->setAttrs(top->getAttrDictionary());
      OpBuilder b(copy->getBody(), copy->getBody()->end());
      b.clone(*module);
      FailureOr<std::map<std::string, std::string>> ptx = lowerToPTX(*copy, toolkit);
      if (failed(ptx) || ptx->size() != 1) {
        module.emitError() << "lowering to PTX failed";
        return signalPassFailure();
      }
      std::string base = dir + "/" + module.getName().str();
      std::string ptxText = ptx->begin()->second;
      if (!writeFile(base + ".ptx", ptxText))
        return signalPassFailure();
      if (cubin) {
        std::string log;
        if (!assembleCubin(toolkit, ptxText, spec->arch, base + ".cubin",
                           manifest, log)) {
          module.emitError() << "ptxas failed:\n" << log;
          return signalPassFailure();
        }
      }
      if (!writeFile(base + ".json", manifest.toJson()))
        return signalPassFailure();
      index += std::string(first ? "" : ",\n") + "    {\"kernel\": \"" +
               module.getName().str() + "\", \"spec\": \"" + manifest.spec +
               "\"}";
      first = false;
    }
    index += "\n  ]\n}\n";
    if (!writeFile(dir + "/index.json", index))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }

  bool writeFile(const std::string &path, const std::string &text) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec) {
      getOperation().emitError() << "cannot write " << path << ": "
                                 << ec.message();
      return false;
    }
    os << text;
    return true;
  }
};

} // namespace
