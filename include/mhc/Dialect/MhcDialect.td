//===- MhcDialect.td - the mhc dialect ---------------------*- tablegen -*-===//
//
// Manifold-Constrained Hyper-Connections (mHC): the residual-stream mixer of
// DeepSeek's mHC paper. The math is docs/MATH.md; every op here computes
// exactly one step of it, forward or backward.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_DIALECT_TD
#define MHC_DIALECT_TD

include "mlir/IR/OpBase.td"

def Mhc_Dialect : Dialect {
  let name = "mhc";
  let cppNamespace = "::mlir::mhc";
  let summary = "Manifold-Constrained Hyper-Connections (mHC)";
  let description = [{
    The `mhc` dialect models the residual-stream mixer of DeepSeek's
    "mHC: Manifold-Constrained Hyper-Connections" (section 4.3.1, eq. 14-19):
    `project`, `scale`, `sinkhorn`, `aggregate` and `expand_combine`, the
    gradient of each, and `mhc.layer`, one layer's whole residual path around
    an opaque block.

    Conventions shared by every op (see MATH.md):

    * The leading dimension of every per-token tensor is the token count `M`
      (all leading dims of the model flattened). It is usually dynamic (`?`);
      where two operands give it statically, they must agree.
    * `n` streams of `C` channels: `K = n*C`, `N = 2n + n^2` mixing logits.
    * Residual streams `x` are `[M, n, C]` in layout `nc` (stream-major:
      DeepSeek, Megatron) or `[M, C, n]` in layout `cn` (stream-minor:
      Transformer Engine). `phi`'s columns follow the same memory order.
    * Activations (`x`, `f`, `y`, `out` and their gradients) are bf16, f16 or
      f32. Mixing tensors (`h`, `ms`, `pre`, `post`, `logits`, `P` and their
      gradients) are f32. Parameters (`phi`, `alpha`, `beta`, `weight`,
      `bias`) are f32 or bf16; their gradients have the parameter's type.
    * All arithmetic accumulates in f32.
    * Sizes have hard limits (`mhc/Support/KernelLimits.h`): `n` at most 1024,
      `C` at most 2^20, `iters` at most 65536. The verifiers reject larger
      values, so no size derived from them (`K`, `N`, buffers) overflows.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasCanonicalizer = 0;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class Mhc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Mhc_Dialect, mnemonic, traits>;

#endif // MHC_DIALECT_TD
