//===- Manifest.cpp - JSON form of the launch manifest --------------------===//

#include "mhc/Support/Manifest.h"

#include "mhc/Support/Json.h"

#include <cstdlib>
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

const char *tensorMapBuffer(const std::string &param) {
  if (param.rfind("tmap", 0) != 0)
    return nullptr;
  size_t colon = param.find(':');
  if (colon == std::string::npos || colon > 7)
    return nullptr;
  for (size_t i = 4; i < colon; ++i)
    if (param[i] < '0' || param[i] > '9')
      return nullptr;
  return param.c_str() + colon + 1;
}

int tensorMapBoxRows(const std::string &param) {
  size_t colon = param.find(':');
  return colon == 4 ? 64 : std::atoi(param.substr(4, colon - 4).c_str());
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
        "i64 size, i64 stride=1), 16-byte aligned; M, S = i64; "
        "tmap[R]:<buffer> = CUtensorMap by value (128 bytes), boxes of R "
        "(default 64) rows\",\n";
  os << "  \"split\": {\"tokens_per_block\": " << split.tokensPerBlock
     << ", \"target_blocks\": " << split.targetBlocks
     << ", \"max\": " << split.maxSplit
     << ", \"wave_slots\": " << split.waveSlots << "},\n";
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
    os << "}, \"dynamic_shared_bytes\": " << l.dynamicSharedBytes
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

namespace {
bool parseDType(const std::string &s, DType &out) {
  for (DType d : {DType::BF16, DType::F16, DType::F32})
    if (s == toString(d)) {
      out = d;
      return true;
    }
  return false;
}
bool parseRole(const std::string &s, BufferRole &out) {
  for (BufferRole r : {BufferRole::Input, BufferRole::Output, BufferRole::Workspace})
    if (s == toString(r)) {
      out = r;
      return true;
    }
  return false;
}
int64_t integer(const json::Value *v, bool &ok) {
  if (!v || !v->isNumber()) {
    ok = false;
    return 0;
  }
  return static_cast<int64_t>(v->number);
}
std::string text(const json::Value *v, bool &ok) {
  if (!v || !v->isString()) {
    ok = false;
    return "";
  }
  return v->string;
}
} // namespace

bool Manifest::fromJson(const std::string &source, Manifest &out,
                        std::string &error) {
  json::Value root;
  if (!json::parse(source, root, error))
    return false;
  bool ok = true;
  out = Manifest();
  if (integer(root.get("format"), ok) != kFormat || !ok) {
    error = "unsupported manifest format";
    return false;
  }
  out.spec = text(root.get("spec"), ok);
  out.hash = text(root.get("hash"), ok);
  out.arch = text(root.get("arch"), ok);
  out.compiler = text(root.get("compiler"), ok);
  out.ptxas = text(root.get("ptxas"), ok);
  if (const json::Value *split = root.get("split")) {
    out.split.tokensPerBlock = integer(split->get("tokens_per_block"), ok);
    out.split.targetBlocks = integer(split->get("target_blocks"), ok);
    out.split.maxSplit = integer(split->get("max"), ok);
    if (const json::Value *slots = split->get("wave_slots"))
      out.split.waveSlots = integer(slots, ok);
  } else {
    ok = false;
  }
  const json::Value *buffers = root.get("buffers");
  const json::Value *launches = root.get("launches");
  if (!ok || !buffers || !buffers->isArray() || !launches || !launches->isArray()) {
    error = "manifest lacks a required field";
    return false;
  }
  for (const json::Value &b : buffers->array) {
    BufferDesc d;
    d.name = text(b.get("name"), ok);
    ok &= parseDType(text(b.get("dtype"), ok), d.dtype);
    ok &= parseRole(text(b.get("role"), ok), d.role);
    const json::Value *e = b.get("elems");
    d.elems.perToken = integer(e ? e->get("per_token") : nullptr, ok);
    d.elems.fixed = integer(e ? e->get("fixed") : nullptr, ok);
    d.elems.perTokenSplit = integer(e ? e->get("per_token_split") : nullptr, ok);
    out.buffers.push_back(d);
  }
  for (const json::Value &l : launches->array) {
    LaunchDesc d;
    d.entry = text(l.get("entry"), ok);
    const json::Value *params = l.get("params");
    if (!params || !params->isArray())
      ok = false;
    else
      for (const json::Value &p : params->array)
        d.params.push_back(text(&p, ok));
    const json::Value *block = l.get("block");
    d.block = block && block->isArray() && !block->array.empty()
                  ? static_cast<int>(integer(&block->array[0], ok))
                  : (ok = false, 0);
    const json::Value *grid = l.get("grid");
    d.grid.tokensPerBlock = integer(grid ? grid->get("tokens_per_block") : nullptr, ok);
    d.grid.fixedBlocks = integer(grid ? grid->get("fixed_blocks") : nullptr, ok);
    const json::Value *times = grid ? grid->get("times_split") : nullptr;
    d.grid.timesSplit = times && times->kind == json::Value::Bool && times->boolean;
    d.grid.itemsPerToken = integer(grid ? grid->get("items_per_token") : nullptr, ok);
    d.grid.itemsPerBlock = integer(grid ? grid->get("items_per_block") : nullptr, ok);
    if (d.grid.itemsPerToken > 0 && d.grid.itemsPerBlock <= 0)
      ok = false;
    if (const json::Value *min = grid ? grid->get("min_tokens") : nullptr)
      d.grid.minTokens = integer(min, ok);
    d.dynamicSharedBytes = integer(l.get("dynamic_shared_bytes"), ok);
    for (const std::string &p : d.params) {
      const char *tmap = tensorMapBuffer(p);
      if (p != "M" && p != "S" && !out.buffer(tmap ? tmap : p))
        ok = false;
      if (tmap && (tensorMapBoxRows(p) < 1 || tensorMapBoxRows(p) > 256))
        ok = false; // TMA boxes span 1 to 256 rows
    }
    out.launches.push_back(d);
  }
  if (!ok) {
    error = "manifest has a malformed field";
    return false;
  }
  std::string specError;
  if (!KernelSpec::parse(out.spec, &specError)) {
    error = "manifest spec is invalid: " + specError;
    return false;
  }
  return true;
}

} // namespace mhc
