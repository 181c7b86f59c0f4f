//===- Ptxas.cpp - PTX -> cubin with the toolkit's ptxas ------------------===//
//
// The third stage: ptxas assembles a module's PTX into a cubin, and its -v
// report (registers, spills, stack, shared memory per entry) fills the
// manifest's launch resources. A ptxas that fails, crashes or runs past
// kPtxasTimeoutSeconds is reported with its command line and output.
//
//===----------------------------------------------------------------------===//

#include "pipeline/Stages.h"

#include "mhc/Codegen/Codegen.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>

using namespace mlir;
using namespace mlir::mhc;

std::string mlir::mhc::defaultToolkitPath() {
  for (const char *var : {"MHC_CUDA_HOME", "CUDA_HOME"})
    if (const char *v = std::getenv(var); v && *v)
      return v;
  return "/usr/local/cuda";
}

/// How `argv` failed: not started, crashed, killed at the time limit or a
/// non-zero exit (`rc` and `err` as llvm::sys::ExecuteAndWait gives them).
static std::string describeFailure(ArrayRef<std::string> argv, int rc,
                                   const std::string &err, bool timedOut,
                                   unsigned timeoutSeconds) {
  std::string command = llvm::join(argv, " ");
  if (rc == -1)
    return "could not run " + command + ": " + err;
  if (rc == -2 && timedOut)
    return command + " did not finish within " +
           std::to_string(timeoutSeconds) + " s and was killed";
  if (rc == -2)
    return command + " crashed: " + err;
  return command + " exited with code " + std::to_string(rc);
}

/// Runs `argv` for at most `timeoutSeconds` (0: no limit), its stdout and
/// stderr in `output`. Unless it exits with 0, returns false and `output`
/// starts with a line that says how it failed.
static bool runTool(ArrayRef<std::string> argv, unsigned timeoutSeconds,
                    std::string &output) {
  SmallString<128> outPath;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("mhc-tool", "log", outPath)) {
    output = "cannot create a temporary file for the output of " +
             argv.front() + ": " + ec.message();
    return false;
  }
  llvm::FileRemover removeOutput(outPath); // on every path
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(outPath),
                                          StringRef(outPath)};
  SmallVector<StringRef> args(argv.begin(), argv.end());
  std::string err;
  auto start = std::chrono::steady_clock::now();
  int rc = llvm::sys::ExecuteAndWait(argv.front(), args, std::nullopt,
                                     redirects, timeoutSeconds, 0, &err);
  bool timedOut = timeoutSeconds > 0 &&
                  std::chrono::steady_clock::now() - start >=
                      std::chrono::seconds(timeoutSeconds);
  std::string printed;
  if (auto buf = llvm::MemoryBuffer::getFile(outPath))
    printed = (*buf)->getBuffer().str();
  if (rc == 0) {
    output = printed;
    return true;
  }
  output = describeFailure(argv, rc, err, timedOut, timeoutSeconds) + "\n" +
           printed;
  return false;
}

PtxasVersion mlir::mhc::ptxasVersion(const std::string &toolkit) {
  static std::map<std::string, PtxasVersion> known;
  auto it = known.find(toolkit);
  if (it != known.end())
    return it->second;
  std::string text;
  PtxasVersion v;
  std::smatch m;
  if (runTool({toolkit + "/bin/ptxas", "--version"}, kPtxasTimeoutSeconds,
              text) &&
      std::regex_search(text, m, std::regex("release ([0-9]+)[0-9.]*, V([0-9.]+)")))
    v = {std::stoi(m[1].str()), m[2].str()};
  return known[toolkit] = v;
}

/// Writes `text` to `path`; false, with the reason in `log`, if it cannot.
static bool writeText(StringRef path, const std::string &text,
                      std::string &log) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (!ec) {
    os << text;
    os.close();
    ec = os.error();
    os.clear_error(); // reported below; else the destructor aborts
  }
  if (ec)
    log = "cannot write " + path.str() + ": " + ec.message();
  return !ec;
}

/// Fills each launch's resources from ptxas -v's report: "Function
/// properties for NAME" then "N bytes stack frame, N bytes spill stores, N
/// bytes spill loads", and "Compiling entry function 'NAME'" then "Used N
/// registers, ... N bytes smem".
static void readResourceReport(const std::string &report,
                               ::mhc::Manifest &manifest) {
  std::istringstream lines(report);
  std::string line, current;
  std::regex entry("(?:Compiling entry function|Function properties for) '?([A-Za-z0-9_]+)'?");
  std::regex frame("([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  std::regex regs("Used ([0-9]+) registers");
  std::regex smem("([0-9]+) bytes smem");
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_search(line, m, entry)) {
      current = m[1];
      continue;
    }
    for (::mhc::LaunchDesc &l : manifest.launches) {
      if (l.entry != current)
        continue;
      if (std::regex_search(line, m, frame)) {
        l.resources.stackBytes = std::stoi(m[1]);
        l.resources.spillStores = std::stoi(m[2]);
        l.resources.spillLoads = std::stoi(m[3]);
      }
      if (std::regex_search(line, m, regs)) {
        l.resources.registers = std::stoi(m[1]);
        l.resources.sharedBytes = 0;
        if (std::regex_search(line, m, smem))
          l.resources.sharedBytes = std::stoi(m[1]);
      }
    }
  }
}

bool mlir::mhc::assembleCubin(const std::string &toolkit,
                              const std::string &ptx, const std::string &arch,
                              const std::string &cubinPath,
                              ::mhc::Manifest &manifest, std::string &log,
                              unsigned timeoutSeconds) {
  SmallString<128> ptxPath;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("mhc-kernel", "ptx", ptxPath)) {
    log = "cannot create a temporary file for ptxas: " + ec.message();
    return false;
  }
  llvm::FileRemover removePtx(ptxPath); // on every path
  if (!writeText(ptxPath, ptx, log))
    return false;
  PtxasVersion version = ptxasVersion(toolkit);
  if (!version.full.empty())
    manifest.ptxas = "ptxas " + version.full;
  // The launches of a module assembled in parallel (one thread per
  // function): the same SASS, and the cold JIT of a multi-launch kernel
  // (the fused pre step) takes its slowest function's time, not the sum.
  // Known in ptxas 13 (checked); older ones assemble one at a time.
  std::vector<std::string> argv = {toolkit + "/bin/ptxas", "-arch=" + arch,
                                   "-O3", "-v"};
  if (version.major >= 13)
    argv.insert(argv.end(), {"-split-compile", "0"});
  argv.insert(argv.end(), {ptxPath.str().str(), "-o", cubinPath});
  if (!runTool(argv, timeoutSeconds, log))
    return false;
  readResourceReport(log, manifest);
  return true;
}
