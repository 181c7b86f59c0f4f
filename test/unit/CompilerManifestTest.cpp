//===- CompilerManifestTest.cpp - the compiler's manifests pass the checks -===//
//
//   mhc-unit-compiler-manifests <path of mhc-compile> <scratch dir>
//
// The manifest bounds (Manifest.h, limits::) must never refuse what codegen
// writes: every op and direction, with each variant and arch, is compiled by
// the real compiler through the cache, which validates the entry it reads.
//
//===----------------------------------------------------------------------===//

#include "CacheTestUtil.h"

#include <vector>

using namespace mhc;
using namespace mhc::rt;

static std::vector<KernelSpec> specs() {
  std::vector<KernelSpec> out;
  for (OpKind op : {OpKind::Project, OpKind::Scale, OpKind::Sinkhorn,
                    OpKind::Aggregate, OpKind::ExpandCombine, OpKind::Pre})
    for (Direction dir : {Direction::Forward, Direction::Backward})
      for (int variant = 0; variant < 4; ++variant) {
        KernelSpec s;
        s.op = op;
        s.dir = dir;
        s.channels = 2048;
        s.n = variant & 1 ? 8 : 4;
        s.tf32 = s.hasWeight = s.hasBias = variant & 2;
        s.mode = variant & 2 ? SinkhornMode::SoftmaxEps : SinkhornMode::Log;
        s.arch = variant == 3 ? "sm_100a" : variant == 2 ? "sm_80" : "sm_90a";
        if (unsupportedReason(s).empty())
          out.push_back(s);
      }
  return out;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <mhc-compile> <scratch dir>\n", argv[0]);
    return 2;
  }
  KernelCache::Options o;
  o.compiler = argv[1];
  o.directory = std::string(argv[2]) + "/cache";
  KernelCache cache(o);
  std::vector<KernelSpec> all = specs();
  EXPECT(all.size() >= 30);
  for (const KernelSpec &spec : all) {
    try {
      CompiledKernel k = cache.get(spec);
      EXPECT(k.manifest.spec == spec.canonical() && !k.manifest.launches.empty());
    } catch (const Error &e) {
      std::fprintf(stderr, "%s\n", e.what());
      EXPECT(false);
    }
  }
  return summary();
}
