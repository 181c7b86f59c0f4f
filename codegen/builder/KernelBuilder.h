//===- KernelBuilder.h - terse construction of gpu.func kernels -*- C++ -*-===//
//
// The kernel builders of codegen/ write straight-line SIMT code through a
// KernelBuilder, which wraps an OpBuilder so that code reads like the math
// (`kb.add(x, kb.mul(y, z))`). Its methods come in three layers, one header
// each, ordered by the hardware they need:
//   SimtBuilder.h        constants, arithmetic, math, conversions, memory,
//                        pointers, loops and branches, threads and warps
//   AsyncCopyBuilder.h   cp.async, mbarriers, bulk and TMA copies, fences,
//                        warp specialisation (sm_80 / sm_90)
//   TensorCoreBuilder.h  wgmma and its descriptors, ldmatrix/stmatrix (sm_90a)
// Each layer derives from the one below, so that one object has every method
// and a helper that takes a KernelBuilder & can call any of them; to find a
// method, look in the header of its concern. LaunchBuilder.h declares the
// launch (parameters, block, grid, shared memory) a KernelBuilder fills.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_KERNELBUILDER_H
#define MHC_CODEGEN_BUILDER_KERNELBUILDER_H

#include "builder/LaunchBuilder.h"
#include "builder/TensorCoreBuilder.h"

namespace mlir::mhc {

class KernelBuilder : public TensorCoreBuilder {
public:
  using TensorCoreBuilder::TensorCoreBuilder;
};

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_KERNELBUILDER_H
