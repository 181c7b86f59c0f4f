//===- ManifestComposer.cpp - one manifest out of several stages' ---------===//

#include "builder/ManifestComposer.h"

#include <algorithm>

using namespace mhc;

static bool sameExtent(const Extent &a, const Extent &b) {
  return a.perToken == b.perToken && a.fixed == b.fixed &&
         a.perTokenSplit == b.perTokenSplit;
}

static bool sameSplit(const SplitRule &a, const SplitRule &b) {
  return a.tokensPerBlock == b.tokensPerBlock &&
         a.targetBlocks == b.targetBlocks && a.maxSplit == b.maxSplit &&
         a.singleBlock == b.singleBlock &&
         a.waveSlots == b.waveSlots;
}

void ManifestComposer::declare(const BufferDesc &buffer) {
  composed.buffers.push_back(buffer);
  if (buffer.role == BufferRole::Input) {
    contractInputs.insert(buffer.name);
    readable.insert(buffer.name);
  } else {
    contractOutputs.push_back(buffer.name);
  }
}

std::string ManifestComposer::composedName(const StageBinding &binding,
                                           const std::string &name,
                                           BufferRole role) {
  for (const auto &[from, to] : binding.rename)
    if (from == name)
      return to;
  return role == BufferRole::Workspace ? binding.stage + "_" + name : name;
}

/// Checks `buffer` (already renamed) against a declaration of the same name
/// and the stage's reads and writes; declares it when new.
static bool mergeBuffer(Manifest &composed, const BufferDesc &buffer,
                        const std::set<std::string> &contractInputs,
                        std::set<std::string> &readable,
                        std::set<std::string> &written, std::string &error) {
  const std::string &name = buffer.name;
  const BufferDesc *known = composed.buffer(name);
  if (known && (known->dtype != buffer.dtype ||
                !sameExtent(known->elems, buffer.elems))) {
    error = "'" + name + "' is declared before with another dtype or extent";
    return false;
  }
  if (buffer.role == BufferRole::Input) {
    if (!readable.count(name)) {
      error = "reads '" + name +
              "', which is neither a contract input nor an earlier stage's output";
      return false;
    }
    return true;
  }
  if (contractInputs.count(name) || written.count(name)) {
    error = "writes '" + name + "', which is " +
            (written.count(name) ? "written by an earlier stage"
                                 : "a contract input");
    return false;
  }
  written.insert(name);
  readable.insert(name); // (a private workspace's name is its stage's own)
  if (!known)
    composed.buffers.push_back({name, buffer.dtype, BufferRole::Workspace,
                                buffer.elems});
  return true;
}

bool ManifestComposer::addStage(const Manifest &stage,
                                const StageBinding &binding,
                                std::string &error) {
  auto fail = [&](const std::string &what) {
    error = "stage '" + binding.stage + "': " + what;
    return false;
  };
  for (const auto &entry : binding.rename)
    if (!stage.buffer(entry.first))
      return fail("declares no buffer '" + entry.first + "' to rename to '" +
                  entry.second + "'");
  SplitRule none;
  if (!sameSplit(stage.split, none)) {
    if (!sameSplit(composed.split, none) && !sameSplit(composed.split, stage.split))
      return fail("has a split rule other than an earlier stage's");
    composed.split = stage.split;
  }
  // Inputs first: a stage reads what was there before it ran.
  std::vector<BufferDesc> ordered(stage.buffers);
  std::stable_partition(ordered.begin(), ordered.end(), [](const BufferDesc &b) {
    return b.role == BufferRole::Input;
  });
  for (BufferDesc b : ordered) {
    b.name = composedName(binding, b.name, b.role);
    std::string why;
    if (!mergeBuffer(composed, b, contractInputs, readable, written, why))
      return fail(why);
  }
  for (LaunchDesc launch : stage.launches) {
    for (std::string &p : launch.params) {
      if (p == "M" || p == "S" || p == kSyncParam)
        continue;
      const char *mapped = tensorMapBuffer(p);
      std::string name = mapped ? mapped : p;
      std::string prefix = p.substr(0, p.size() - name.size());
      p = prefix + composedName(binding, name, stage.buffer(name)->role);
    }
    composed.launches.push_back(std::move(launch));
  }
  return true;
}

bool ManifestComposer::finish(std::string &error) const {
  for (const std::string &name : contractOutputs)
    if (!written.count(name)) {
      error = "no stage writes the contract output '" + name + "'";
      return false;
    }
  return true;
}
