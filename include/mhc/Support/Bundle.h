//===- Bundle.h - the kernel bundle's index ---------------------*- C++ -*-===//
//
// A kernel bundle is a directory holding, per kernel, <kernel>.ptx, <kernel>.cubin
// (absent in a PTX-only bundle) and <kernel>.json (its Manifest), and
// index.json listing them with checksums. `mhc-opt --mhc-write-bundle`,
// `mhc-compile -o` and `mhc precompile` write bundles; the runtime reads them
// (MHC_BUNDLE_PATH, mhc.load_bundle) and each entry of its disk cache is a
// one-kernel bundle (kernel "kernel"). docs/USAGE.md describes the format.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_SUPPORT_BUNDLE_H
#define MHC_SUPPORT_BUNDLE_H

#include <string>
#include <vector>

namespace mhc {

/// One kernel of a bundle's index.
struct BundleKernel {
  std::string kernel;   // the files' name: <kernel>.ptx, .cubin, .json
  std::string spec;     // KernelSpec::canonical()
  std::string compiler; // what built it: `mhc-compile --version-info`
  std::string cubin;    // fileDigest of the cubin; "" when there is none
  std::string json;     // fileDigest of the manifest
};

struct BundleIndex {
  static constexpr int kFormat = 1;
  std::vector<BundleKernel> kernels;

  /// The entry named `kernel`, or nullptr.
  const BundleKernel *find(const std::string &kernel) const;
  /// Adds `k`, replacing an entry of the same kernel name.
  void put(const BundleKernel &k);

  /// {"format": 1, "kernels": [{...}, ...]}, one kernel a line.
  std::string toJson() const;
  /// Reads what toJson wrote; on failure returns false and sets `error`,
  /// naming the first bad field (an index without checksums is refused).
  static bool fromJson(const std::string &text, BundleIndex &out,
                       std::string &error);
};

/// "<FNV-1a 64 of data, 16 hex digits> <size>": detects a truncated or
/// corrupted file, not a forged one (the trust boundary is who can write the
/// directory).
std::string fileDigest(const std::string &data);

} // namespace mhc

#endif // MHC_SUPPORT_BUNDLE_H
