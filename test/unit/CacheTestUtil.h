//===- CacheTestUtil.h - helpers of the kernel cache tests ------*- C++ -*-===//
//
// Files, specs, fake compilers (shell scripts) and error checks shared by
// the unit tests of the runtime's disk cache and JIT.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_TEST_UNIT_CACHETESTUTIL_H
#define MHC_TEST_UNIT_CACHETESTUTIL_H

#include "mhc/Runtime/CudaDriver.h"
#include "mhc/Runtime/KernelCache.h"

#include "Expect.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <vector>

inline std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void writeAll(const std::string &path, const std::string &data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

inline bool exists(const std::string &path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

/// The number of lines of a file (0 when it does not exist).
inline int lines(const std::string &path) {
  std::string text = readAll(path);
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

inline mhc::KernelSpec specFor(int64_t channels) {
  mhc::KernelSpec s;
  s.op = mhc::OpKind::Aggregate;
  s.channels = channels;
  return s;
}

/// A small valid manifest for `spec` (what the fake compilers write).
inline mhc::Manifest manifestFor(const mhc::KernelSpec &spec) {
  mhc::Manifest m;
  m.spec = spec.canonical();
  m.arch = spec.arch;
  m.buffers.push_back({"x", mhc::DType::BF16, mhc::BufferRole::Input, {256, 0, 0}});
  m.buffers.push_back({"y", mhc::DType::BF16, mhc::BufferRole::Output, {64, 0, 0}});
  mhc::LaunchDesc l;
  l.entry = "k";
  l.params = {"x", "y", "M"};
  l.grid = mhc::GridRule{1, 0};
  m.launches = {l};
  return m;
}

/// A compiler script (a new file per call) that reports version "fake 1"
/// and otherwise runs `body` (its arguments: --spec S -o DIR --name kernel).
inline std::string fakeCompiler(const std::string &dir, const std::string &body) {
  std::string path = dir + "/fake-compiler-" + std::to_string(checks) + ".sh";
  writeAll(path, "#!/bin/sh\nif [ \"$1\" = --version-info ]; then echo fake 1; exit 0; fi\n" + body + "\n");
  chmod(path.c_str(), 0755);
  return path;
}

/// Whether cache.get(spec) throws Error with `needle` in its message.
inline bool expectError(mhc::rt::KernelCache &cache, const mhc::KernelSpec &spec,
                        const std::string &needle) {
  try {
    cache.get(spec);
  } catch (const mhc::rt::Error &e) {
    if (std::string(e.what()).find(needle) != std::string::npos)
      return true;
    std::fprintf(stderr, "unexpected error text: %s\n", e.what());
    return false;
  }
  return false;
}

/// Cache options for `directory` and `compiler`, with a 20 s compile limit.
inline mhc::rt::KernelCache::Options cacheOptions(const std::string &directory,
                                                  const std::string &compiler) {
  mhc::rt::KernelCache::Options o;
  o.directory = directory;
  o.compiler = compiler;
  o.timeoutSeconds = 20;
  return o;
}

/// Waits for every forked child; each must have exited with status 0.
inline void expectChildrenSucceed(const std::vector<pid_t> &children) {
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

#endif // MHC_TEST_UNIT_CACHETESTUTIL_H
