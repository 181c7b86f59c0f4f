//===- PTXMerge.h - one PTX module from several ------------------*- C++ -*-===//
//
// The compiler lowers each launch of a kernel spec as its own LLVM module, on
// parallel threads, and ships one PTX module (one cubin) per spec: this joins
// them. Plain text, no MLIR, so that it is unit-tested on its own.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_SUPPORT_PTXMERGE_H
#define MHC_SUPPORT_PTXMERGE_H

#include <string>
#include <vector>

namespace mhc {

/// One PTX module from modules of the same target: the first whole, then,
/// from each of the others (in order), what follows its header (.version,
/// .target, .address_size): its module-scope declarations, less any line
/// already declared before (the extern dynamic shared array every launch
/// using one declares), and its functions. Empty if `parts` is.
std::string mergePTXModules(const std::vector<std::string> &parts);

} // namespace mhc

#endif // MHC_SUPPORT_PTXMERGE_H
