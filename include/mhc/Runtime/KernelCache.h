//===- KernelCache.h - bundles, the on-disk kernel cache and the JIT -*- C++ -*-===//
//
// Where a kernel comes from, in order: a prebuilt bundle (MHC_BUNDLE_PATH, a
// ':'-separated list of directories, then mhc.load_bundle's, in the order
// added), the disk cache, else the compiler (mhc-compile) now. Bundles and
// cache entries are one format (mhc/Support/Bundle.h): every read checks the
// files against the index's checksums and validates the manifest and its
// spec; a bad bundle kernel is reported and skipped, a bad cache entry is
// moved aside and recompiled. Neither a bundle hit nor a cache hit runs the
// compiler, and bundle lookups never touch the cache directory (it may be
// read-only or absent).
//
// The cache lives under $MHC_CACHE_DIR, else $XDG_CACHE_HOME/mhc, else
// ~/.cache/mhc: one entry per spec (which includes the arch), v2/<kernel>/,
// a one-kernel bundle whose index records the `mhc-compile --version-info`
// of the compiler that built it. Staleness: an entry built by another
// compiler version than the one configured now (the version includes a
// digest of the code generator's sources and ptxas' version) is recompiled,
// never reused; with no runnable compiler, any valid entry is used. The
// compiler's version is asked once per compiler file and toolkit and
// remembered in compilers-v1/ (keyed by the file's identity, the toolkit
// variables and ptxas' identity), so a hit needs no compiler process.
//
// The cache directory is the trust boundary: it is created private (0700),
// and one that another user owns or that group or others can write is
// refused. A missing kernel is compiled under a per-kernel lock
// (locks/<kernel>.lock, flock): of many processes that miss at once, one
// compiles and the others then read its entry. The compiler runs as a
// separate process group with a time limit, into a private directory that
// is renamed into place whole with its index written last, so readers never
// see a partial entry. A failed compile is remembered for the process, and
// on disk (failures-v1/, keyed by spec and compiler version, with the
// compiler file's identity) unless it timed out or was killed: later calls
// fall back at once until the compiler changes.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_RUNTIME_KERNELCACHE_H
#define MHC_RUNTIME_KERNELCACHE_H

#include "mhc/Runtime/Bundles.h"

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace mhc::rt {

class KernelCache {
public:
  struct Options {
    std::string directory;
    std::string compiler;     // path of mhc-compile
    double timeoutSeconds = 300;
    bool log = false;         // MHC_LOG=1
    std::vector<std::string> bundles; // MHC_BUNDLE_PATH's directories
  };
  /// From the environment: MHC_CACHE_DIR, XDG_CACHE_HOME, HOME (else the
  /// password database's home), MHC_COMPILER (else mhc-compile on PATH),
  /// MHC_COMPILE_TIMEOUT (seconds), MHC_LOG (0 or 1), MHC_BUNDLE_PATH.
  /// Throws Error naming a variable whose value is invalid, with what it
  /// expects.
  static Options fromEnvironment();

  explicit KernelCache(Options options) : options(std::move(options)) {}

  /// The kernel for `spec`: from a bundle, the disk, or compiled now. Throws
  /// Error when the cache directory is refused, or no bundle has it and the
  /// compiler cannot run (the message names the spec), fails, crashes or
  /// times out (now or in an earlier call).
  CompiledKernel get(const KernelSpec &spec);

  /// Adds a bundle directory (see BundleSet::add); returns its kernel count.
  size_t addBundle(const std::string &dir);
  /// The bundle directories in use (MHC_BUNDLE_PATH's valid ones first).
  std::vector<std::string> bundles();

  /// Where the kernels came from, counted by get().
  struct Counters {
    std::atomic<int64_t> bundleHits{0}, diskHits{0}, compiles{0};
  };
  const Counters &counters() const { return count; }

  /// The entry directory of `spec`.
  std::string entryPath(const KernelSpec &spec) const;
  /// Where a failed compile of `spec` by this compiler is recorded.
  std::string failurePath(const KernelSpec &spec);
  /// "mhc 0.1.0 (codegen ...), MLIR 22.1.8, ptxas 13.0.88": remembered per
  /// compiler (see above). Throws Error when the compiler cannot run.
  const std::string &compilerVersion();
  /// The index.json of a cache entry for kernel files already in `dir`
  /// (tests forge entries with it); false when a file cannot be read.
  static bool writeEntryIndex(const std::string &dir, const std::string &spec,
                              const std::string &compiler, std::string &why);

  const Options &settings() const { return options; }

private:
  void prepareDirectory(const std::string &dir);
  void loadEnvironmentBundles();
  /// Reads the one-kernel bundle in `dir` (no trust or staleness checks).
  static bool readEntryFiles(const KernelSpec &spec, const std::string &dir,
                             CompiledKernel &out, std::string &why);
  bool readEntry(const KernelSpec &spec, const std::string &dir,
                 CompiledKernel &out, std::string &why);
  bool isStale(const CompiledKernel &entry, std::string &why);
  CompiledKernel compileLocked(const KernelSpec &spec, const std::string &dir);
  CompiledKernel compile(const KernelSpec &spec, const std::string &dir);
  [[noreturn]] void failed(const KernelSpec &spec, const std::string &error,
                           bool persistent);
  bool recallFailure(const KernelSpec &spec, std::string &error);
  std::string compilerIdentity();
  std::string versionMemoKey();
  std::string askCompilerVersion(std::string &toolkit);
  [[noreturn]] void missing(const KernelSpec &spec, const std::string &why);

  Options options;
  std::string version;
  std::string versionError; // the compiler could not tell its version
  std::map<std::string, std::string> failures; // entry path -> error
  BundleSet bundleSet;
  bool environmentBundlesLoaded = false;
  Counters count;
  std::mutex mutex;
};

} // namespace mhc::rt

#endif // MHC_RUNTIME_KERNELCACHE_H
