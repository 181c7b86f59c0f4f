//===- Bundles.h - reading kernel bundles -----------------------*- C++ -*-===//
//
// The runtime's reader of the bundle format (mhc/Support/Bundle.h): a kernel
// is used only when its files match the index's checksums, its manifest is
// valid (Manifest::fromJson) and the manifest's and the index's spec equal
// the requested one. BundleSet holds the prebuilt bundles (MHC_BUNDLE_PATH,
// mhc.load_bundle) that the cache consults before it would compile.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_RUNTIME_BUNDLES_H
#define MHC_RUNTIME_BUNDLES_H

#include "mhc/Support/Bundle.h"
#include "mhc/Support/KernelSpec.h"
#include "mhc/Support/Manifest.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace mhc::rt {

struct CompiledKernel {
  Manifest manifest;
  std::string cubin; // the binary image
  std::string path;  // the bundle or cache entry's directory
  std::string compiler; // what built it (the index's "compiler")
  enum Source { Disk, Compiled, Bundle } source = Disk;
  double compileSeconds = 0;
};

/// Reads `index` (<dir>/index.json); false with `why` when it is missing or
/// invalid.
bool readBundleIndex(const std::string &dir, BundleIndex &index,
                     std::string &why);

/// Reads kernel `entry` of the bundle in `dir` for `spec` and verifies it
/// (see above); false with `why` when it cannot be used.
bool readBundleKernel(const std::string &dir, const BundleKernel &entry,
                      const KernelSpec &spec, CompiledKernel &out,
                      std::string &why);

/// The index entry of kernel `name` in `dir` for files already there,
/// built by `compiler`; false with `why` when a file cannot be read.
bool describeBundleKernel(const std::string &dir, const std::string &name,
                          const std::string &spec, const std::string &compiler,
                          BundleKernel &out, std::string &why);

class BundleSet {
public:
  /// Adds the bundle in `dir` (its index is read now, its kernels verified
  /// when first used); returns how many kernels it lists. Throws Error naming
  /// `dir` when it has no valid index.json.
  size_t add(const std::string &dir);
  /// The first usable kernel for `spec`, in the order bundles were added. A
  /// bad entry is reported on stderr (once) and skipped.
  bool find(const KernelSpec &spec, CompiledKernel &out);
  const std::vector<std::string> &directories() const { return dirs; }

private:
  struct Entry {
    std::string dir;
    BundleKernel kernel;
  };
  std::multimap<std::string, Entry> bySpec; // canonical spec -> entries
  std::vector<std::string> dirs;
  std::set<std::string> reported; // "<dir>/<kernel>" already warned about
};

} // namespace mhc::rt

#endif // MHC_RUNTIME_BUNDLES_H
