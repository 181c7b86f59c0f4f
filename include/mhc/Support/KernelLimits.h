//===- KernelLimits.h - hard limits of a kernel spec's fields ---*- C++ -*-===//
//
// The largest n, C and Sinkhorn iters mhc accepts anywhere: the dialect
// verifiers, KernelSpec::parse and unsupportedReason all take them from here.
// Within them every size derived from a spec (K = n*C, N = 2n + n^2, buffer
// and shared-memory bytes) stays far inside int64. No MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_SUPPORT_KERNELLIMITS_H
#define MHC_SUPPORT_KERNELLIMITS_H

#include <cstdint>
#include <string>

namespace mhc {

struct KernelSpec;

inline constexpr int64_t kMaxStreams = 1024;               // n
inline constexpr int64_t kMaxChannels = int64_t(1) << 20;  // C
inline constexpr int64_t kMaxSinkhornIters = 65536;        // iters

/// Why no kernel can have this spec, or the empty string: a field the op uses
/// is outside its hard limit above (n, C, iters) or its range (eps and
/// norm/pre eps finite and >= 0, post_mult finite and > 0).
/// KernelSpec::parse rejects such strings; unsupportedReason reports them.
std::string invalidReason(const KernelSpec &spec);

} // namespace mhc

#endif // MHC_SUPPORT_KERNELLIMITS_H
