//===- MhcAttrs.td - mhc enums and attributes --------------*- tablegen -*-===//

#ifndef MHC_ATTRS_TD
#define MHC_ATTRS_TD

include "mhc/Dialect/MhcDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Mhc_Layout : I32EnumAttr<"Layout", "memory order of the n residual streams", [
    I32EnumAttrCase<"nc", 0>,
    I32EnumAttrCase<"cn", 1>
  ]> {
  let cppNamespace = "::mlir::mhc";
  let genSpecializedAttr = 0;
  let description = [{
    `nc`: stream-major, `x` is `[M, n, C]` (DeepSeek TileKernels, Megatron).
    `cn`: stream-minor, `x` is `[M, C, n]` (Transformer Engine).
  }];
}
def Mhc_LayoutAttr : EnumAttr<Mhc_Dialect, Mhc_Layout, "layout">;

def Mhc_SinkhornMode : I32EnumAttr<"SinkhornMode",
    "Sinkhorn-Knopp normalisation scheme", [
    I32EnumAttrCase<"log", 0>,
    I32EnumAttrCase<"softmax_eps", 1>
  ]> {
  let cppNamespace = "::mlir::mhc";
  let genSpecializedAttr = 0;
  let description = [{
    `log`: log-domain iterations on potentials f, g (Transformer Engine); no eps.
    `softmax_eps`: row softmax plus eps, then alternating column/row divisions
    by (sum + eps) (DeepSeek, Megatron).
  }];
}
def Mhc_SinkhornModeAttr : EnumAttr<Mhc_Dialect, Mhc_SinkhornMode, "sinkhorn_mode">;

def Mhc_KernelSpecAttr : AttrDef<Mhc_Dialect, "KernelSpec"> {
  let mnemonic = "spec";
  let summary = "a concrete kernel specialisation, stamped by mhc-specialize";
  let description = [{
    The canonical string of one `mhc::KernelSpec` (include/mhc/Support/
    KernelSpec.h): op, direction, n, activation and parameter dtypes, layout,
    C, arch and every variant parameter that changes the generated code. The
    string is the kernel's identity: codegen builds from it, and its hash is
    the runtime's cache key. Example:

    ```mlir
    #mhc.spec<"project.fwd;n=4;act=bf16;param=f32;layout=nc;C=7168;arch=sm_90a;tf32=0;weight=0">
    ```
  }];
  let parameters = (ins StringRefParameter<"canonical kernel spec">:$key);
  let assemblyFormat = "`<` $key `>`";
  let genVerifyDecl = 1;
}

#endif // MHC_ATTRS_TD
