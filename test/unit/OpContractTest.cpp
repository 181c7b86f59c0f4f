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

// The layer seam's rules in docs/design/seam.md's contract order: f first
// (M and C come from it; x and x_next take its dtype), the next layer's
// parameters last.
static void seamRules() {
  const std::vector<ArgRule> *fwd = argRules("post_pre");
  const std::vector<ArgRule> *saved = argRules("post_pre_saved");
  const std::vector<ArgRule> *bwd = argRules("post_pre_backward");
  EXPECT(fwd && saved && bwd && fwd->size() == 9 && saved->size() == 9 &&
         bwd->size() == 18);
  const char *fwdNames[] = {"f", "post", "x", "P", "bias",
                            "phi", "alpha", "beta", "weight"};
  for (size_t i = 0; fwd && i < fwd->size(); ++i)
    EXPECT((*fwd)[i].name == fwdNames[i] && (*saved)[i].name == fwdNames[i]);
  const ArgRule *x = argRule("post_pre", "x");
  EXPECT(x && x->streams && x->sameTypeAs == "f");
  const ArgRule *bias = argRule("post_pre", "bias");
  EXPECT(bias && bias->optional && bias->elem == ElemClass::Param);
  EXPECT(bwd && (*bwd)[0].name == "gx_next" && (*bwd)[0].streams &&
         (*bwd)[9].name == "x_next" && (*bwd)[13].name == "logits" &&
         (*bwd)[17].name == "weight" && (*bwd)[17].optional);
}

int main() {
  logitsOfStreams();
  preStepFusion();
  argumentRules();
  seamRules();
  return summary();
}
