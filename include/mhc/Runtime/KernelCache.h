//===- KernelCache.h - on-disk kernel cache and the JIT ---------*- C++ -*-===//
//
// Compiled kernels live under a cache directory ($MHC_CACHE_DIR, else
// $XDG_CACHE_HOME/mhc, else ~/.cache/mhc), one directory per key, where the
// key hashes the kernel spec (which includes the arch) with the compiler's
// and ptxas' versions. The cache directory is the trust boundary: it is
// created private (0700), and one that another user owns or that group or
// others can write is refused. A missing kernel is compiled by running the
// compiler (mhc-compile) as a separate process group with a time limit, into
// a private directory that is renamed into place whole: readers never see a
// partial entry, and many processes may compile the same kernel at once (the
// first rename wins, the others use it). Every read checks the entry's
// checksums and validates its manifest; a truncated, corrupted or invalid
// entry is moved aside and recompiled. A failed compile is remembered for
// the process, and on disk (failures-v1/, keyed like entries, with the
// compiler file's identity) unless it timed out or was killed: later calls
// fall back at once until the compiler changes.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_RUNTIME_KERNELCACHE_H
#define MHC_RUNTIME_KERNELCACHE_H

#include "mhc/Support/KernelSpec.h"
#include "mhc/Support/Manifest.h"

#include <map>
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
  /// From the environment: MHC_CACHE_DIR, XDG_CACHE_HOME, HOME (else the
  /// password database's home), MHC_COMPILER (else mhc-compile on PATH),
  /// MHC_COMPILE_TIMEOUT (seconds), MHC_LOG (0 or 1). Throws Error naming a
  /// variable whose value is invalid, with what it expects.
  static Options fromEnvironment();

  explicit KernelCache(Options options) : options(std::move(options)) {}

  /// The kernel for `spec`: from disk, or compiled now. Throws Error when the
  /// cache directory is refused, or the compiler fails, crashes or times out
  /// (now or in an earlier call).
  CompiledKernel get(const KernelSpec &spec);

  /// The cache key of `spec` under this compiler (hex) and the entry path.
  std::string key(const KernelSpec &spec);
  std::string entryPath(const KernelSpec &spec);
  /// Where a failed compile of `spec` is recorded.
  std::string failurePath(const KernelSpec &spec);
  /// "mhc 0.1.0, MLIR 22.1.8, ptxas 13.0.88": asked of the compiler once.
  const std::string &compilerVersion();
  /// The contents of an entry's kernel.sum.
  static std::string checksum(const std::string &canonicalSpec,
                              const std::string &cubin, const std::string &json);

  const Options &settings() const { return options; }

private:
  void prepareDirectory(const std::string &dir);
  bool load(const KernelSpec &spec, const std::string &dir, CompiledKernel &out,
            std::string &why);
  CompiledKernel compile(const KernelSpec &spec, const std::string &dir);
  CompiledKernel install(const KernelSpec &spec, const std::string &staging,
                         const std::string &dir);
  [[noreturn]] void failed(const KernelSpec &spec, const std::string &error,
                           bool persistent);
  bool recallFailure(const KernelSpec &spec, std::string &error);
  std::string compilerIdentity();

  Options options;
  std::string version;
  std::string versionError; // the compiler could not tell its version
  std::map<std::string, std::string> failures; // entry path -> error
  std::mutex mutex;
};

} // namespace mhc::rt

#endif // MHC_RUNTIME_KERNELCACHE_H
