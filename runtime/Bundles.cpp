//===- Bundles.cpp - reading kernel bundles -------------------------------===//

#include "mhc/Runtime/Bundles.h"

#include "mhc/Runtime/CudaDriver.h"
#include "mhc/Runtime/Posix.h"

#include <cstdio>

namespace mhc::rt {

bool readBundleIndex(const std::string &dir, BundleIndex &index,
                     std::string &why) {
  std::string text;
  if (!posix::readFile(dir + "/index.json", text)) {
    why = "no index.json";
    return false;
  }
  std::string error;
  if (!BundleIndex::fromJson(text, index, error)) {
    why = "invalid index.json: " + error;
    return false;
  }
  return true;
}

bool readBundleKernel(const std::string &dir, const BundleKernel &entry,
                      const KernelSpec &spec, CompiledKernel &out,
                      std::string &why) {
  std::string base = dir + "/" + entry.kernel, json;
  if (entry.spec != spec.canonical()) {
    why = "the index lists it for another spec";
    return false;
  }
  if (entry.cubin.empty()) {
    why = "no cubin (a PTX-only bundle)";
    return false;
  }
  if (!posix::readFile(base + ".json", json) ||
      !posix::readFile(base + ".cubin", out.cubin)) {
    why = "missing kernel files";
    return false;
  }
  if (fileDigest(out.cubin) != entry.cubin ||
      fileDigest(json) != entry.json) {
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
  out.compiler = entry.compiler;
  return true;
}

bool describeBundleKernel(const std::string &dir, const std::string &name,
                          const std::string &spec, const std::string &compiler,
                          BundleKernel &out, std::string &why) {
  std::string cubin, json;
  if (!posix::readFile(dir + "/" + name + ".cubin", cubin) ||
      !posix::readFile(dir + "/" + name + ".json", json)) {
    why = "the compiler wrote no kernel";
    return false;
  }
  out = {name, spec, compiler, fileDigest(cubin), fileDigest(json)};
  return true;
}

size_t BundleSet::add(const std::string &dir) {
  BundleIndex index;
  std::string why;
  if (!readBundleIndex(dir, index, why))
    throw Error("mhc: cannot use the kernel bundle " + dir + ": " + why);
  for (const BundleKernel &k : index.kernels)
    bySpec.emplace(k.spec, Entry{dir, k});
  dirs.push_back(dir);
  return index.kernels.size();
}

bool BundleSet::find(const KernelSpec &spec, CompiledKernel &out) {
  auto [first, last] = bySpec.equal_range(spec.canonical());
  for (auto it = first; it != last; ++it) {
    const Entry &e = it->second;
    std::string why;
    if (readBundleKernel(e.dir, e.kernel, spec, out, why)) {
      out.source = CompiledKernel::Bundle;
      return true;
    }
    if (reported.insert(e.dir + "/" + e.kernel.kernel).second)
      std::fprintf(stderr,
                   "mhc: warning: skipping kernel %s of the bundle %s for "
                   "[%s]: %s\n",
                   e.kernel.kernel.c_str(), e.dir.c_str(),
                   spec.canonical().c_str(), why.c_str());
  }
  return false;
}

} // namespace mhc::rt
