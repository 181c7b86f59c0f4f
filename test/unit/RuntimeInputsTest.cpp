//===- RuntimeInputsTest.cpp - environment variables and launch arguments -===//
//
// Every environment variable the runtime reads is validated: a bad value is
// an Error naming the variable, its value and what it expects, never a
// silent 0 s time limit, no limit, or a cache under /.cache. A launch past
// the manifest's limits is refused before anything is sized by it. No GPU.
//
//===----------------------------------------------------------------------===//

#include "mhc/Runtime/Posix.h"
#include "mhc/Runtime/Runtime.h"

#include "Expect.h"

#include <cstdlib>
#include <pwd.h>
#include <string>
#include <unistd.h>

using namespace mhc;
using namespace mhc::rt;

/// fromEnvironment's error, or "" when it accepts the environment.
static std::string environmentError(KernelCache::Options *out = nullptr) {
  try {
    KernelCache::Options o = KernelCache::fromEnvironment();
    if (out)
      *out = o;
    return "";
  } catch (const Error &e) {
    return e.what();
  }
}

/// With `name`=`value`, the error names both and says what is expected.
static bool refused(const char *name, const char *value, const std::string &expected) {
  setenv(name, value, 1);
  std::string error = environmentError();
  unsetenv(name);
  std::string needle = std::string(name) + "='" + value + "' is invalid: expected " + expected;
  if (error.find(needle) != std::string::npos)
    return true;
  std::fprintf(stderr, "expected '%s', got: %s\n", needle.c_str(),
               error.empty() ? "(accepted)" : error.c_str());
  return false;
}

static void timeoutIsValidated() {
  for (const char *bad : {"abc", "", "nan", "inf", "-inf", "-1", "0", "1e9", "5s", "3 "})
    if (*bad)
      EXPECT(refused("MHC_COMPILE_TIMEOUT", bad, "a number of seconds in (0, 86400]"));
  KernelCache::Options o;
  setenv("MHC_COMPILE_TIMEOUT", "2.5", 1);
  EXPECT(environmentError(&o).empty() && o.timeoutSeconds == 2.5);
  unsetenv("MHC_COMPILE_TIMEOUT");
  EXPECT(environmentError(&o).empty() && o.timeoutSeconds == 300);
}

static void pathsAreValidated() {
  KernelCache::Options o;
  EXPECT(refused("MHC_CACHE_DIR", "relative/cache", "an absolute path"));
  EXPECT(refused("XDG_CACHE_HOME", "relative", "an absolute path"));
  EXPECT(refused("HOME", "relative", "an absolute path"));
  EXPECT(refused("TMPDIR", "tmp", "an absolute path"));
  EXPECT(refused("MHC_LOG", "yes", "0 or 1"));
  setenv("MHC_CACHE_DIR", "/somewhere/cache", 1);
  setenv("XDG_CACHE_HOME", "relative", 1); // (not read: MHC_CACHE_DIR is set)
  EXPECT(environmentError(&o).empty() && o.directory == "/somewhere/cache");
  unsetenv("MHC_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT(environmentError(&o).empty() && o.directory == "/xdg/mhc");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/someone", 1);
  EXPECT(environmentError(&o).empty() && o.directory == "/home/someone/.cache/mhc");
  setenv("MHC_COMPILER", "", 1);
  setenv("MHC_LOG", "1", 1);
  EXPECT(environmentError(&o).empty() && o.compiler == "mhc-compile" && o.log);
  unsetenv("MHC_LOG");
  // HOME unset: the password database's home, never /.cache/mhc.
  unsetenv("HOME");
  std::string error = environmentError(&o);
  struct passwd *pw = getpwuid(geteuid());
  std::string home = pw && pw->pw_dir ? pw->pw_dir : "";
  if (home.size() > 1 && home[0] == '/') {
    EXPECT(error.empty() && o.directory == home + "/.cache/mhc");
  } else {
    EXPECT(error.find("set MHC_CACHE_DIR") != std::string::npos);
  }
  EXPECT(o.directory != "/.cache/mhc");
}

static void launchesOutsideTheLimitsAreRefused() {
  setenv("MHC_CACHE_DIR", "/nonexistent/mhc-cache", 1);
  LoadedKernel k;
  k.manifest.split = SplitRule{128, 264, 8, 0};
  k.manifest.buffers.push_back({"x", DType::F32, BufferRole::Input, {64, 0, 0}});
  void *buffers[1] = {nullptr};
  auto error = [&](int64_t M, int64_t S, size_t count) -> std::string {
    try {
      Runtime::get().launch(k, M, S, buffers, count, nullptr);
    } catch (const Error &e) {
      return e.what();
    }
    return "";
  };
  EXPECT(error(limits::kMaxTokens + 1, 1, 1).find("cannot launch for M = 68719476737") !=
         std::string::npos);
  EXPECT(error(1024, 0, 1).find("S = 0") != std::string::npos);
  EXPECT(error(1024, 9, 1).find("S = 9") != std::string::npos);
  EXPECT(error(1024, 1, 2).find("takes 1 buffers, got 2") != std::string::npos);
  EXPECT(error(0, 1, 1).empty()); // nothing to launch
}

int main() {
  for (const char *name : {"MHC_CACHE_DIR", "XDG_CACHE_HOME", "MHC_COMPILER",
                           "MHC_COMPILE_TIMEOUT", "MHC_LOG", "TMPDIR"})
    unsetenv(name);
  timeoutIsValidated();
  pathsAreValidated();
  launchesOutsideTheLimitsAreRefused();
  return summary();
}
