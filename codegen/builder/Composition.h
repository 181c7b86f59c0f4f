//===- Composition.h - a spec's launches out of other specs' ----*- C++ -*-===//
//
// Builds a composed spec (e.g. the layer seam, kernels/seam/) as a sequence
// of stages, each another spec's family builder run unchanged: its gpu.funcs
// go into the composed module, named <kernelName>_<stage>_<launch>, and its
// manifest is merged by ManifestComposer (buffers renamed onto the composed
// op's contract, intermediates as workspaces). Each stage's code is what its
// own spec compiles to, so the composition computes the unfused ops' bits.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_COMPOSITION_H
#define MHC_CODEGEN_BUILDER_COMPOSITION_H

#include "builder/KernelContext.h"
#include "builder/ManifestComposer.h"

namespace mlir::mhc {

class Composition {
public:
  /// `ctx` is the composed spec's context; its manifest receives the stages.
  explicit Composition(KernelContext &ctx) : ctx(ctx), composer(ctx.manifest) {}

  /// Declares one of the composed op's operands or results, in contract
  /// order, before the stages.
  void contract(const std::string &name, ::mhc::DType dtype,
                ::mhc::BufferRole role, ::mhc::Extent elems);

  /// Runs `build` for `stageSpec` as stage `binding.stage`. A stage's LLVM
  /// optimisation level stays its own (per launch); the SLP vectorizer is
  /// one LLVM option for the whole compile and stays on (a spec turns it
  /// off only where its PTX is the same without it).
  LogicalResult stage(const ::mhc::KernelSpec &stageSpec,
                      const ::mhc::StageBinding &binding,
                      function_ref<LogicalResult(KernelContext &)> build);

  /// Checks that the stages wrote every contract output.
  LogicalResult finish();

private:
  KernelContext &ctx;
  ::mhc::ManifestComposer composer;
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_COMPOSITION_H
