//===- CacheUtil.h - helpers of KernelCache.cpp and Compile.cpp -*- C++ -*-===//

#ifndef MHC_RUNTIME_CACHEUTIL_H
#define MHC_RUNTIME_CACHEUTIL_H

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mhc::rt {

/// The value of environment variable `name`, "" when unset.
inline std::string env(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

inline std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

} // namespace mhc::rt

#endif // MHC_RUNTIME_CACHEUTIL_H
