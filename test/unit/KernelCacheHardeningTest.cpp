//===- KernelCacheHardeningTest.cpp - tampered entries, failures, leftovers ===//
//
//   mhc-unit-kernel-cache-hardening <scratch dir>
//
// With fake compilers (shell scripts) that write a valid manifest: an entry
// edited behind its checksum is rejected and recompiled; the cache directory
// is created private and refused when others could write it; a failed
// compile is remembered (in the process, and on disk until the compiler
// changes); leftovers of earlier processes never block an entry; a timed-out
// compile is killed with everything it started, and its temporary files go.
//
//===----------------------------------------------------------------------===//

#include "CacheTestUtil.h"

#include "mhc/Runtime/Posix.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <dirent.h>
#include <thread>
#include <unistd.h>

using namespace mhc;
using namespace mhc::rt;

static std::string scratch;

/// A compiler that writes `json` and a fake cubin, then runs `extra`.
static std::string goodCompiler(const std::string &json, const std::string &extra = "") {
  std::string source = scratch + "/manifest-" + std::to_string(checks) + ".json";
  writeAll(source, json);
  return fakeCompiler(scratch, "cp '" + source + "' \"$4/kernel.json\"; printf CUBIN > \"$4/kernel.cubin\"; " + extra);
}

/// Whether a new cache with options `o` throws `needle` for spec.
static bool freshError(const KernelCache::Options &o, const KernelSpec &spec,
                       const std::string &needle) {
  KernelCache cache(o);
  return expectError(cache, spec, needle);
}

static KernelCache::Options optionsIn(const std::string &dir, const std::string &compiler) {
  return cacheOptions(scratch + "/" + dir, compiler);
}

/// The names in `dir` (none when it does not exist).
static int countEntries(const std::string &dir) {
  int n = 0;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    closedir(d);
  }
  return n;
}

/// Whether process `pid` is gone (or a zombie) within two seconds.
static bool gone(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    std::string stat = readAll("/proc/" + std::to_string(pid) + "/stat");
    size_t paren = stat.rfind(')');
    if (stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z"))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Item 6: valid checksums do not make an edited manifest trusted.
static void tamperedEntriesAreRecompiled() {
  KernelSpec spec = specFor(64);
  std::string json = manifestFor(spec).toJson();
  KernelCache cache(optionsIn("tampered", goodCompiler(json)));
  CompiledKernel first = cache.get(spec);
  EXPECT(first.source == CompiledKernel::Compiled);
  std::string noTokens = json;
  noTokens.replace(noTokens.find("\"tokens_per_block\": 1"), 21, "\"tokens_per_block\": 0");
  Manifest wide = manifestFor(spec);
  wide.launches[0].params.assign(limits::kMaxBuffers + 3, "x"); // past every limit
  std::string huge = json;
  huge.replace(huge.find("\"max\": 1"), 8, "\"max\": 1e17");
  for (const std::string &bad : {noTokens, wide.toJson(), huge}) {
    writeAll(first.path + "/kernel.json", bad);
    std::string why;
    EXPECT(KernelCache::writeEntryIndex(first.path, spec.canonical(), first.compiler, why));
    CompiledKernel again = cache.get(spec);
    EXPECT(again.source == CompiledKernel::Compiled);
    EXPECT(again.manifest.split.tokensPerBlock == 1 && again.manifest.split.maxSplit == 1);
    EXPECT(again.manifest.launches[0].params.size() == 3);
  }
  // A compiler whose manifest fails validation is a failed compile.
  KernelCache badCompiler(optionsIn("invalid", goodCompiler(noTokens)));
  EXPECT(expectError(badCompiler, spec, "field 'split.tokens_per_block'"));
  EXPECT(countEntries(scratch + "/invalid/v2") == 0);
}

// Item 6: the cache directory is the trust boundary.
static void cacheDirectoryIsPrivate() {
  KernelSpec spec = specFor(64);
  KernelCache::Options o = optionsIn("private/a/b", goodCompiler(manifestFor(spec).toJson()));
  EXPECT(KernelCache(o).get(spec).source == CompiledKernel::Compiled);
  for (const std::string &dir : {scratch + "/private", o.directory, o.directory + "/v2"}) {
    struct stat st;
    EXPECT(stat(dir.c_str(), &st) == 0 && (st.st_mode & 0777) == 0700);
  }
  chmod(o.directory.c_str(), 0777);
  EXPECT(freshError(o, spec, "refusing the kernel cache " + o.directory +
                                                    ": group or others can write it (mode 0777)"));
  chmod(o.directory.c_str(), 0775);
  EXPECT(freshError(o, spec, "group or others can write it (mode 0775)"));
  chmod(o.directory.c_str(), 0755); // what older versions made: accepted
  EXPECT(KernelCache(o).get(spec).source == CompiledKernel::Disk);
  chmod((o.directory + "/v2").c_str(), 0757);
  EXPECT(freshError(o, spec, o.directory + "/v2: group or others"));
  chmod((o.directory + "/v2").c_str(), 0700);
  if (geteuid() == 0) {
    EXPECT(chown(o.directory.c_str(), 65534, 65534) == 0);
    EXPECT(freshError(o, spec, "it is owned by uid 65534, not by this user (uid 0)"));
    EXPECT(chown(o.directory.c_str(), 0, 0) == 0);
  } else {
    KernelCache::Options root = o;
    root.directory = "/";
    EXPECT(freshError(root, spec, "refusing the kernel cache /: it is owned by uid 0"));
  }
  EXPECT(KernelCache(o).get(spec).source == CompiledKernel::Disk);
  // Errors carry the system's text.
  writeAll(scratch + "/a-file", "");
  KernelCache::Options under = o;
  under.directory = scratch + "/a-file/cache";
  EXPECT(freshError(under, spec,
                     "cannot create the directory " + scratch + "/a-file/cache: Not a directory"));
}

// Item 7: a failure is remembered, in the process and on disk, until the
// compiler (its version or its file) changes; a timeout only in the process.
static void failuresAreRemembered() {
  KernelSpec spec = specFor(64);
  std::string count = scratch + "/failing-runs";
  std::string versionFile = scratch + "/failing-version";
  writeAll(versionFile, "fake 7\n");
  std::string compiler = scratch + "/failing-compiler.sh";
  std::string script = "#!/bin/sh\nif [ \"$1\" = --version-info ]; then cat '" + versionFile +
                       "'; exit 0; fi\necho run >> '" + count + "'\necho broken >&2\nexit 3\n";
  writeAll(compiler, script);
  chmod(compiler.c_str(), 0755);
  KernelCache::Options o = optionsIn("failing", compiler);
  KernelCache cache(o);
  EXPECT(expectError(cache, spec, "failed (exit 3): broken"));
  EXPECT(expectError(cache, spec, "failed (exit 3): broken"));
  EXPECT(lines(count) == 1);
  EXPECT(exists(cache.failurePath(spec)));
  EXPECT(freshError(o, spec, "(recorded in " + cache.failurePath(spec)));
  EXPECT(lines(count) == 1);
  writeAll(versionFile, "fake 8\n"); // a new version (of a new file): a new key
  writeAll(compiler, script);
  EXPECT(freshError(o, spec, "failed (exit 3): broken"));
  EXPECT(lines(count) == 2);
  writeAll(compiler, script + "# rebuilt\n"); // the same version, a new file
  EXPECT(freshError(o, spec, "failed (exit 3): broken"));
  EXPECT(lines(count) == 3);
  // No entry was made for it.
  EXPECT(countEntries(o.directory + "/v2") == 0);

  std::string slowCount = scratch + "/slow-runs";
  KernelCache::Options slow = optionsIn("slow", fakeCompiler(scratch, "echo run >> '" + slowCount + "'; sleep 30"));
  slow.timeoutSeconds = 0.5;
  KernelCache slowCache(slow);
  EXPECT(expectError(slowCache, spec, "timed out after 0.5 s"));
  auto start = std::chrono::steady_clock::now();
  EXPECT(expectError(slowCache, spec, "timed out after 0.5 s"));
  EXPECT(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(400));
  EXPECT(lines(slowCount) == 1);
  EXPECT(!exists(slowCache.failurePath(spec)));
  EXPECT(freshError(slow, spec, "timed out"));
  EXPECT(lines(slowCount) == 2);
}

// Item 8: leftovers of earlier processes never make an entry unusable.
static void leftoversDoNotBlockEntries() {
  KernelSpec spec = specFor(64);
  KernelCache cache(optionsIn("leftovers", goodCompiler(manifestFor(spec).toJson())));
  std::string entry = cache.entryPath(spec);
  cache.get(spec);
  // A damaged entry, and the quarantine name an earlier process of this
  // pid (PIDs repeat in containers) left behind, not empty.
  writeAll(entry + "/index.json", "garbage");
  mkdir((entry + ".bad-" + std::to_string(getpid())).c_str(), 0700);
  writeAll(entry + ".bad-" + std::to_string(getpid()) + "/index.json", "old");
  EXPECT(cache.get(spec).source == CompiledKernel::Compiled);
  EXPECT(cache.get(spec).source == CompiledKernel::Disk);
  writeAll(entry + "/index.json", "garbage");
  EXPECT(cache.get(spec).source == CompiledKernel::Compiled);
  // A file where the entry's directory belongs.
  posix::removeTree(entry);
  writeAll(entry, "not a directory");
  EXPECT(cache.get(spec).source == CompiledKernel::Compiled);
  EXPECT(cache.get(spec).source == CompiledKernel::Disk);
  // Only the entry, the old leftover and no quarantine or staging directory.
  EXPECT(countEntries(scratch + "/leftovers/v2") == 2);
}

// Item 8: a compile that times out is killed with the processes it started
// (ptxas, here a sleep), and its temporary directory is removed; so are the
// stragglers of a compiler that exits. The version check uses TMPDIR too.
static void compilesLeaveNothingBehind() {
  KernelSpec spec = specFor(64);
  std::string pidFile = scratch + "/grandchild", seen = scratch + "/child-tmpdir";
  std::string versionSeen = scratch + "/version-tmpdir";
  std::string compiler = scratch + "/leaky-compiler.sh";
  writeAll(compiler, "#!/bin/sh\n"
                     "if [ \"$1\" = --version-info ]; then\n"
                     "  echo \"$TMPDIR\" > '" + versionSeen + "'; touch \"$TMPDIR/v\"\n"
                     "  echo leaky; exit 0\n"
                     "fi\n"
                     "sleep 60 & echo $! > '" + pidFile + "'\n"
                     "echo \"$TMPDIR\" > '" + seen + "'; touch \"$TMPDIR/leak\"\n"
                     "wait\n");
  chmod(compiler.c_str(), 0755);
  KernelCache::Options o = optionsIn("leaky", compiler);
  o.timeoutSeconds = 1;
  EXPECT(freshError(o, spec, "timed out after 1 s"));
  pid_t grandchild = std::atoi(readAll(pidFile).c_str());
  EXPECT(grandchild > 0 && gone(grandchild));
  std::string childTmp = readAll(seen), versionTmp = readAll(versionSeen);
  EXPECT(childTmp.rfind(scratch + "/tmp/mhc-compile-", 0) == 0);
  EXPECT(versionTmp.rfind(scratch + "/tmp/mhc-version-", 0) == 0);
  EXPECT(countEntries(scratch + "/tmp") == 0);
  EXPECT(countEntries(o.directory + "/v2") == 0);

  std::remove(pidFile.c_str());
  KernelCache exits(optionsIn("exits", fakeCompiler(scratch, "sleep 60 & echo $! > '" + pidFile + "'; exit 5")));
  EXPECT(expectError(exits, spec, "failed (exit 5)"));
  grandchild = std::atoi(readAll(pidFile).c_str());
  EXPECT(grandchild > 0 && gone(grandchild));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <scratch dir>\n", argv[0]);
    return 2;
  }
  scratch = argv[1];
  // The JIT's temporary files go under TMPDIR; each test checks it is left empty.
  std::string tmp = scratch + "/tmp";
  mkdir(tmp.c_str(), 0700);
  setenv("TMPDIR", tmp.c_str(), 1);
  tamperedEntriesAreRecompiled();
  cacheDirectoryIsPrivate();
  failuresAreRemembered();
  leftoversDoNotBlockEntries();
  compilesLeaveNothingBehind();
  EXPECT(countEntries(tmp) == 0);
  return summary();
}
