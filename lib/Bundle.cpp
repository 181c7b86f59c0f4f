//===- Bundle.cpp - the kernel bundle's index ------------------------------===//

#include "mhc/Support/Bundle.h"

#include "mhc/Support/Json.h"

#include <cstdint>
#include <cstdio>

namespace mhc {

std::string fileDigest(const std::string &data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return std::string(buf) + " " + std::to_string(data.size());
}

const BundleKernel *BundleIndex::find(const std::string &kernel) const {
  for (const BundleKernel &k : kernels)
    if (k.kernel == kernel)
      return &k;
  return nullptr;
}

void BundleIndex::put(const BundleKernel &k) {
  for (BundleKernel &old : kernels)
    if (old.kernel == k.kernel) {
      old = k;
      return;
    }
  kernels.push_back(k);
}

std::string BundleIndex::toJson() const {
  // Plain string appends: the torch extension writes this too, and numeric
  // stream insertion there crashed in a libstdc++ other than its headers'.
  using json::quote;
  std::string out = "{\n  \"format\": " + std::to_string(kFormat) +
                    ",\n  \"kernels\": [";
  for (size_t i = 0; i < kernels.size(); ++i) {
    const BundleKernel &k = kernels[i];
    out += (i ? ",\n" : "\n");
    out += "    {\"kernel\": " + quote(k.kernel) + ", \"spec\": " +
           quote(k.spec) + ", \"compiler\": " + quote(k.compiler) +
           ", \"cubin\": " + quote(k.cubin) + ", \"json\": " +
           quote(k.json) + "}";
  }
  out += kernels.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

bool BundleIndex::fromJson(const std::string &text, BundleIndex &out,
                           std::string &error) {
  json::Value root;
  if (!json::parse(text, root, error))
    return false;
  const json::Value *format = root.get("format");
  if (!format || !format->isNumber() || format->number != kFormat) {
    error = "field 'format' must be " + std::to_string(kFormat) +
            " (an index without checksums: rebuild the bundle)";
    return false;
  }
  const json::Value *list = root.get("kernels");
  if (!list || !list->isArray()) {
    error = "field 'kernels' must be an array";
    return false;
  }
  out.kernels.clear();
  for (size_t i = 0; i < list->array.size(); ++i) {
    const json::Value &entry = list->array[i];
    BundleKernel k;
    std::pair<const char *, std::string *> fields[] = {
        {"kernel", &k.kernel}, {"spec", &k.spec}, {"compiler", &k.compiler},
        {"cubin", &k.cubin},   {"json", &k.json}};
    for (auto [name, slot] : fields) {
      const json::Value *v = entry.get(name);
      if (!v || !v->isString()) {
        error = "field 'kernels[" + std::to_string(i) + "]." + name +
                "' must be a string";
        return false;
      }
      *slot = v->string;
    }
    out.kernels.push_back(std::move(k));
  }
  return true;
}

} // namespace mhc
