//===- ReportKernels.cpp - list the kernels a graph needs -----------------===//

#include "mhc/Passes/Passes.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::mhc {
#define GEN_PASS_DEF_REPORTKERNELS
#include "mhc/Passes/Passes.h.inc"
} // namespace mlir::mhc

using namespace mlir;
using namespace mlir::mhc;

namespace {

struct KernelUse {
  unsigned ops = 0;
  std::string fallback; // empty: generated
};

struct ReportKernelsPass : mlir::mhc::impl::ReportKernelsBase<ReportKernelsPass> {
  using ReportKernelsBase::ReportKernelsBase;

  void runOnOperation() override {
    llvm::MapVector<StringRef, KernelUse> kernels;
    unsigned unspecialised = 0;
    getOperation()->walk([&](KernelOpInterface op) {
      auto spec = op->getAttrOfType<KernelSpecAttr>(kSpecAttrName);
      if (!spec) {
        ++unspecialised;
        return;
      }
      KernelUse &use = kernels[spec.getKey()];
      ++use.ops;
      if (auto reason = op->getAttrOfType<StringAttr>(kFallbackAttrName))
        use.fallback = reason.str();
      // A dynamic M's one-launch kernel (the runtime's choice at small M).
      if (auto coop = op->getAttrOfType<KernelSpecAttr>(kOneLaunchSpecAttrName))
        ++kernels[coop.getKey()].ops;
    });

    llvm::raw_ostream &os = toStderr ? llvm::errs() : llvm::outs();
    unsigned generated = 0, fallback = 0;
    os << "mhc kernels:\n";
    for (auto &[key, use] : kernels) {
      std::string name = "-";
      if (auto spec = ::mhc::KernelSpec::parse(key))
        name = spec->kernelName();
      os << llvm::format("  %-44s %3u op(s)  ", name.c_str(), use.ops);
      if (use.fallback.empty()) {
        ++generated;
        os << "codegen    ";
      } else {
        ++fallback;
        os << "reference  ";
      }
      os << key;
      if (!use.fallback.empty())
        os << "  (" << use.fallback << ")";
      os << "\n";
    }
    os << "summary: " << kernels.size() << " distinct kernel(s), " << generated
       << " for codegen, " << fallback << " on the reference path, "
       << unspecialised << " op(s) unspecialised\n";
    os.flush();
    markAllAnalysesPreserved();
  }
};

} // namespace
