//===- PtxasTest.cpp - assembleCubin with fake ptxas tools ----------------===//
//
//   mhc-unit-ptxas <scratch dir>
//
// With fake toolkits (bin/ptxas a shell script): ptxas' -v report fills the
// manifest's resources and version; a ptxas that exits non-zero, crashes,
// runs past its time limit or is missing fails with a log naming the
// command and how it failed, then ptxas' own output; the temporary PTX and
// output files are removed on every path.
//
//===----------------------------------------------------------------------===//

#include "mhc/Codegen/Codegen.h"

#include "Expect.h"

#include <chrono>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <string>
#include <sys/stat.h>

static std::string scratch;

static bool contains(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

/// A new toolkit whose bin/ptxas answers --version as ptxas 13.0.88 does and
/// otherwise runs `body` (its arguments: -arch=A -O3 -v ... PTX -o CUBIN).
static std::string fakeToolkit(const std::string &name, const std::string &body) {
  std::string root = scratch + "/" + name;
  mkdir(root.c_str(), 0755);
  mkdir((root + "/bin").c_str(), 0755);
  std::string ptxas = root + "/bin/ptxas";
  std::ofstream(ptxas) << "#!/bin/sh\n"
                          "if [ \"$1\" = --version ]; then\n"
                          "  echo 'Cuda compilation tools, release 13.0, V13.0.88'; exit 0\n"
                          "fi\n"
                       << body << "\n";
  chmod(ptxas.c_str(), 0755);
  return root;
}

static ::mhc::Manifest twoLaunches() {
  ::mhc::Manifest m;
  for (const char *entry : {"k_partial", "k_tail"}) {
    ::mhc::LaunchDesc l;
    l.entry = entry;
    m.launches.push_back(l);
  }
  return m;
}

/// Files left in the temporary directory (TMPDIR, set to scratch/tmp).
static int leftovers() {
  int n = 0;
  if (DIR *d = opendir((scratch + "/tmp").c_str())) {
    while (dirent *e = readdir(d))
      n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

static void reportFillsResources() {
  std::string toolkit = fakeToolkit("report", R"(eval "out=\${$#}"
echo "$@" > "$(dirname "$0")/argv"
printf CUBIN > "$out"
cat >&2 <<'REPORT'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_partial' for 'sm_90a'
ptxas info    : Function properties for k_partial
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 96 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'k_tail' for 'sm_90a'
ptxas info    : Function properties for k_tail
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, 392 bytes cmem[0]
REPORT)");
  ::mhc::Manifest m = twoLaunches();
  std::string log, cubin = scratch + "/report.cubin";
  EXPECT(mlir::mhc::assembleCubin(toolkit, ".version 8.0\n", "sm_90a", cubin, m, log));
  EXPECT(m.ptxas == "ptxas 13.0.88");
  const ::mhc::Resources &p = m.launches[0].resources, &t = m.launches[1].resources;
  EXPECT(p.registers == 96 && p.sharedBytes == 2048 && p.stackBytes == 8);
  EXPECT(p.spillStores == 4 && p.spillLoads == 12);
  EXPECT(t.registers == 24 && t.sharedBytes == 0 && t.spillLoads == 0);
  std::ifstream argv(toolkit + "/bin/argv");
  std::string args((std::istreambuf_iterator<char>(argv)), {});
  // ptxas 13 assembles a module's functions in parallel.
  EXPECT(contains(args, "-arch=sm_90a -O3 -v -split-compile 0 "));
  EXPECT(contains(args, " -o " + cubin));
  EXPECT(leftovers() == 0);
}

/// assembleCubin fails with `expected` (and ptxas' output) in its log.
static void expectFailure(const std::string &toolkit, const std::string &expected,
                          const std::string &printed, unsigned timeoutSeconds = 60) {
  ::mhc::Manifest m = twoLaunches();
  std::string log;
  auto start = std::chrono::steady_clock::now();
  EXPECT(!mlir::mhc::assembleCubin(toolkit, ".version 8.0\n", "sm_90a",
                                   scratch + "/failed.cubin", m, log,
                                   timeoutSeconds));
  EXPECT(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  EXPECT(contains(log, toolkit + "/bin/ptxas -arch=sm_90a"));
  EXPECT(contains(log, expected));
  EXPECT(contains(log, printed));
  if (!contains(log, expected) || !contains(log, printed))
    std::fprintf(stderr, "log:\n%s\n", log.c_str());
  EXPECT(m.launches[0].resources.registers == -1);
  EXPECT(leftovers() == 0);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mhc-unit-ptxas <scratch dir>\n");
    return 2;
  }
  scratch = argv[1];
  mkdir((scratch + "/tmp").c_str(), 0700);
  setenv("TMPDIR", (scratch + "/tmp").c_str(), 1);

  reportFillsResources();
  expectFailure(fakeToolkit("fails", "echo \"ptxas fatal   : Unresolved extern function 'f'\" >&2; exit 255"),
                "exited with code 255", "ptxas fatal   : Unresolved extern function 'f'");
  expectFailure(fakeToolkit("crashes", "echo 'assembling' >&2; kill -SEGV $$"),
                "crashed: ", "assembling");
  // A hung ptxas is killed at its limit (here 1 s), with what it printed.
  expectFailure(fakeToolkit("hangs", "echo 'still assembling' >&2; exec sleep 60"),
                "did not finish within 1 s and was killed", "still assembling", 1);
  // A toolkit without ptxas: the command that could not run.
  std::string missing = scratch + "/missing";
  mkdir(missing.c_str(), 0755);
  expectFailure(missing, "could not run " + missing + "/bin/ptxas", "");
  return summary();
}
