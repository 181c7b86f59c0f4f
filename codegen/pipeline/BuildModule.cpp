//===- BuildModule.cpp - a kernel spec -> gpu.module and manifest ---------===//
//
// The first stage: the op family's builder (kernels/Kernels.h) fills one
// gpu.module with the spec's launches as gpu.funcs, and the launch manifest
// that describes them travels with the module as `mhc.manifest`.
//
//===----------------------------------------------------------------------===//

#include "pipeline/Stages.h"

#include "kernels/Kernels.h"
#include "mhc/Codegen/Codegen.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Verifier.h"

#include <cstdio>

using namespace mlir;
using namespace mlir::mhc;

/// The PTX ISA version each arch needs (sm_90a: 7.8, sm_100a: 8.6).
static const char *ptxFeatures(const std::string &arch) {
  if (arch == "sm_100a")
    return "+ptx86";
  if (arch == "sm_90a")
    return "+ptx80";
  return "+ptx70";
}

/// A manifest that names the spec, its hash, arch and generator; the
/// family's builder adds the buffers and launches.
static ::mhc::Manifest startManifest(const ::mhc::KernelSpec &spec) {
  ::mhc::Manifest manifest;
  manifest.spec = spec.canonical();
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(spec.hash()));
  manifest.hash = hash;
  manifest.arch = spec.arch;
  manifest.compiler = generatorVersion();
  return manifest;
}

/// Builds the launches of the spec's op family into `kc`.
static LogicalResult buildFamily(KernelContext &kc, ::mhc::OpKind op) {
  switch (op) {
  case ::mhc::OpKind::Project:
    return buildProject(kc);
  case ::mhc::OpKind::Scale:
    return buildScale(kc);
  case ::mhc::OpKind::Sinkhorn:
    return buildSinkhorn(kc);
  case ::mhc::OpKind::Aggregate:
    return buildAggregate(kc);
  case ::mhc::OpKind::ExpandCombine:
    return buildExpandCombine(kc);
  case ::mhc::OpKind::Pre:
    return buildPre(kc);
  case ::mhc::OpKind::PostPre:
    return buildPostPre(kc);
  }
  return failure();
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

  manifest = startManifest(spec);
  KernelContext kc(b, module, spec, manifest);
  if (failed(buildFamily(kc, spec.op)))
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
