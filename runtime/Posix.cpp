//===- Posix.cpp - files, private directories and child processes ---------===//

#include "mhc/Runtime/Posix.h"

#include "mhc/Runtime/CudaDriver.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <system_error>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace mhc::rt::posix {

void fail(const std::string &what, const std::string &path, int errnum) {
  throw Error("mhc: " + what + " " + path + ": " +
              std::generic_category().message(errnum));
}

void invalidVariable(const char *name, const std::string &value,
                     const std::string &expected) {
  throw Error(std::string("mhc: environment variable ") + name + "='" + value +
              "' is invalid: expected " + expected);
}

bool readFile(const std::string &path, std::string &out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  out.clear();
  char buf[1 << 16];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int saved = errno;
      close(fd);
      errno = saved;
      return n == 0;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

bool writeFile(const std::string &path, const std::string &data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return false;
  for (size_t done = 0; done < data.size();) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int saved = errno;
      close(fd);
      errno = saved;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return close(fd) == 0;
}

void makePrivateDirs(const std::string &path) {
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    std::string partial = path.substr(0, end);
    if (!partial.empty() && partial.back() != '/' &&
        mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST)
      fail("cannot create the directory", partial, errno);
    if (end == std::string::npos)
      return;
  }
}

void checkPrivateDir(const std::string &path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    fail("cannot use the kernel cache", path, errno);
  if (!S_ISDIR(st.st_mode))
    throw Error("mhc: the kernel cache " + path + " is not a directory");
  if (st.st_uid != geteuid())
    throw Error("mhc: refusing the kernel cache " + path + ": it is owned by "
                "uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                std::to_string(geteuid()) + "), who would run its kernels");
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    throw Error("mhc: refusing the kernel cache " + path + ": group or others "
                "can write it (mode " + mode + "), and so replace its kernels; "
                "make it private (chmod 700) or set MHC_CACHE_DIR");
  }
}

void removeTree(const std::string &path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    return;
  if (!S_ISDIR(st.st_mode)) {
    unlink(path.c_str());
    return;
  }
  // Depth first, symlinks not followed: only what lies under `path` goes.
  nftw(path.c_str(),
       [](const char *p, const struct stat *, int, struct FTW *) {
         std::remove(p);
         return 0;
       },
       16, FTW_DEPTH | FTW_PHYS);
}

std::string tempRoot() {
  const char *dir = std::getenv("TMPDIR");
  if (!dir || !*dir)
    return "/tmp";
  if (dir[0] != '/')
    invalidVariable("TMPDIR", dir, "an absolute path");
  return dir;
}

std::string fileIdentity(const std::string &path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return "";
  auto time = [](const struct timespec &t) {
    return std::to_string(t.tv_sec) + "." + std::to_string(t.tv_nsec);
  };
  return path + " " + std::to_string(st.st_dev) + ":" +
         std::to_string(st.st_ino) + " " + std::to_string(st.st_size) + " " +
         time(st.st_mtim) + " " + time(st.st_ctim);
}

FileLock::FileLock(const std::string &path) {
  fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    fail("cannot open the lock file", path, errno);
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      int error = errno;
      close(fd);
      fail("cannot lock", path, error);
    }
  }
}

FileLock::~FileLock() { close(fd); } // (closing releases the lock)

TempDir::TempDir(const std::string &parent, const std::string &prefix) {
  std::string name = parent + "/" + prefix + "XXXXXX";
  if (!mkdtemp(name.data()))
    fail("cannot create a temporary directory in", parent, errno);
  dir = name;
}

TempDir::~TempDir() {
  if (!dir.empty())
    removeTree(dir);
}

namespace {
/// Waits for `pid` (a process group leader) for at most `timeoutSeconds`,
/// then kills its group and reaps it. The group is killed while the leader
/// is still unreaped, so its id cannot have been reused.
ChildStatus waitForGroup(pid_t pid, double timeoutSeconds) {
  auto start = std::chrono::steady_clock::now();
  ChildStatus status;
  while (true) {
    siginfo_t info;
    std::memset(&info, 0, sizeof info);
    if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      if (errno == EINTR)
        continue;
      status.code = errno; // (reaped elsewhere: SIGCHLD ignored)
      return status;
    }
    if (info.si_pid == pid) {
      status.kind = info.si_code == CLD_EXITED ? ChildStatus::Exited
                                               : ChildStatus::Signaled;
      status.code = info.si_status;
      break;
    }
    double elapsed = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (elapsed > timeoutSeconds) {
      status.kind = ChildStatus::TimedOut;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(-pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return status;
}
} // namespace

ChildStatus runWithTimeout(const std::vector<std::string> &argv,
                           const std::string &logPath, double timeoutSeconds,
                           const std::string &tempDir) {
  // Everything the child needs is built here: posix_spawn is safe in a
  // threaded process, where code between fork and exec is not.
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  std::string tmpVar = "TMPDIR=" + tempDir;
  std::vector<char *> envp;
  for (char **e = environ; *e; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) != 0)
      envp.push_back(*e);
  envp.push_back(tmpVar.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, logPath.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE); // (ignored by Python; default for the child)
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0); // a new group, led by the child
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return {ChildStatus::NotStarted, rc};
  return waitForGroup(pid, timeoutSeconds);
}

} // namespace mhc::rt::posix
