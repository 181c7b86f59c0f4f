//===- ManifestComposerTest.cpp - one manifest out of stages' -------------===//
//
// The composition of a spec out of other specs' launches (the layer seam):
// stage buffers renamed onto the contract, intermediates as workspaces, a
// buffer two stages declare declared once, stage workspaces private, launch
// parameters (tensor maps too) renamed, and each broken rule an error.
//
//===----------------------------------------------------------------------===//

#include "builder/ManifestComposer.h"

#include "Expect.h"

using namespace mhc;

static BufferDesc buf(const char *name, BufferRole role, int64_t perToken,
                      DType dtype = DType::F32) {
  return {name, dtype, role, {perToken, 0, 0}};
}

/// A stage that reads `in` and writes `out` in one launch "main", with a
/// private workspace "scratch".
static Manifest stage(const char *in, const char *out) {
  Manifest m;
  m.buffers = {buf(in, BufferRole::Input, 4), buf(out, BufferRole::Output, 4),
               buf("scratch", BufferRole::Workspace, 1)};
  m.launches.push_back({});
  m.launches[0].entry = "k_main";
  m.launches[0].params = {in, "scratch", out, "M"};
  return m;
}

static const BufferDesc *find(const Manifest &m, const char *name) {
  return m.buffer(name);
}

/// a -> (stage one) -> t -> (stage two) -> b: t becomes a workspace, each
/// stage's scratch its own.
static void chain() {
  Manifest m;
  ManifestComposer c(m);
  c.declare(buf("a", BufferRole::Input, 4));
  c.declare(buf("b", BufferRole::Output, 4));
  std::string error;
  EXPECT(c.addStage(stage("x", "y"), {"one", {{"x", "a"}, {"y", "t"}}}, error));
  EXPECT(c.addStage(stage("x", "y"), {"two", {{"x", "t"}, {"y", "b"}}}, error));
  EXPECT(c.finish(error));
  EXPECT(m.buffers.size() == 5); // a, b, t and the two scratches
  EXPECT(m.buffers[0].name == "a" && m.buffers[1].name == "b"); // contract first
  EXPECT(find(m, "t") && find(m, "t")->role == BufferRole::Workspace);
  EXPECT(find(m, "one_scratch") && find(m, "two_scratch"));
  EXPECT(find(m, "one_scratch")->role == BufferRole::Workspace);
  EXPECT(find(m, "b")->role == BufferRole::Output);
  EXPECT(m.launches.size() == 2);
  EXPECT((m.launches[0].params ==
          std::vector<std::string>{"a", "one_scratch", "t", "M"}));
  EXPECT((m.launches[1].params ==
          std::vector<std::string>{"t", "two_scratch", "b", "M"}));
}

/// Two stages reading one contract input declare it once; a tensor map's
/// buffer is renamed too.
static void sharedInputAndTensorMap() {
  Manifest m;
  ManifestComposer c(m);
  c.declare(buf("x_next", BufferRole::Input, 4));
  c.declare(buf("y1", BufferRole::Output, 4));
  c.declare(buf("y2", BufferRole::Output, 4));
  Manifest s = stage("x", "y");
  s.launches[0].params.push_back("tmap128:x");
  std::string error;
  EXPECT(c.addStage(s, {"one", {{"x", "x_next"}, {"y", "y1"}}}, error));
  EXPECT(c.addStage(s, {"two", {{"x", "x_next"}, {"y", "y2"}}}, error));
  EXPECT(c.finish(error));
  int seen = 0;
  for (const BufferDesc &b : m.buffers)
    seen += b.name == "x_next";
  EXPECT(seen == 1);
  EXPECT(m.launches[1].params.back() == "tmap128:x_next");
}

/// A later stage may read an earlier stage's workspace by its composed name
/// (the fused seam's tail reads the expand stage's partials).
static void workspaceHandOver() {
  Manifest m;
  ManifestComposer c(m);
  c.declare(buf("a", BufferRole::Input, 4));
  c.declare(buf("b", BufferRole::Output, 4));
  std::string error;
  EXPECT(c.addStage(stage("x", "y"), {"one", {{"x", "a"}, {"y", "b"}}}, error));
  Manifest reader;
  reader.buffers = {buf("scratch", BufferRole::Input, 1), buf("z", BufferRole::Output, 4)};
  reader.launches.push_back({});
  reader.launches[0].params = {"scratch", "z"};
  EXPECT(c.addStage(reader, {"two", {{"scratch", "one_scratch"}}}, error));
  EXPECT(m.launches[1].params[0] == "one_scratch");
  EXPECT(find(m, "z") && find(m, "z")->role == BufferRole::Workspace);
  EXPECT(c.finish(error));
}

/// Each broken rule is refused, naming the stage.
static void refusals() {
  std::string error;
  {
    Manifest m; // a rename entry the stage does not declare (no `acc`)
    ManifestComposer c(m);
    c.declare(buf("a", BufferRole::Input, 4));
    EXPECT(!c.addStage(stage("x", "y"), {"agg", {{"x", "a"}, {"acc", "a"}}}, error));
    EXPECT(error.find("stage 'agg'") == 0 && error.find("'acc'") != std::string::npos);
  }
  {
    Manifest m; // an input nobody provides
    ManifestComposer c(m);
    EXPECT(!c.addStage(stage("x", "y"), {"one", {}}, error));
    EXPECT(error.find("reads 'x'") != std::string::npos);
  }
  {
    Manifest m; // writing a contract input
    ManifestComposer c(m);
    c.declare(buf("a", BufferRole::Input, 4));
    c.declare(buf("b", BufferRole::Input, 4));
    EXPECT(!c.addStage(stage("x", "y"), {"one", {{"x", "a"}, {"y", "b"}}}, error));
  }
  {
    Manifest m; // writing a buffer twice
    ManifestComposer c(m);
    c.declare(buf("a", BufferRole::Input, 4));
    EXPECT(c.addStage(stage("x", "y"), {"one", {{"x", "a"}, {"y", "t"}}}, error));
    EXPECT(!c.addStage(stage("x", "y"), {"two", {{"x", "a"}, {"y", "t"}}}, error));
  }
  {
    Manifest m; // another extent for a declared name
    ManifestComposer c(m);
    c.declare(buf("a", BufferRole::Input, 8));
    EXPECT(!c.addStage(stage("x", "y"), {"one", {{"x", "a"}}}, error));
    EXPECT(error.find("extent") != std::string::npos);
  }
  {
    Manifest m; // a contract output no stage writes
    ManifestComposer c(m);
    c.declare(buf("a", BufferRole::Input, 4));
    c.declare(buf("b", BufferRole::Output, 4));
    EXPECT(c.addStage(stage("x", "y"), {"one", {{"x", "a"}}}, error));
    EXPECT(!c.finish(error));
    EXPECT(error.find("'b'") != std::string::npos);
  }
}

/// All stages share S: one split rule other than the default is taken,
/// a second, different one refused.
static void splitRules() {
  Manifest m;
  ManifestComposer c(m);
  c.declare(buf("a", BufferRole::Input, 4));
  Manifest split = stage("x", "y");
  split.split = {128, 264, 64, 264};
  std::string error;
  EXPECT(c.addStage(stage("x", "y"), {"one", {{"x", "a"}}}, error));
  EXPECT(c.addStage(split, {"two", {{"x", "a"}, {"y", "y2"}}}, error));
  EXPECT(m.split.maxSplit == 64 && m.split.waveSlots == 264);
  split.split.maxSplit = 32;
  EXPECT(!c.addStage(split, {"three", {{"x", "a"}, {"y", "y3"}}}, error));
}

int main() {
  chain();
  sharedInputAndTensorMap();
  workspaceHandOver();
  refusals();
  splitRules();
  return summary();
}
