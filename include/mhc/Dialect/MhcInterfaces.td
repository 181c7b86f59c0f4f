//===- MhcInterfaces.td - interfaces of mhc ops ------------*- tablegen -*-===//

#ifndef MHC_INTERFACES_TD
#define MHC_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Mhc_KernelOpInterface : OpInterface<"KernelOpInterface"> {
  let cppNamespace = "::mlir::mhc";
  let description = [{
    An op that becomes one GPU kernel. It describes the kernel it needs as a
    `mhc::KernelSpec` (everything but the arch, which the pass supplies), so
    specialisation, codegen and the runtime fallback all decide from one
    description.
  }];
  let methods = [
    InterfaceMethod<[{
        Fills `spec` with this op's kernel parameters (op kind, n, dtypes,
        layout, C, variant). C is 0 when the channel count is dynamic.
      }], "void", "describeKernel", (ins "::mhc::KernelSpec &":$spec)>,
  ];
}

#endif // MHC_INTERFACES_TD
