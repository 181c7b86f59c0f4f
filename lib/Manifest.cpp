//===- Manifest.cpp - JSON form of the launch manifest --------------------===//

#include "mhc/Support/Manifest.h"

#include <sstream>

namespace mhc {

const char *toString(BufferRole r) {
  switch (r) {
  case BufferRole::Input: return "input";
  case BufferRole::Output: return "output";
  case BufferRole::Workspace: return "workspace";
  }
  return "?";
}

const BufferDesc *Manifest::buffer(const std::string &name) const {
  for (const BufferDesc &b : buffers)
    if (b.name == name)
      return &b;
  return nullptr;
}

int Manifest::ptxParamCount(const LaunchDesc &launch) {
  int count = 0;
  for (const std::string &p : launch.params)
    count += (p == "M" || p == "S") ? 1 : 5;
  return count;
}

static std::string quote(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string Manifest::toJson() const {
  std::ostringstream os;
  os << "{\n";
  os << "  \"format\": " << kFormat << ",\n";
  os << "  \"spec\": " << quote(spec) << ",\n";
  os << "  \"hash\": " << quote(hash) << ",\n";
  os << "  \"arch\": " << quote(arch) << ",\n";
  os << "  \"compiler\": " << quote(compiler) << ",\n";
  os << "  \"ptxas\": " << quote(ptxas) << ",\n";
  os << "  \"abi\": \"buffer = 1-D memref descriptor (ptr, ptr, i64 offset=0, "
        "i64 size, i64 stride=1), 16-byte aligned; M, S = i64\",\n";
  os << "  \"split\": {\"tokens_per_block\": " << split.tokensPerBlock
     << ", \"target_blocks\": " << split.targetBlocks
     << ", \"max\": " << split.maxSplit << "},\n";
  os << "  \"buffers\": [\n";
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferDesc &b = buffers[i];
    os << "    {\"name\": " << quote(b.name) << ", \"dtype\": \""
       << toString(b.dtype) << "\", \"role\": \"" << toString(b.role)
       << "\", \"elems\": {\"per_token\": " << b.elems.perToken
       << ", \"fixed\": " << b.elems.fixed
       << ", \"per_token_split\": " << b.elems.perTokenSplit << "}}"
       << (i + 1 < buffers.size() ? "," : "") << "\n";
  }
  os << "  ],\n";
  os << "  \"launches\": [\n";
  for (size_t i = 0; i < launches.size(); ++i) {
    const LaunchDesc &l = launches[i];
    os << "    {\"entry\": " << quote(l.entry) << ", \"params\": [";
    for (size_t j = 0; j < l.params.size(); ++j)
      os << (j ? ", " : "") << quote(l.params[j]);
    os << "], \"ptx_params\": " << ptxParamCount(l) << ", \"block\": ["
       << l.block << ", 1, 1], \"grid\": {\"tokens_per_block\": "
       << l.grid.tokensPerBlock << ", \"fixed_blocks\": " << l.grid.fixedBlocks
       << ", \"times_split\": " << (l.grid.timesSplit ? "true" : "false")
       << "}, \"dynamic_shared_bytes\": " << l.dynamicSharedBytes
       << ", \"resources\": {\"registers\": " << l.resources.registers
       << ", \"spill_stores\": " << l.resources.spillStores
       << ", \"spill_loads\": " << l.resources.spillLoads
       << ", \"stack_bytes\": " << l.resources.stackBytes
       << ", \"shared_bytes\": " << l.resources.sharedBytes << "}}"
       << (i + 1 < launches.size() ? "," : "") << "\n";
  }
  os << "  ]\n}\n";
  return os.str();
}

} // namespace mhc
