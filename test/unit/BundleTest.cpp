//===- BundleTest.cpp - prebuilt bundles, compiler-free hits, one compile ===//
//
//   mhc-unit-bundle <scratch dir>
//
// With a fake compiler (a shell script that logs every run): a cache hit runs
// no compiler process, a new compiler recompiles its predecessor's entries
// and a missing one leaves them in use; eight processes that miss the same
// kernels at once compile each once and all read a valid entry; bundles are
// used before the cache and the compiler, each kernel verified (checksums,
// manifest, spec), a bad one reported and skipped; with no bundle kernel and
// no compiler, the error names the spec.
//
//===----------------------------------------------------------------------===//

#include "CacheTestUtil.h"

#include "mhc/Runtime/Posix.h"

#include <algorithm>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>

using namespace mhc;
using namespace mhc::rt;

static std::string scratch;

static int count(const std::string &path, const std::string &line) {
  std::istringstream in(readAll(path));
  int n = 0;
  for (std::string l; std::getline(in, l);)
    n += l == line;
  return n;
}

/// A compiler reporting `version` that logs each run to <name>.calls (its
/// first argument) and writes manifestFor(the spec it is given), after
/// `delay` seconds.
static std::string loggingCompiler(const std::string &name,
                                   const std::string &version,
                                   const std::string &delay = "0") {
  KernelSpec placeholder = specFor(64);
  std::string json = manifestFor(placeholder).toJson();
  json.replace(json.find(placeholder.canonical()), placeholder.canonical().size(), "@SPEC@");
  writeAll(scratch + "/" + name + ".template", json);
  std::string path = scratch + "/" + name + ".sh", calls = scratch + "/" + name + ".calls";
  writeAll(path, "#!/bin/sh\necho \"$1 $2\" >> '" + calls + "'\n"
                 "if [ \"$1\" = --version-info ]; then echo '" + version + "'; exit 0; fi\n"
                 "sleep " + delay + "\n"
                 "sed \"s|@SPEC@|$2|\" '" + scratch + "/" + name + ".template' > \"$4/$6.json\"\n"
                 "printf 'CUBIN %s' \"$2\" > \"$4/$6.cubin\"\n");
  chmod(path.c_str(), 0755);
  return path;
}

static KernelCache::Options optionsFor(const std::string &cache, const std::string &compiler) {
  return cacheOptions(scratch + "/" + cache, compiler);
}

static void hitsRunNoCompiler() {
  KernelSpec spec = specFor(64);
  std::string compiler = loggingCompiler("hits", "fake 1");
  std::string calls = scratch + "/hits.calls";
  KernelCache::Options o = optionsFor("hits-cache", compiler);
  CompiledKernel first = KernelCache(o).get(spec);
  EXPECT(first.source == CompiledKernel::Compiled && first.compiler == "fake 1");
  EXPECT(count(calls, "--version-info ") == 1);
  EXPECT(count(calls, "--spec " + spec.canonical()) == 1);
  // Later processes (new caches) hit the entry without running the compiler.
  for (int i = 0; i < 3; ++i) {
    KernelCache later(o);
    EXPECT(later.get(spec).source == CompiledKernel::Disk);
    EXPECT(later.counters().diskHits == 1 && later.counters().compiles == 0);
  }
  EXPECT(lines(calls) == 2);
  // A new compiler (another file and version) never reuses the old entry.
  loggingCompiler("hits", "fake 2");
  CompiledKernel rebuilt = KernelCache(o).get(spec);
  EXPECT(rebuilt.source == CompiledKernel::Compiled && rebuilt.compiler == "fake 2");
  EXPECT(count(calls, "--spec " + spec.canonical()) == 2);
  EXPECT(KernelCache(o).get(spec).source == CompiledKernel::Disk);
  EXPECT(lines(calls) == 4);
  // With no compiler at all the entry is what there is: used.
  KernelCache::Options none = o;
  none.compiler = scratch + "/no-such-compiler";
  EXPECT(KernelCache(none).get(spec).source == CompiledKernel::Disk);
}

static void eightProcessesCompileOnce() {
  std::vector<KernelSpec> specs = {specFor(128), specFor(256), specFor(512)};
  KernelCache::Options o = optionsFor("ranks-cache", loggingCompiler("ranks", "fake 1", "0.3"));
  std::vector<pid_t> children;
  for (int rank = 0; rank < 8; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      KernelCache mine(o);
      try {
        for (size_t i = 0; i < specs.size(); ++i) {
          const KernelSpec &s = specs[(i + rank) % specs.size()]; // ranks in different orders
          CompiledKernel k = mine.get(s);
          if (k.manifest.spec != s.canonical() || k.cubin != "CUBIN " + s.canonical())
            _exit(1);
        }
        _exit(0);
      } catch (...) {
        _exit(3);
      }
    }
    children.push_back(pid);
  }
  expectChildrenSucceed(children);
  for (const KernelSpec &s : specs)
    EXPECT(count(scratch + "/ranks.calls", "--spec " + s.canonical()) == 1);
}

/// A bundle in `dir` of the kernels `specs`, as mhc-compile -o writes it.
static void makeBundle(const std::string &dir, const std::vector<KernelSpec> &specs) {
  mkdir(dir.c_str(), 0755);
  std::string compiler = loggingCompiler("bundler", "fake 1");
  BundleIndex index;
  for (const KernelSpec &s : specs) {
    std::string name = s.kernelName(), why;
    std::string command = "'" + compiler + "' --spec '" + s.canonical() + "' -o '" + dir +
                          "' --name " + name;
    EXPECT(std::system(command.c_str()) == 0);
    index.kernels.emplace_back();
    EXPECT(describeBundleKernel(dir, name, s.canonical(), "fake 1", index.kernels.back(), why));
  }
  writeAll(dir + "/index.json", index.toJson());
}

static bool errorNames(KernelCache &cache, const KernelSpec &spec,
                       const std::vector<std::string> &needles) {
  for (const std::string &needle : needles)
    if (!expectError(cache, spec, needle))
      return false;
  return true;
}

static void bundlesComeFirst() {
  KernelSpec a = specFor(64), b = specFor(128), c = specFor(192), missing = specFor(320);
  std::string one = scratch + "/bundle-one", two = scratch + "/bundle-two";
  makeBundle(one, {a, b});
  makeBundle(two, {b, c});
  // No compiler, and a cache that cannot even be created.
  writeAll(scratch + "/a-file", "");
  KernelCache::Options o = optionsFor("a-file/cache", scratch + "/no-such-compiler");
  o.bundles = {one, scratch + "/no-such-bundle"};
  KernelCache cache(o);
  EXPECT(cache.addBundle(two) == 2);
  EXPECT(cache.bundles() == std::vector<std::string>({one, two}));
  for (const KernelSpec &s : {a, b, c}) {
    CompiledKernel k = cache.get(s);
    EXPECT(k.source == CompiledKernel::Bundle && k.manifest.spec == s.canonical());
    EXPECT(k.cubin == "CUBIN " + s.canonical());
  }
  EXPECT(cache.get(b).path == one); // the first bundle that has it
  EXPECT(cache.counters().bundleHits == 4 && cache.counters().compiles == 0);
  EXPECT(errorNames(cache, missing, {"no kernel for [" + missing.canonical() + "]",
                                     "not in the bundles " + one + ", " + two,
                                     "cannot run the kernel compiler"}));
  // A damaged kernel is skipped for the next bundle's; with none left, the
  // spec is missing.
  writeAll(one + "/" + b.kernelName() + ".cubin", "CUBIN tampered");
  EXPECT(cache.get(b).path == two);
  writeAll(one + "/" + a.kernelName() + ".cubin", "CUBIN tampered");
  EXPECT(expectError(cache, a, "no kernel for [" + a.canonical() + "]"));
  // A manifest of another spec under valid checksums is refused too.
  std::string other = manifestFor(missing).toJson();
  writeAll(two + "/" + c.kernelName() + ".json", other);
  BundleIndex index;
  std::string why;
  EXPECT(readBundleIndex(two, index, why));
  for (BundleKernel &k : index.kernels)
    if (k.spec == c.canonical())
      k.json = fileDigest(other);
  writeAll(two + "/index.json", index.toJson());
  KernelCache fresh(o);
  fresh.addBundle(two);
  EXPECT(expectError(fresh, c, "no kernel for [" + c.canonical() + "]"));
  // A directory without a valid index is refused by name.
  try {
    fresh.addBundle(scratch);
    EXPECT(false);
  } catch (const Error &e) {
    EXPECT(std::string(e.what()) == "mhc: cannot use the kernel bundle " + scratch + ": no index.json");
  }
  writeAll(scratch + "/old-index/index.json", "");
  mkdir((scratch + "/old-index").c_str(), 0755);
  writeAll(scratch + "/old-index/index.json", "{\"kernels\": []}");
  try {
    fresh.addBundle(scratch + "/old-index");
    EXPECT(false);
  } catch (const Error &e) {
    EXPECT(std::string(e.what()).find("an index without checksums") != std::string::npos);
  }
  // MHC_BUNDLE_PATH: a ':'-separated list, empty parts ignored.
  setenv("MHC_BUNDLE_PATH", (one + "::" + two + ":").c_str(), 1);
  EXPECT(KernelCache::fromEnvironment().bundles == std::vector<std::string>({one, two}));
  unsetenv("MHC_BUNDLE_PATH");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <scratch dir>\n", argv[0]);
    return 2;
  }
  scratch = argv[1];
  hitsRunNoCompiler();
  eightProcessesCompileOnce();
  bundlesComeFirst();
  return summary();
}
