//===- SpecOf.h - the kernel specs a torch op call requests on CUDA -*- C++ -*-===//

#ifndef MHC_TORCH_SPECOF_H
#define MHC_TORCH_SPECOF_H

#include <torch/extension.h>

#include <string>
#include <vector>

namespace mhc::ops {

/// The canonical specs (with `arch`) that torch.ops.mhc.<op>'s CUDA entry,
/// called with `args` (the schema's arguments, in order), asks select()
/// for, in order; none for M = 0. Throws std::invalid_argument for an op
/// without kernels or an unknown arch.
std::vector<std::string> requestedSpecs(const std::string &op,
                                        const pybind11::tuple &args,
                                        const std::string &arch);

} // namespace mhc::ops

#endif // MHC_TORCH_SPECOF_H
