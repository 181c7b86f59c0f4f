//===- Posix.h - files, private directories and child processes -*- C++ -*-===//
//
// The runtime's use of the operating system, through POSIX alone (it is built
// into the PyTorch extension, without LLVM). Failures throw Error with the
// path and the system's error text.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_RUNTIME_POSIX_H
#define MHC_RUNTIME_POSIX_H

#include <string>
#include <vector>

namespace mhc::rt::posix {

/// Error("mhc: <what> <path>: <strerror(errnum)>").
[[noreturn]] void fail(const std::string &what, const std::string &path,
                       int errnum);

/// Error("mhc: environment variable <name>='<value>' is invalid: expected
/// <expected>").
[[noreturn]] void invalidVariable(const char *name, const std::string &value,
                                  const std::string &expected);

/// Reads a whole file; false (errno set) when it cannot.
bool readFile(const std::string &path, std::string &out);
/// Creates or truncates a file with `data`; false (errno set) when it cannot.
bool writeFile(const std::string &path, const std::string &data);

/// Creates `path` and its missing parents, each private (mode 0700).
void makePrivateDirs(const std::string &path);
/// Throws unless `path` is a directory that the effective user owns and
/// group and others cannot write: the cache's trust boundary.
void checkPrivateDir(const std::string &path);
/// Removes a file or symlink, or a directory with everything under it
/// (symlinks are removed, never followed). Best effort.
void removeTree(const std::string &path);

/// "<path> <device>:<inode> <size> <mtime> <ctime>" of the file at `path`
/// (followed), or "" when it does not exist: a replaced or rebuilt file has
/// another identity (ctime changes on every write, and cannot be set back).
std::string fileIdentity(const std::string &path);

/// An exclusive flock(2) on `path` (created 0600 when missing), held until
/// the object dies; released by the system if the process dies first.
class FileLock {
public:
  explicit FileLock(const std::string &path);
  ~FileLock();
  FileLock(const FileLock &) = delete;
  FileLock &operator=(const FileLock &) = delete;

private:
  int fd = -1;
};

/// Where temporary files go: $TMPDIR (an absolute path) when set, else /tmp.
std::string tempRoot();

/// A fresh private directory "<parent>/<prefix>XXXXXX" (mkdtemp), removed
/// with its contents when the object dies unless released.
class TempDir {
public:
  TempDir(const std::string &parent, const std::string &prefix);
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return dir; }
  /// Keeps the directory (it was renamed into place).
  void release() { dir.clear(); }

private:
  std::string dir;
};

/// How a child process ended.
struct ChildStatus {
  enum Kind { Exited, Signaled, TimedOut, NotStarted } kind = NotStarted;
  int code = 0; // the exit code, the signal, or the errno of a failed start
};

/// Runs argv (argv[0] searched on PATH) in a new process group, with stdin
/// from /dev/null, stdout and stderr to `logPath` and TMPDIR=`tempDir`.
/// After `timeoutSeconds` the whole group is killed (the compiler and the
/// ptxas it started); so is any process the child leaves behind.
ChildStatus runWithTimeout(const std::vector<std::string> &argv,
                           const std::string &logPath, double timeoutSeconds,
                           const std::string &tempDir);

} // namespace mhc::rt::posix

#endif // MHC_RUNTIME_POSIX_H
