//===- OpContractTest.cpp - N of n, the pre-step fusion rule, arg rules ---===//
//
// The facts mhc/Support/OpContract.h gives every layer: N = 2n + n^2 and its
// inverse, when a layer's pre step runs fused (the same cases as
// test/Passes/fuse-pre.mlir), and the torch ops' tensor argument rules.
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/KernelLimits.h"
#include "mhc/Support/OpContract.h"

#include "Expect.h"

using namespace mhc;

static void logitsOfStreams() {
  for (int64_t n = 1; n <= kMaxStreams; ++n) {
    EXPECT(numLogits(n) == 2 * n + n * n);
    EXPECT(streamsOfLogits(2 * n + n * n) == n);
    EXPECT(streamsOfLogits(2 * n + n * n + 1) == 0);
  }
  EXPECT(streamsOfLogits(0) == 0);
  EXPECT(streamsOfLogits(2) == 0);
  EXPECT(streamsOfLogits(-3) == 0);
}

static void preStepFusion() {
  EXPECT(preStepFuses(4, 65536));  // n <= 4: any M
  EXPECT(preStepFuses(4, -1));     // ... known or not
  EXPECT(preStepFuses(1, int64_t(1) << 40));
  EXPECT(preStepFuses(6, 512));    // n > 4: a static M up to 512
  EXPECT(preStepFuses(6, 0));
  EXPECT(!preStepFuses(6, 513));
  EXPECT(!preStepFuses(6, -1));    // dynamic M: not fused
  EXPECT(preStepFuses(5, 512) && !preStepFuses(5, 513));
  EXPECT(!preStepFuses(8, 32768));
}

static void argumentRules() {
  const std::vector<ArgRule> *project = argRules("project");
  EXPECT(project && project->size() == 3);
  const ArgRule *phi = argRule("project", "phi");
  EXPECT(phi && phi->dims == std::vector<Sym>({Sym::N, Sym::K}) &&
         phi->elem == ElemClass::Param);
  const ArgRule *x = argRule("pre", "x");
  EXPECT(x && x->streams && x->elem == ElemClass::Activation);
  const ArgRule *weight = argRule("pre", "weight");
  EXPECT(weight && weight->optional && weight->sameTypeAs == "phi");
  // A gradient op checks its forward op's arguments first, then its own.
  const std::vector<ArgRule> *backward = argRules("scale_backward");
  EXPECT(backward && backward->size() == 7 && (*backward)[0].name == "h" &&
         (*backward)[4].name == "gpre");
  EXPECT(!argRules("nope") && !argRule("project", "nope"));
  // acc, x's gradient from its other users, ends the three backward ops
  // that produce gx: x-shaped, x's dtype, optional.
  for (const char *op : {"aggregate_backward", "project_backward", "expand_combine_backward"}) {
    const std::vector<ArgRule> *rules = argRules(op);
    const ArgRule &acc = rules->back();
    EXPECT(acc.name == "acc" && acc.streams && acc.optional && acc.sameTypeAs == "x" &&
           acc.elem == ElemClass::Activation);
  }
  EXPECT(!argRule("scale_backward", "acc") && !argRule("aggregate", "acc"));
}

int main() {
  logitsOfStreams();
  preStepFusion();
  argumentRules();
  return summary();
}
