//===- KernelCache.h - on-disk kernel cache and the JIT ---------*- C++ -*-===//
//
// Compiled kernels live under a cache directory ($MHC_CACHE_DIR, else
// $XDG_CACHE_HOME/mhc, else ~/.cache/mhc), one directory per key, where the
// key hashes the kernel spec (which includes the arch) with the compiler's
// and ptxas' versions. A missing kernel is compiled by running the compiler
// (mhc-compile) as a separate process with a time limit, into a private
// directory that is renamed into place whole: readers never see a partial
// entry, and many processes may compile the same kernel at once (the first
// rename wins, the others use it). Every read checks the entry's checksums
// and manifest; a truncated or corrupted entry is removed and recompiled.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_RUNTIME_KERNELCACHE_H
#define MHC_RUNTIME_KERNELCACHE_H

#include "mhc/Support/KernelSpec.h"
#include "mhc/Support/Manifest.h"

#include <mutex>
#include <string>

namespace mhc::rt {

struct CompiledKernel {
  Manifest manifest;
  std::string cubin; // the binary image
  std::string path;  // the cache entry's directory
  enum Source { Disk, Compiled } source = Disk;
  double compileSeconds = 0;
};

class KernelCache {
public:
  struct Options {
    std::string directory;
    std::string compiler;     // path of mhc-compile
    double timeoutSeconds = 300;
    bool log = false;         // MHC_LOG=1
  };
  /// From the environment: MHC_CACHE_DIR, MHC_COMPILER (else mhc-compile on
  /// PATH), MHC_COMPILE_TIMEOUT (seconds), MHC_LOG.
  static Options fromEnvironment();

  explicit KernelCache(Options options) : options(std::move(options)) {}

  /// The kernel for `spec`: from disk, or compiled now. Throws Error when the
  /// compiler fails, crashes or times out.
  CompiledKernel get(const KernelSpec &spec);

  /// The cache key of `spec` under this compiler (hex) and the entry path.
  std::string key(const KernelSpec &spec);
  std::string entryPath(const KernelSpec &spec);
  /// "mhc 0.1.0, MLIR 22.1.8, ptxas 13.0.88": asked of the compiler once.
  const std::string &compilerVersion();

  const Options &settings() const { return options; }

private:
  bool load(const KernelSpec &spec, const std::string &dir, CompiledKernel &out,
            std::string &why);
  CompiledKernel compile(const KernelSpec &spec, const std::string &dir);

  Options options;
  std::string version;
  std::mutex mutex;
};

/// Runs argv with stdout+stderr to `logPath`, killing it after `timeout`
/// seconds. Returns the exit code, or -1 for a timeout, -2 - signal for a
/// crash, -100 when it could not be started.
int runWithTimeout(const std::vector<std::string> &argv,
                   const std::string &logPath, double timeoutSeconds);

} // namespace mhc::rt

#endif // MHC_RUNTIME_KERNELCACHE_H
