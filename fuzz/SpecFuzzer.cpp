//===- SpecFuzzer.cpp - libFuzzer target: kernel spec strings -------------===//
//
// One input is a candidate canonical kernel spec string (the runtime's cache
// key, mhc-compile's --spec, the #mhc.spec attribute). Parsing either fails
// with a message or accepts exactly the canonical string, which must then
// parse again to the same spec; unsupportedReason must decide every spec that
// parses, and the kernel name of a spec codegen builds is a C identifier.
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/KernelSpec.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {
[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "mhc-fuzz-spec: %s\n%s\n", what, detail.c_str());
  std::abort();
}

bool isIdentifier(const std::string &name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0])))
    return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      return false;
  return true;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::string error;
  std::optional<mhc::KernelSpec> spec = mhc::KernelSpec::parse(text, &error);
  if (!spec) {
    if (error.empty())
      fail("parse failed without a message", text);
    return 0;
  }
  std::string canonical = spec->canonical();
  if (canonical != text)
    fail("parse accepted a string that is not canonical", text);
  std::optional<mhc::KernelSpec> again = mhc::KernelSpec::parse(canonical);
  if (!again || *again != *spec ||
      again->structuralHash() != spec->structuralHash())
    fail("the canonical string does not parse to the same spec", canonical);
  (void)spec->hash();
  // Codegen names the kernels of the specs it builds with kernelName().
  if (mhc::unsupportedReason(*spec).empty() && !isIdentifier(spec->kernelName()))
    fail("the kernel name is not a C identifier", spec->kernelName());
  return 0;
}
