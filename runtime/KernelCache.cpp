//===- KernelCache.cpp - on-disk kernel cache and the JIT -----------------===//

#include "mhc/Runtime/KernelCache.h"

#include "mhc/Runtime/CudaDriver.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <random>
#include <signal.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace mhc::rt {

namespace {

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

bool readFile(const std::string &path, std::string &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

bool writeFile(const std::string &path, const std::string &data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  out.flush();
  return static_cast<bool>(out);
}

bool makeDirs(const std::string &path) {
  std::string partial;
  std::stringstream ss(path);
  std::string piece;
  if (!path.empty() && path[0] == '/')
    partial = "/";
  while (std::getline(ss, piece, '/')) {
    if (piece.empty())
      continue;
    partial += piece + "/";
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      return false;
  }
  return true;
}

void removeTree(const std::string &path) {
  // Entries hold only plain files.
  for (const char *name : {"kernel.cubin", "kernel.json", "kernel.ptx",
                           "kernel.sum", "compile.log"})
    std::remove((path + "/" + name).c_str());
  rmdir(path.c_str());
}

std::string env(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

std::string tail(const std::string &s, size_t n) {
  return s.size() <= n ? s : s.substr(s.size() - n);
}

} // namespace

int runWithTimeout(const std::vector<std::string> &argv,
                   const std::string &logPath, double timeoutSeconds) {
  pid_t pid = fork();
  if (pid < 0)
    return -100;
  if (pid == 0) {
    int fd = open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    std::vector<char *> args;
    for (const std::string &a : argv)
      args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid)
      break;
    if (r < 0)
      return -100;
    double elapsed = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (elapsed > timeoutSeconds) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFSIGNALED(status))
    return -2 - WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -100;
}

KernelCache::Options KernelCache::fromEnvironment() {
  Options o;
  o.directory = env("MHC_CACHE_DIR");
  if (o.directory.empty()) {
    std::string xdg = env("XDG_CACHE_HOME");
    o.directory = !xdg.empty() ? xdg + "/mhc" : env("HOME") + "/.cache/mhc";
  }
  o.compiler = env("MHC_COMPILER");
  if (o.compiler.empty())
    o.compiler = "mhc-compile";
  std::string timeout = env("MHC_COMPILE_TIMEOUT");
  if (!timeout.empty())
    o.timeoutSeconds = std::atof(timeout.c_str());
  o.log = env("MHC_LOG") == "1";
  return o;
}

const std::string &KernelCache::compilerVersion() {
  if (!version.empty())
    return version;
  char tmpl[] = "/tmp/mhc-version-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd >= 0)
    close(fd);
  int rc = runWithTimeout({options.compiler, "--version-info"}, tmpl, 60);
  std::string out;
  readFile(tmpl, out);
  std::remove(tmpl);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  if (rc != 0 || out.empty())
    throw Error("mhc: cannot run the kernel compiler '" + options.compiler +
                "' (set MHC_COMPILER): " +
                (rc == 127 ? std::string("not found") : tail(out, 400)));
  version = out;
  return version;
}

std::string KernelCache::key(const KernelSpec &spec) {
  return hex(fnv1a(spec.canonical() + "|" + compilerVersion()));
}

std::string KernelCache::entryPath(const KernelSpec &spec) {
  return options.directory + "/v1/" + spec.kernelName() + "-" + key(spec);
}

bool KernelCache::load(const KernelSpec &spec, const std::string &dir,
                       CompiledKernel &out, std::string &why) {
  std::string sum, json;
  if (!readFile(dir + "/kernel.sum", sum)) {
    why = "no checksum file";
    return false;
  }
  if (!readFile(dir + "/kernel.json", json) ||
      !readFile(dir + "/kernel.cubin", out.cubin)) {
    why = "missing kernel files";
    return false;
  }
  std::string expected = "spec " + spec.canonical() + "\ncubin " +
                         hex(fnv1a(out.cubin)) + " " +
                         std::to_string(out.cubin.size()) + "\njson " +
                         hex(fnv1a(json)) + "\n";
  if (sum != expected) {
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

CompiledKernel KernelCache::compile(const KernelSpec &spec,
                                    const std::string &dir) {
  std::string parent = options.directory + "/v1";
  if (!makeDirs(parent))
    throw Error("mhc: cannot create the kernel cache " + parent);
  std::random_device rd;
  std::string tmp = parent + "/.tmp-" + std::to_string(getpid()) + "-" +
                    hex((uint64_t(rd()) << 32) ^ rd());
  if (mkdir(tmp.c_str(), 0755) != 0)
    throw Error("mhc: cannot create " + tmp);
  auto start = std::chrono::steady_clock::now();
  int rc = runWithTimeout({options.compiler, "--spec", spec.canonical(), "-o",
                           tmp, "--name", "kernel"},
                          tmp + "/compile.log", options.timeoutSeconds);
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  std::string log;
  readFile(tmp + "/compile.log", log);
  if (rc != 0) {
    removeTree(tmp);
    std::string what = rc == -1   ? "timed out after " +
                                        std::to_string(options.timeoutSeconds) + " s"
                       : rc <= -2 ? "crashed (signal " + std::to_string(-2 - rc) + ")"
                                  : "failed (exit " + std::to_string(rc) + ")";
    throw Error("mhc: compiling kernel " + spec.kernelName() + " [" +
                spec.canonical() + "] " + what + ": " + tail(log, 600));
  }
  std::string cubin, json;
  if (!readFile(tmp + "/kernel.cubin", cubin) ||
      !readFile(tmp + "/kernel.json", json)) {
    removeTree(tmp);
    throw Error("mhc: the compiler wrote no kernel for " + spec.canonical());
  }
  std::string sum = "spec " + spec.canonical() + "\ncubin " +
                    hex(fnv1a(cubin)) + " " + std::to_string(cubin.size()) +
                    "\njson " + hex(fnv1a(json)) + "\n";
  // The checksum file goes last: an entry without it is never trusted.
  if (!writeFile(tmp + "/kernel.sum", sum)) {
    removeTree(tmp);
    throw Error("mhc: cannot write the kernel cache entry " + tmp);
  }
  CompiledKernel out;
  if (rename(tmp.c_str(), dir.c_str()) != 0) {
    // Another process installed this entry first: use it.
    removeTree(tmp);
    std::string why;
    if (!load(spec, dir, out, why))
      throw Error("mhc: cache entry " + dir + " is unusable: " + why);
    out.source = CompiledKernel::Disk;
    return out;
  }
  std::string why;
  if (!load(spec, dir, out, why))
    throw Error("mhc: freshly compiled entry " + dir + " is unusable: " + why);
  out.source = CompiledKernel::Compiled;
  out.compileSeconds = seconds;
  return out;
}

CompiledKernel KernelCache::get(const KernelSpec &spec) {
  std::lock_guard<std::mutex> lock(mutex);
  std::string dir = entryPath(spec);
  CompiledKernel out;
  std::string why;
  if (load(spec, dir, out, why)) {
    out.source = CompiledKernel::Disk;
    if (options.log)
      std::fprintf(stderr, "[mhc] disk cache hit %s [%s]\n",
                   spec.kernelName().c_str(), spec.canonical().c_str());
    return out;
  }
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    // A damaged entry: move it aside (atomic) and rebuild.
    std::string trash = dir + ".bad-" + std::to_string(getpid());
    if (rename(dir.c_str(), trash.c_str()) == 0)
      removeTree(trash);
    if (options.log)
      std::fprintf(stderr, "[mhc] discarding cache entry %s: %s\n",
                   dir.c_str(), why.c_str());
  }
  out = compile(spec, dir);
  if (options.log)
    std::fprintf(stderr, "[mhc] compiled %s [%s] in %.3f s\n",
                 spec.kernelName().c_str(), spec.canonical().c_str(),
                 out.compileSeconds);
  return out;
}

} // namespace mhc::rt
