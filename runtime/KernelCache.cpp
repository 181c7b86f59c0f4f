//===- KernelCache.cpp - on-disk kernel cache and the JIT -----------------===//

#include "mhc/Runtime/KernelCache.h"

#include "mhc/Runtime/CudaDriver.h"
#include "mhc/Runtime/Posix.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <pwd.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace mhc::rt {

namespace {

// FNV-1a detects a truncated or corrupted entry, not a forged one: the trust
// boundary is the cache directory's owner and mode (posix::checkPrivateDir).
uint64_t fnv1a(const std::string &data, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// The last `n` characters of a log, without its final newlines.
std::string tail(std::string s, size_t n) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r'))
    s.pop_back();
  return s.size() <= n ? s : s.substr(s.size() - n);
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

//===----------------------------------------------------------------------===//
// The environment.
//===----------------------------------------------------------------------===//

constexpr double kMaxTimeoutSeconds = 86400;

std::string env(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

/// The absolute path in variable `name`, or "" when it is unset or empty.
std::string absolutePath(const char *name) {
  std::string v = env(name);
  if (!v.empty() && v[0] != '/')
    posix::invalidVariable(name, v, "an absolute path");
  return v;
}

/// $HOME, else (unset) the password database's home of this user.
std::string homeDirectory() {
  std::string home = absolutePath("HOME");
  if (!home.empty())
    return home;
  struct passwd entry, *found = nullptr;
  std::vector<char> buf(1 << 14);
  if (getpwuid_r(geteuid(), &entry, buf.data(), buf.size(), &found) == 0 &&
      found && found->pw_dir && found->pw_dir[0] == '/' && found->pw_dir[1])
    return found->pw_dir;
  throw Error("mhc: no place for the kernel cache: MHC_CACHE_DIR, "
              "XDG_CACHE_HOME and HOME are unset and uid " +
              std::to_string(geteuid()) + " has no home directory; set "
              "MHC_CACHE_DIR");
}

double timeoutFrom(const std::string &v) {
  char *end = nullptr;
  double t = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end || !std::isfinite(t) || t <= 0 ||
      t > kMaxTimeoutSeconds)
    posix::invalidVariable("MHC_COMPILE_TIMEOUT", v,
                "a number of seconds in (0, " + seconds(kMaxTimeoutSeconds) + "]");
  return t;
}

//===----------------------------------------------------------------------===//
// Entries.
//===----------------------------------------------------------------------===//

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
// KernelCache.
//===----------------------------------------------------------------------===//

KernelCache::Options KernelCache::fromEnvironment() {
  Options o;
  o.directory = absolutePath("MHC_CACHE_DIR");
  if (o.directory.empty()) {
    std::string xdg = absolutePath("XDG_CACHE_HOME");
    o.directory = (xdg.empty() ? homeDirectory() + "/.cache" : xdg) + "/mhc";
  }
  o.compiler = env("MHC_COMPILER");
  if (o.compiler.empty())
    o.compiler = "mhc-compile";
  std::string timeout = env("MHC_COMPILE_TIMEOUT");
  if (!timeout.empty())
    o.timeoutSeconds = timeoutFrom(timeout);
  std::string log = env("MHC_LOG");
  if (!log.empty() && log != "0" && log != "1")
    posix::invalidVariable("MHC_LOG", log, "0 or 1");
  o.log = log == "1";
  posix::tempRoot(); // (checks TMPDIR now, not at the first compile)
  return o;
}

const std::string &KernelCache::compilerVersion() {
  if (!version.empty())
    return version;
  if (!versionError.empty())
    throw Error(versionError);
  posix::TempDir scratch(posix::tempRoot(), "mhc-version-");
  std::string log = scratch.path() + "/version.log";
  posix::ChildStatus status = posix::runWithTimeout(
      {options.compiler, "--version-info"}, log, 60, scratch.path());
  std::string out;
  posix::readFile(log, out);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  bool ran = status.kind == posix::ChildStatus::Exited && status.code == 0;
  if (ran && !out.empty()) {
    version = out;
    return version;
  }
  versionError = "mhc: cannot run the kernel compiler '" + options.compiler +
                 "' (set MHC_COMPILER): " +
                 (status.kind == posix::ChildStatus::NotStarted
                      ? std::generic_category().message(status.code)
                  : ran ? std::string("it printed no version")
                        : describe(status, 60) + ": " + tail(out, 400));
  throw Error(versionError);
}

std::string KernelCache::key(const KernelSpec &spec) {
  return hex(fnv1a(spec.canonical() + "|" + compilerVersion()));
}

std::string KernelCache::entryPath(const KernelSpec &spec) {
  return options.directory + "/v1/" + spec.kernelName() + "-" + key(spec);
}

std::string KernelCache::failurePath(const KernelSpec &spec) {
  return options.directory + "/failures-v1/" + spec.kernelName() + "-" +
         key(spec);
}

std::string KernelCache::checksum(const std::string &canonicalSpec,
                                  const std::string &cubin,
                                  const std::string &json) {
  return "spec " + canonicalSpec + "\ncubin " + hex(fnv1a(cubin)) + " " +
         std::to_string(cubin.size()) + "\njson " + hex(fnv1a(json)) + "\n";
}

void KernelCache::prepareDirectory(const std::string &dir) {
  posix::makePrivateDirs(dir);
  posix::checkPrivateDir(dir);
}

bool KernelCache::load(const KernelSpec &spec, const std::string &dir,
                       CompiledKernel &out, std::string &why) {
  std::string sum, json;
  if (!posix::readFile(dir + "/kernel.sum", sum)) {
    why = "no checksum file";
    return false;
  }
  if (!posix::readFile(dir + "/kernel.json", json) ||
      !posix::readFile(dir + "/kernel.cubin", out.cubin)) {
    why = "missing kernel files";
    return false;
  }
  if (sum != checksum(spec.canonical(), out.cubin, json)) {
    why = "checksum mismatch";
    return false;
  }
  std::string error;
  if (!Manifest::fromJson(json, out.manifest, error)) {
    why = "bad manifest: " + error;
    return false;
  }
  if (out.manifest.spec != spec.canonical()) {
    why = "manifest is for another spec";
    return false;
  }
  out.path = dir;
  return true;
}

/// "<path> <size> <mtime>" of the compiler's file: a rebuilt compiler with
/// an unchanged version string retries what its predecessor failed.
std::string KernelCache::compilerIdentity() {
  std::string file = resolveCommand(options.compiler);
  struct stat st;
  if (stat(file.c_str(), &st) != 0)
    return file;
  return file + " " + std::to_string(st.st_size) + " " +
         std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
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

CompiledKernel KernelCache::compile(const KernelSpec &spec,
                                    const std::string &dir) {
  std::string parent = options.directory + "/v1";
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
  std::string cubin, json;
  if (!posix::readFile(staging.path() + "/kernel.cubin", cubin) ||
      !posix::readFile(staging.path() + "/kernel.json", json))
    failed(spec, "mhc: the compiler wrote no kernel for " + spec.canonical(),
           true);
  // The checksum file goes last: an entry without it is never trusted.
  if (!posix::writeFile(staging.path() + "/kernel.sum",
                        checksum(spec.canonical(), cubin, json)))
    posix::fail("cannot write the kernel cache entry", staging.path(), errno);
  CompiledKernel out;
  std::string why;
  if (!load(spec, staging.path(), out, why))
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
    // Another process installed this entry first: use it, unless damaged.
    CompiledKernel theirs;
    if (load(spec, dir, theirs, why)) {
      theirs.source = CompiledKernel::Disk;
      return theirs;
    }
    if (attempt == 1)
      posix::fail("cannot install the kernel cache entry", dir, error);
    discard(dir, parent);
  }
}

CompiledKernel KernelCache::get(const KernelSpec &spec) {
  std::lock_guard<std::mutex> lock(mutex);
  std::string dir = entryPath(spec);
  auto known = failures.find(dir);
  if (known != failures.end())
    throw Error(known->second);
  prepareDirectory(options.directory);
  prepareDirectory(options.directory + "/v1");
  CompiledKernel out;
  std::string why;
  if (load(spec, dir, out, why)) {
    out.source = CompiledKernel::Disk;
    if (options.log)
      std::fprintf(stderr, "[mhc] disk cache hit %s [%s]\n",
                   spec.kernelName().c_str(), spec.canonical().c_str());
    return out;
  }
  std::string recorded;
  if (recallFailure(spec, recorded)) {
    failures[dir] = recorded;
    throw Error(recorded);
  }
  struct stat st;
  if (lstat(dir.c_str(), &st) == 0) {
    if (options.log)
      std::fprintf(stderr, "[mhc] discarding cache entry %s: %s\n",
                   dir.c_str(), why.c_str());
    discard(dir, options.directory + "/v1");
  }
  out = compile(spec, dir);
  if (options.log)
    std::fprintf(stderr, "[mhc] compiled %s [%s] in %.3f s\n",
                 spec.kernelName().c_str(), spec.canonical().c_str(),
                 out.compileSeconds);
  return out;
}

} // namespace mhc::rt
