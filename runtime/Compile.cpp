//===- Compile.cpp - the JIT: the compiler's version, compiles, failures --===//
//
// KernelCache's compiler side (KernelCache.h describes the rules): its
// version remembered per compiler, the locked compile into a staging
// directory renamed into place, and remembered failures.
//
//===----------------------------------------------------------------------===//

#include "mhc/Runtime/KernelCache.h"

#include "CacheUtil.h"

#include "mhc/Runtime/CudaDriver.h"
#include "mhc/Runtime/Posix.h"
#include "mhc/Support/Bundle.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace mhc::rt {

namespace {

/// 16 hex digits naming `text` (a file name under the cache directory).
std::string keyOf(const std::string &text) { return fileDigest(text).substr(0, 16); }

/// The last `n` characters of a log, without its final newlines.
std::string tail(std::string s, size_t n) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r'))
    s.pop_back();
  return s.size() <= n ? s : s.substr(s.size() - n);
}

std::string describe(const posix::ChildStatus &s, double timeoutSeconds) {
  switch (s.kind) {
  case posix::ChildStatus::Exited:
    return "failed (exit " + std::to_string(s.code) + ")";
  case posix::ChildStatus::Signaled:
    return "crashed (signal " + std::to_string(s.code) + ")";
  case posix::ChildStatus::TimedOut:
    return "timed out after " + seconds(timeoutSeconds) +
           " s (MHC_COMPILE_TIMEOUT)";
  case posix::ChildStatus::NotStarted:
    return "could not be started (" + std::generic_category().message(s.code) +
           ")";
  }
  return "?";
}

/// Moves a damaged entry aside under a fresh name (atomic: readers see the
/// entry or nothing; no leftover of an earlier process is in the way) and
/// removes it.
void discard(const std::string &entry, const std::string &parent) {
  struct stat st;
  if (lstat(entry.c_str(), &st) != 0)
    return;
  if (!S_ISDIR(st.st_mode)) {
    unlink(entry.c_str());
    return;
  }
  posix::TempDir trash(parent, ".bad-");
  rename(entry.c_str(), trash.path().c_str()); // (over the empty directory)
}

/// Whether `dir` exists and passes the cache's trust check.
bool trusted(const std::string &dir) {
  try {
    posix::checkPrivateDir(dir);
    return true;
  } catch (const Error &) {
    return false;
  }
}

/// The file `command` runs: itself with a '/', else the first on PATH.
std::string resolveCommand(const std::string &command) {
  if (command.find('/') != std::string::npos)
    return command;
  std::string path = env("PATH");
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos)
      end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + command;
    if (access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  return command;
}

} // namespace

//===----------------------------------------------------------------------===//
// The compiler's version, remembered per compiler.
//===----------------------------------------------------------------------===//

/// What the compiler's version depends on besides its own file: the
/// variables that choose its CUDA toolkit (Codegen.h's defaultToolkitPath);
/// the memo also records the identity of that toolkit's ptxas.
std::string KernelCache::versionMemoKey() {
  return "compiler " + compilerIdentity() + "\nMHC_CUDA_HOME=" +
         env("MHC_CUDA_HOME") + "\nCUDA_HOME=" + env("CUDA_HOME") + "\n";
}

/// Runs `compiler --version-info`: its first line is the version; a line
/// "toolkit <path>" names the CUDA toolkit it uses.
std::string KernelCache::askCompilerVersion(std::string &toolkit) {
  posix::TempDir scratch(posix::tempRoot(), "mhc-version-");
  std::string log = scratch.path() + "/version.log";
  posix::ChildStatus status = posix::runWithTimeout(
      {options.compiler, "--version-info"}, log, 60, scratch.path());
  std::string out;
  posix::readFile(log, out);
  bool ran = status.kind == posix::ChildStatus::Exited && status.code == 0;
  std::string first = out.substr(0, out.find('\n'));
  while (!first.empty() && first.back() == '\r')
    first.pop_back();
  if (ran && !first.empty()) {
    size_t at = out.find("\ntoolkit ");
    if (at != std::string::npos)
      toolkit = out.substr(at + 9, out.find('\n', at + 1) - at - 9);
    return first;
  }
  versionError = "mhc: cannot run the kernel compiler '" + options.compiler +
                 "' (set MHC_COMPILER): " +
                 (status.kind == posix::ChildStatus::NotStarted
                      ? std::generic_category().message(status.code)
                  : ran ? std::string("it printed no version")
                        : describe(status, 60) + ": " + tail(out, 400));
  throw Error(versionError);
}

const std::string &KernelCache::compilerVersion() {
  if (!version.empty())
    return version;
  if (!versionError.empty())
    throw Error(versionError);
  std::string key = versionMemoKey(), memo;
  std::string path = options.directory + "/compilers-v1/" + keyOf(key);
  auto ptxasLine = [](const std::string &toolkit) {
    return "toolkit " + toolkit + "\nptxas " +
           (toolkit.empty() ? "" : posix::fileIdentity(toolkit + "/bin/ptxas")) +
           "\nversion ";
  };
  if (trusted(options.directory) && trusted(options.directory + "/compilers-v1") &&
      posix::readFile(path, memo) && memo.compare(0, key.size(), key) == 0) {
    size_t start = key.size() + 8, end = memo.find('\n', start);
    if (memo.compare(key.size(), 8, "toolkit ") == 0 && end != std::string::npos) {
      std::string head = key + ptxasLine(memo.substr(start, end - start));
      if (memo.compare(0, head.size(), head) == 0 && memo.back() == '\n') {
        version = memo.substr(head.size(), memo.size() - head.size() - 1);
        if (!version.empty())
          return version;
      }
    }
  }
  std::string toolkit;
  version = askCompilerVersion(toolkit);
  // Written aside and renamed: readers see a whole memo or none. Best
  // effort (a read-only cache asks once per process).
  try {
    std::string dir = options.directory + "/compilers-v1";
    prepareDirectory(dir);
    posix::TempDir staging(dir, ".tmp-");
    std::string file = staging.path() + "/memo";
    if (posix::writeFile(file, key + ptxasLine(toolkit) + version + "\n"))
      rename(file.c_str(), path.c_str());
  } catch (const Error &) {
  }
  return version;
}

/// The identity (posix::fileIdentity) of the compiler's file: a rebuilt
/// compiler with an unchanged version string retries what its predecessor
/// failed, and is asked its version again.
std::string KernelCache::compilerIdentity() {
  std::string file = resolveCommand(options.compiler);
  std::string identity = posix::fileIdentity(file);
  return identity.empty() ? file : identity;
}

std::string KernelCache::failurePath(const KernelSpec &spec) {
  return options.directory + "/failures-v1/" + spec.kernelName() + "-" +
         keyOf(spec.canonical() + "|" + compilerVersion());
}

void KernelCache::failed(const KernelSpec &spec, const std::string &error,
                         bool persistent) {
  failures[entryPath(spec)] = error;
  if (persistent) {
    // Written aside and renamed: readers see a whole record or none.
    try {
      std::string dir = options.directory + "/failures-v1";
      prepareDirectory(dir);
      posix::TempDir staging(dir, ".tmp-");
      std::string record = staging.path() + "/record";
      if (posix::writeFile(record, "spec " + spec.canonical() + "\ncompiler " +
                                       compilerIdentity() + "\n" + error))
        rename(record.c_str(), failurePath(spec).c_str());
    } catch (const Error &) {
      // Not recorded on disk: later processes compile again.
    }
  }
  throw Error(error);
}

bool KernelCache::recallFailure(const KernelSpec &spec, std::string &error) {
  std::string path = failurePath(spec), record;
  if (!posix::readFile(path, record))
    return false;
  std::string header =
      "spec " + spec.canonical() + "\ncompiler " + compilerIdentity() + "\n";
  if (record.compare(0, header.size(), header) != 0)
    return false; // another compiler's: compile again
  error = record.substr(header.size()) + " (recorded in " + path +
          "; remove it to compile again)";
  return true;
}

//===----------------------------------------------------------------------===//
// Compiling.
//===----------------------------------------------------------------------===//

CompiledKernel KernelCache::compile(const KernelSpec &spec,
                                    const std::string &dir) {
  std::string parent = options.directory + "/v2";
  posix::TempDir staging(parent, ".tmp-");
  // The compiler's and ptxas' temporary files, removed whatever happens.
  posix::TempDir scratch(posix::tempRoot(), "mhc-compile-");
  auto start = std::chrono::steady_clock::now();
  posix::ChildStatus status = posix::runWithTimeout(
      {options.compiler, "--spec", spec.canonical(), "-o", staging.path(),
       "--name", "kernel"},
      staging.path() + "/compile.log", options.timeoutSeconds, scratch.path());
  double elapsed = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  std::string log;
  posix::readFile(staging.path() + "/compile.log", log);
  std::string what = "mhc: compiling kernel " + spec.kernelName() + " [" +
                     spec.canonical() + "] ";
  if (status.kind != posix::ChildStatus::Exited || status.code != 0) {
    // A timeout, a kill (SIGKILL: the OOM killer, say) or a failed start
    // may not recur: remembered for this process only.
    bool persistent =
        status.kind == posix::ChildStatus::Exited ||
        (status.kind == posix::ChildStatus::Signaled && status.code != SIGKILL);
    failed(spec, what + describe(status, options.timeoutSeconds) + ": " +
                     tail(log, 600),
           persistent);
  }
  // The index goes last (whatever the compiler wrote is replaced): an entry
  // without a valid one is never trusted.
  std::string why;
  if (!writeEntryIndex(staging.path(), spec.canonical(), compilerVersion(),
                       why))
    failed(spec, what + "made no usable entry: " + why, true);
  CompiledKernel out;
  if (!readEntryFiles(spec, staging.path(), out, why))
    failed(spec, what + "made an unusable entry: " + why, true);
  out.source = CompiledKernel::Compiled;
  out.compileSeconds = elapsed;
  for (int attempt = 0;; ++attempt) {
    if (rename(staging.path().c_str(), dir.c_str()) == 0) {
      staging.release();
      out.path = dir;
      return out;
    }
    int error = errno;
    // (Under the lock no other process installs it; one that ignores the
    // lock may have: use its entry unless damaged.)
    CompiledKernel theirs;
    if (readEntryFiles(spec, dir, theirs, why) && !isStale(theirs, why)) {
      theirs.source = CompiledKernel::Disk;
      return theirs;
    }
    if (attempt == 1)
      posix::fail("cannot install the kernel cache entry", dir, error);
    discard(dir, parent);
  }
}

CompiledKernel KernelCache::compileLocked(const KernelSpec &spec,
                                          const std::string &dir) {
  try {
    compilerVersion();
  } catch (const Error &e) {
    missing(spec, e.what());
  }
  std::string recorded;
  if (recallFailure(spec, recorded)) {
    failures[dir] = recorded;
    throw Error(recorded);
  }
  prepareDirectory(options.directory);
  prepareDirectory(options.directory + "/v2");
  prepareDirectory(options.directory + "/locks");
  posix::FileLock lock(options.directory + "/locks/" + spec.kernelName() +
                       ".lock");
  // Another process may have compiled it while this one waited.
  CompiledKernel out;
  std::string why;
  if (readEntry(spec, dir, out, why)) {
    ++count.diskHits;
    if (options.log)
      std::fprintf(stderr, "[mhc] disk cache hit %s [%s] (compiled by another "
                   "process)\n", spec.kernelName().c_str(),
                   spec.canonical().c_str());
    return out;
  }
  struct stat st;
  if (lstat(dir.c_str(), &st) == 0) {
    if (options.log)
      std::fprintf(stderr, "[mhc] discarding cache entry %s: %s\n",
                   dir.c_str(), why.c_str());
    discard(dir, options.directory + "/v2");
  }
  out = compile(spec, dir);
  ++count.compiles;
  if (options.log)
    std::fprintf(stderr, "[mhc] compiled %s [%s] in %.3f s\n",
                 spec.kernelName().c_str(), spec.canonical().c_str(),
                 out.compileSeconds);
  return out;
}

} // namespace mhc::rt
