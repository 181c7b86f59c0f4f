//===- KernelCache.cpp - bundles, then the disk cache, then the JIT ------===//

#include "mhc/Runtime/KernelCache.h"

#include "CacheUtil.h"

#include "mhc/Runtime/CudaDriver.h"
#include "mhc/Runtime/Posix.h"

#include "mhc/Support/Bundle.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mhc::rt {

namespace {

//===----------------------------------------------------------------------===//
// The environment.
//===----------------------------------------------------------------------===//

constexpr double kMaxTimeoutSeconds = 86400;

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
  std::string bundles = env("MHC_BUNDLE_PATH");
  for (size_t start = 0; start < bundles.size();) {
    size_t end = std::min(bundles.find(':', start), bundles.size());
    if (end > start)
      o.bundles.push_back(bundles.substr(start, end - start));
    start = end + 1;
  }
  posix::tempRoot(); // (checks TMPDIR now, not at the first compile)
  return o;
}


//===----------------------------------------------------------------------===//
// Bundles.
//===----------------------------------------------------------------------===//

void KernelCache::loadEnvironmentBundles() {
  if (environmentBundlesLoaded)
    return;
  environmentBundlesLoaded = true;
  for (const std::string &dir : options.bundles) {
    try {
      size_t kernels = bundleSet.add(dir);
      if (options.log)
        std::fprintf(stderr, "[mhc] bundle %s: %zu kernels\n", dir.c_str(),
                     kernels);
    } catch (const Error &e) {
      std::fprintf(stderr, "mhc: warning: skipping MHC_BUNDLE_PATH entry: %s\n",
                   e.what());
    }
  }
}

size_t KernelCache::addBundle(const std::string &dir) {
  std::lock_guard<std::mutex> lock(mutex);
  loadEnvironmentBundles();
  size_t kernels = bundleSet.add(dir);
  if (options.log)
    std::fprintf(stderr, "[mhc] bundle %s: %zu kernels\n", dir.c_str(), kernels);
  return kernels;
}

std::vector<std::string> KernelCache::bundles() {
  std::lock_guard<std::mutex> lock(mutex);
  loadEnvironmentBundles();
  return bundleSet.directories();
}

//===----------------------------------------------------------------------===//
// Entries.
//===----------------------------------------------------------------------===//

std::string KernelCache::entryPath(const KernelSpec &spec) const {
  return options.directory + "/v2/" + spec.kernelName();
}

bool KernelCache::writeEntryIndex(const std::string &dir,
                                  const std::string &spec,
                                  const std::string &compiler,
                                  std::string &why) {
  BundleIndex index;
  index.kernels.emplace_back();
  if (!describeBundleKernel(dir, "kernel", spec, compiler, index.kernels[0],
                            why))
    return false;
  if (posix::writeFile(dir + "/index.json", index.toJson()))
    return true;
  why = "cannot write " + dir + "/index.json";
  return false;
}

void KernelCache::prepareDirectory(const std::string &dir) {
  posix::makePrivateDirs(dir);
  posix::checkPrivateDir(dir);
}

bool KernelCache::readEntryFiles(const KernelSpec &spec, const std::string &dir,
                           CompiledKernel &out, std::string &why) {
  BundleIndex index;
  if (!readBundleIndex(dir, index, why))
    return false;
  const BundleKernel *kernel = index.find("kernel");
  if (!kernel) {
    why = "the index lists no kernel 'kernel'";
    return false;
  }
  return readBundleKernel(dir, *kernel, spec, out, why);
}

bool KernelCache::readEntry(const KernelSpec &spec, const std::string &dir,
                            CompiledKernel &out, std::string &why) {
  // The trust boundary is checked before anything in it is read; a cache
  // that does not exist yet has no entries (and is not created here).
  for (const std::string &d : {options.directory, options.directory + "/v2"}) {
    struct stat st;
    if (stat(d.c_str(), &st) != 0) {
      why = "no entry";
      return false;
    }
    posix::checkPrivateDir(d);
  }
  if (!readEntryFiles(spec, dir, out, why) || isStale(out, why))
    return false;
  out.source = CompiledKernel::Disk;
  return true;
}

bool KernelCache::isStale(const CompiledKernel &entry, std::string &why) {
  std::string current;
  try {
    current = compilerVersion();
  } catch (const Error &) {
    return false; // no compiler to rebuild it: the entry is all there is
  }
  if (entry.compiler == current)
    return false;
  why = "built by another compiler (" + entry.compiler + "; now " + current +
        ")";
  return true;
}

void KernelCache::missing(const KernelSpec &spec, const std::string &why) {
  std::string bundles;
  for (const std::string &dir : bundleSet.directories())
    bundles += (bundles.empty() ? "" : ", ") + dir;
  std::string error =
      "mhc: no kernel for [" + spec.canonical() + "] (" + spec.kernelName() +
      "): " +
      (bundles.empty() ? "no bundle is loaded (MHC_BUNDLE_PATH, mhc.load_bundle)"
                       : "not in the bundles " + bundles) +
      " nor the cache " + options.directory + ", and it cannot be compiled: " +
      why;
  failures[entryPath(spec)] = error;
  throw Error(error);
}

CompiledKernel KernelCache::get(const KernelSpec &spec) {
  std::lock_guard<std::mutex> lock(mutex);
  loadEnvironmentBundles();
  CompiledKernel out;
  if (bundleSet.find(spec, out)) {
    ++count.bundleHits;
    if (options.log)
      std::fprintf(stderr, "[mhc] bundle hit %s [%s] in %s\n",
                   spec.kernelName().c_str(), spec.canonical().c_str(),
                   out.path.c_str());
    return out;
  }
  std::string dir = entryPath(spec);
  auto known = failures.find(dir);
  if (known != failures.end())
    throw Error(known->second);
  std::string why;
  if (readEntry(spec, dir, out, why)) {
    ++count.diskHits;
    if (options.log)
      std::fprintf(stderr, "[mhc] disk cache hit %s [%s]\n",
                   spec.kernelName().c_str(), spec.canonical().c_str());
    return out;
  }
  return compileLocked(spec, dir);
}

} // namespace mhc::rt
