//===- KernelCacheTest.cpp - the disk cache and the JIT, without a GPU -----===//
//
//   mhc-unit-kernel-cache <path of mhc-compile> <scratch dir>
//
// Compiles through the real compiler, then checks: a second lookup hits the
// disk; a truncated or corrupted entry is recompiled, never trusted; eight
// processes asking for one new kernel at once all get the same valid entry;
// a compiler that crashes, hangs or is missing is reported as an error (and
// never leaves a partial entry behind).
//
//===----------------------------------------------------------------------===//

#include "CacheTestUtil.h"

#include <cerrno>
#include <sys/wait.h>
#include <unistd.h>

using namespace mhc;
using namespace mhc::rt;

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <mhc-compile> <scratch dir>\n", argv[0]);
    return 2;
  }
  std::string scratch = argv[2];
  KernelCache::Options o;
  o.compiler = argv[1];
  o.directory = scratch + "/cache";
  KernelCache cache(o);
  KernelSpec spec = specFor(64);

  // Compile, then a disk hit with the same bytes.
  CompiledKernel first = cache.get(spec);
  EXPECT(first.source == CompiledKernel::Compiled);
  EXPECT(first.manifest.spec == spec.canonical());
  EXPECT(!first.cubin.empty());
  EXPECT(first.path == cache.entryPath(spec));
  CompiledKernel second = cache.get(spec);
  EXPECT(second.source == CompiledKernel::Disk);
  EXPECT(second.cubin == first.cubin);

  // A truncated cubin is recompiled.
  writeAll(first.path + "/kernel.cubin", first.cubin.substr(0, first.cubin.size() / 2));
  CompiledKernel healed = cache.get(spec);
  EXPECT(healed.source == CompiledKernel::Compiled);
  EXPECT(healed.cubin == first.cubin);
  // So is a manifest edited behind the checksum's back, and a missing index.
  std::string json = readAll(first.path + "/kernel.json");
  writeAll(first.path + "/kernel.json", json.substr(0, json.size() - 3));
  EXPECT(cache.get(spec).source == CompiledKernel::Compiled);
  std::remove((first.path + "/index.json").c_str());
  EXPECT(cache.get(spec).source == CompiledKernel::Compiled);
  EXPECT(cache.get(spec).source == CompiledKernel::Disk);

  // Eight processes compile one new kernel at once: all succeed, one entry.
  KernelSpec shared = specFor(128);
  std::vector<pid_t> children;
  for (int i = 0; i < 8; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      KernelCache mine(o);
      try {
        CompiledKernel k = mine.get(shared);
        _exit(k.manifest.spec == shared.canonical() && !k.cubin.empty() ? 0 : 1);
      } catch (...) {
        _exit(3);
      }
    }
    children.push_back(pid);
  }
  expectChildrenSucceed(children);
  EXPECT(cache.get(shared).source == CompiledKernel::Disk);

  // Failing compilers: crash, hang (time limit), nonzero exit, missing.
  KernelCache::Options bad = o;
  bad.directory = scratch + "/bad-cache";
  bad.timeoutSeconds = 1;
  bad.compiler = fakeCompiler(scratch, "kill -SEGV $$");
  EXPECT(expectError(*new KernelCache(bad), spec, "crashed (signal 11)"));
  bad.compiler = fakeCompiler(scratch, "sleep 30");
  EXPECT(expectError(*new KernelCache(bad), spec, "timed out"));
  bad.compiler = fakeCompiler(scratch, "echo boom >&2; exit 4");
  EXPECT(expectError(*new KernelCache(bad), spec, "failed (exit 4): boom"));
  bad.compiler = scratch + "/no-such-compiler";
  EXPECT(expectError(*new KernelCache(bad), spec, "cannot run the kernel compiler"));
  // No failed compile left an entry or a temporary directory behind.
  std::string leftovers = scratch + "/bad-cache/v2";
  EXPECT(rmdir(leftovers.c_str()) == 0 || errno == ENOENT);

  return summary();
}
