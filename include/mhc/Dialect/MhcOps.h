//===- MhcOps.h - mhc operations --------------------------------*- C++ -*-===//

#ifndef MHC_DIALECT_MHCOPS_H
#define MHC_DIALECT_MHCOPS_H

#include "mhc/Dialect/MhcDialect.h"
#include "mhc/Support/KernelSpec.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::mhc {

namespace OpTrait {
/// Verifies shapes, dtypes and attribute ranges (the op's verifySignature())
/// ahead of the InferTypeOpInterface result check; see MhcOps.td.
template <typename ConcreteType>
class SignatureVerified
    : public ::mlir::OpTrait::TraitBase<ConcreteType, SignatureVerified> {
public:
  static LogicalResult verifyTrait(Operation *op) {
    return cast<ConcreteType>(op).verifySignature();
  }
};
} // namespace OpTrait

/// The eps a Sinkhorn op uses: its `eps` attribute, or 1e-6 (MATH.md's
/// default) in softmax_eps mode. Log mode has no eps.
float sinkhornEps(SinkhornMode mode, std::optional<llvm::APFloat> eps);

/// The element type of a tensor as a kernel dtype, if it is one.
std::optional<::mhc::DType> toKernelDType(Type elementType);

} // namespace mlir::mhc

#include "mhc/Dialect/MhcInterfaces.h.inc"

#define GET_OP_CLASSES
#include "mhc/Dialect/MhcOps.h.inc"

#endif // MHC_DIALECT_MHCOPS_H
