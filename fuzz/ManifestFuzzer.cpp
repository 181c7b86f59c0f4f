//===- ManifestFuzzer.cpp - libFuzzer target: kernel manifests ------------===//
//
// One input is a manifest (<kernel>.json of a bundle or a cache entry, which
// a tampered cache can hold). Manifest::fromJson either fails with a message
// or accepts it; an accepted manifest must write (toJson) what reads back to
// the same manifest, and everything the runtime computes from it before a
// launch (split count, buffer sizes, grids, PTX parameter counts) must be
// defined for any token count M.
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/Manifest.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {
[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "mhc-fuzz-manifest: %s\n%s\n", what, detail.c_str());
  std::abort();
}

/// What Runtime::launch derives from the manifest for M tokens.
void launchShape(const mhc::Manifest &m, int64_t tokens) {
  int64_t split = m.split.splitFor(tokens);
  for (const mhc::BufferDesc &b : m.buffers)
    (void)b.elems.at(tokens, split);
  for (const mhc::LaunchDesc &l : m.launches)
    (void)l.grid.blocksFor(tokens, split);
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  mhc::Manifest manifest;
  std::string error;
  if (!mhc::Manifest::fromJson(text, manifest, error)) {
    if (error.empty())
      fail("fromJson failed without a message", text);
    return 0;
  }
  std::string written = manifest.toJson();
  mhc::Manifest reread;
  if (!mhc::Manifest::fromJson(written, reread, error))
    fail(("toJson wrote what fromJson rejects: " + error).c_str(), written);
  if (reread.toJson() != written)
    fail("toJson after fromJson(toJson) gives other text", written);
  for (const mhc::LaunchDesc &l : manifest.launches)
    (void)mhc::Manifest::ptxParamCount(l);
  for (int64_t tokens : {int64_t(0), int64_t(1), int64_t(4096), int64_t(1) << 20})
    launchShape(manifest, tokens);
  return 0;
}
