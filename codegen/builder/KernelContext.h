//===- KernelContext.h - one kernel spec being built ------------*- C++ -*-===//
//
// The state every family builder works on: the spec, the gpu.module and
// manifest being filled, and the launches declared so far.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_KERNELCONTEXT_H
#define MHC_CODEGEN_BUILDER_KERNELCONTEXT_H

#include "builder/KernelBuilder.h"
#include "mhc/Support/KernelSpec.h"

#include <deque>

namespace mlir::mhc {

struct KernelContext {
  KernelContext(OpBuilder &b, gpu::GPUModuleOp module,
                const ::mhc::KernelSpec &spec, ::mhc::Manifest &manifest)
      : b(b), module(module), spec(spec), manifest(manifest),
        launchPrefix(spec.kernelName()) {}

  OpBuilder &b;
  gpu::GPUModuleOp module;
  const ::mhc::KernelSpec &spec;
  ::mhc::Manifest &manifest;
  std::deque<LaunchBuilder> launches;
  /// What launch names start with: the spec's kernel name, or, for a stage
  /// of a composed spec (builder/Composition.h), the composed spec's kernel
  /// name and the stage's name.
  std::string launchPrefix;
  /// LLVM's optimisation level for the module (ptxas -O3 follows either
  /// way). A family lowers it only where a measurement shows the kernel
  /// runs as fast and the cold JIT needs the time.
  unsigned llvmOptLevel = 3;
  /// Whether LLVM's SLP vectorizer runs on the module (it packs f32 pairs
  /// into bf16x2 conversions, and sm_100's f32x2 arithmetic). A family turns
  /// it off only where its PTX is the same without it.
  bool llvmSLP = true;

  int64_t n() const { return spec.n; }
  int64_t C() const { return spec.channels; }
  int64_t K() const { return spec.n * spec.channels; }
  int64_t N() const { return ::mhc::numLogits(spec.n); }
  /// Elements per 16-byte access of the activations, narrowed until it
  /// divides C, so every channel chunk is aligned and no tail is needed.
  int64_t actWidth() const;
  /// Channels per chunk of the stream kernels (loadStreams/storeStreams).
  /// (n, C) layout: actWidth(). (C, n) layout: the channels whose n streams
  /// fill one 16-byte access (8/n for 2-byte types), so that a warp's
  /// accesses are contiguous; actWidth() when n does not divide it.
  int64_t streamWidth() const;
  /// Blocks of a persistent (grid-stride over tokens) launch: fixed per arch
  /// so that cross-token partial sums have the same order on every run.
  int64_t persistentBlocks() const;
  /// The flagship part's SMs (persistentBlocks() / 2): resident blocks per
  /// wave are smCount() * blocks per SM.
  int64_t smCount() const { return persistentBlocks() / 2; }

  void buffer(const std::string &name, ::mhc::DType dtype,
              ::mhc::BufferRole role, ::mhc::Extent elems);
  /// Starts a launch named <launchPrefix>_<suffix>.
  LaunchBuilder &launch(const std::string &suffix);
  /// Creates the gpu.func of `launch` and returns a builder positioned in it.
  KernelBuilder begin(LaunchBuilder &launch);
  /// Records every launch in the manifest (after all were built).
  void finish();
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_KERNELCONTEXT_H
