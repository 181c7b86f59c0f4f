//===- Manifest.cpp - the launch manifest and its JSON text ---------------===//
//
// Names, buffer lookup, the kernel ABI's parameter count, and toJson. Reading
// the JSON back, every field against its bound: ManifestRead.cpp.
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/Manifest.h"

#include "mhc/Support/Json.h"

#include <cstdlib>
#include <sstream>
#include <vector>

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

const char *tensorMapBuffer(const std::string &param) {
  if (param.rfind("tmap", 0) != 0)
    return nullptr;
  size_t colon = param.find(':');
  if (colon == std::string::npos || colon > 24)
    return nullptr;
  for (size_t i = 4; i < colon; ++i)
    if ((param[i] < '0' || param[i] > '9') && param[i] != ',')
      return nullptr;
  return param.c_str() + colon + 1;
}

bool parseTensorMapShape(const std::string &param, TensorMapShape &shape) {
  if (!tensorMapBuffer(param))
    return false;
  std::string numbers = param.substr(4, param.find(':') - 4);
  if (numbers.empty())
    return true;
  std::vector<int> values;
  std::istringstream fields(numbers);
  for (std::string field; std::getline(fields, field, ',');) {
    if (field.empty() || field.size() > 4)
      return false;
    values.push_back(std::atoi(field.c_str()));
  }
  size_t count = values.size();
  if (numbers.back() == ',' || (count != 1 && count != 3 && count != 4 && count != 5) ||
      (count == 5 && values[4] < 1)) // (the shape stays unchanged)
    return false;
  shape.rows = values[0];
  if (count >= 3)
    shape.every = values[1], shape.first = values[2];
  if (count >= 4)
    shape.width = values[3], shape.swizzled = false;
  if (count == 5)
    shape.granule = values[4];
  return true;
}

int ptxParamWidth(const std::string &param) {
  return (param == "M" || param == "S" || tensorMapBuffer(param)) ? 1 : 5;
}

int Manifest::ptxParamCount(const LaunchDesc &launch) {
  int count = 0;
  for (const std::string &p : launch.params)
    count += ptxParamWidth(p);
  return count;
}

using json::quote;

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
        "i64 size, i64 stride=1), 16-byte aligned; M, S = i64; "
        "tmap[R]:<buffer> = CUtensorMap by value (128 bytes), boxes of R "
        "(default 64) rows\",\n";
  os << "  \"split\": {\"tokens_per_block\": " << split.tokensPerBlock
     << ", \"target_blocks\": " << split.targetBlocks
     << ", \"max\": " << split.maxSplit
     << ", \"wave_slots\": " << split.waveSlots
     << ", \"single_block\": " << split.singleBlock << "},\n";
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
       << ", \"items_per_token\": " << l.grid.itemsPerToken
       << ", \"items_per_block\": " << l.grid.itemsPerBlock;
    if (l.grid.minTokens > 0) // (omitted when 0: most launches)
      os << ", \"min_tokens\": " << l.grid.minTokens;
    if (l.grid.maxTokens > 0) // (omitted when 0: no limit)
      os << ", \"max_tokens\": " << l.grid.maxTokens;
    os << "}, \"dynamic_shared_bytes\": " << l.dynamicSharedBytes;
    if (l.cooperative) // (omitted when false: most launches)
      os << ", \"cooperative\": true";
    if (l.programmatic) // (omitted when false)
      os << ", \"pdl\": true";
    os
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
