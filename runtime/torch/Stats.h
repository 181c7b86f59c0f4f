//===- Stats.h - which path each op call took -------------------*- C++ -*-===//
//
// Counters of op calls served by a generated kernel and by the reference, so
// tests can assert the path taken (mhc._C.stats()).
//
//===----------------------------------------------------------------------===//

#ifndef MHC_TORCH_STATS_H
#define MHC_TORCH_STATS_H

#include <atomic>
#include <cstdint>
#include <string>

namespace mhc::stats {
inline std::atomic<int64_t> kernelCalls{0};
inline std::atomic<int64_t> referenceCalls{0};

/// Set by the Python module: emits a warning as a Python UserWarning (calls
/// through torch.ops do not forward C++ warnings to Python's warnings).
inline void (*warningHook)(const std::string &) = nullptr;
} // namespace mhc::stats

#endif // MHC_TORCH_STATS_H
