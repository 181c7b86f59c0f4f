//===- ManifestComposer.h - one manifest out of several stages' -*- C++ -*-===//
//
// A composed spec (the layer seam) runs other specs' launches in sequence.
// ManifestComposer merges each stage's manifest into the composed one: the
// stage's buffers are renamed onto the composed op's names, values passed
// from one stage to a later one become workspaces, and a buffer two stages
// declare is declared once. MLIR-free (no kernels here), so unit-tested on
// its own; builder/Composition.h runs the stages' builders.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_MANIFESTCOMPOSER_H
#define MHC_CODEGEN_BUILDER_MANIFESTCOMPOSER_H

#include "mhc/Support/Manifest.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mhc {

/// How one stage's buffer names become the composed op's.
struct StageBinding {
  /// Names launches and the stage's private workspaces; an identifier.
  std::string stage;
  /// stage buffer name -> composed name; names not listed stay as they are,
  /// except the stage's workspaces, which become "<stage>_<name>".
  std::vector<std::pair<std::string, std::string>> rename;
};

class ManifestComposer {
public:
  explicit ManifestComposer(Manifest &composed) : composed(composed) {}

  /// Declares a buffer of the composed op's contract (its operands and
  /// results, in order, before any stage).
  void declare(const BufferDesc &buffer);

  /// Adds `stage`'s buffers and launches (their parameters renamed, tensor
  /// maps included) to the composed manifest. Rules, each an error when
  /// broken (false, `error` names the stage and the buffer):
  ///  - every rename entry names a buffer the stage declares (a stage built
  ///    without a buffer the composition relies on, e.g. `acc`, is caught);
  ///  - a name declared before (contract or earlier stage) has the same
  ///    dtype and extent here, and keeps its first role;
  ///  - a stage input is a contract input or an earlier stage's output;
  ///  - a stage output is written once, and never onto a contract input;
  ///  - an output or workspace the contract does not name becomes a
  ///    Workspace (an intermediate for a later stage, or scratch);
  ///  - at most one split rule other than the default (all stages share S).
  bool addStage(const Manifest &stage, const StageBinding &binding,
                std::string &error);

  /// Checks that every contract output was written by some stage.
  bool finish(std::string &error) const;

  /// The composed name of stage buffer `name` (of role `role`).
  static std::string composedName(const StageBinding &binding,
                                  const std::string &name, BufferRole role);

private:
  Manifest &composed;
  std::set<std::string> contractInputs;
  std::vector<std::string> contractOutputs;
  /// Buffers a later stage may read: contract inputs and stage outputs.
  std::set<std::string> readable;
  std::set<std::string> written;
};

} // namespace mhc

#endif // MHC_CODEGEN_BUILDER_MANIFESTCOMPOSER_H
