//===- KernelSpecTest.cpp - canonical strings, parsing, hashing -----------===//
//
// The kernel spec is the cache key of the runtime: its canonical string must
// round-trip, reject every non-canonical spelling, and hash identically in
// every process and build.
//
//===----------------------------------------------------------------------===//

#include "mhc/Support/KernelSpec.h"
#include "mhc/Support/KernelLimits.h"

#include "Expect.h"

#include <cstdio>
#include <string>


using namespace mhc;

static void roundTripsEveryOp() {
  for (OpKind op : {OpKind::Project, OpKind::Scale, OpKind::Sinkhorn,
                    OpKind::Aggregate, OpKind::ExpandCombine, OpKind::Pre,
                    OpKind::PostPre})
    for (Direction dir : {Direction::Forward, Direction::Backward})
      for (SinkhornMode mode : {SinkhornMode::Log, SinkhornMode::SoftmaxEps}) {
        KernelSpec s;
        s.op = op;
        s.dir = dir;
        s.n = 6;
        s.act = DType::F16;
        s.param = DType::BF16;
        s.layout = Layout::CN;
        s.channels = 1000;
        s.arch = "sm_100a";
        s.tf32 = true;
        s.hasWeight = true;
        s.hasBias = true;
        s.normEps = 1.1920929e-07f;
        s.preEps = 0.0f;
        s.postMult = 1.5f;
        s.mode = mode;
        s.iters = 7;
        s.eps = 3e-5f;
        s.acc = s.acceptsAcc();
        std::string error;
        auto parsed = KernelSpec::parse(s.canonical(), &error);
        EXPECT(parsed.has_value());
        if (!parsed)
          std::fprintf(stderr, "  %s: %s\n", s.canonical().c_str(),
                       error.c_str());
        else
          EXPECT(parsed->canonical() == s.canonical());
      }
}

static void leavesOutUnusedFields() {
  KernelSpec a, b;
  a.op = b.op = OpKind::Sinkhorn;
  a.channels = 64;
  b.channels = 128;
  a.act = DType::F32;
  EXPECT(a.canonical() == b.canonical());
  EXPECT(a.hash() == b.hash());
  EXPECT(a.canonical() == "sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_90a");
  b.mode = SinkhornMode::SoftmaxEps;
  EXPECT(b.canonical() ==
         "sinkhorn.fwd;n=4;mode=softmax_eps;iters=20;eps=9.99999997e-07;arch=sm_90a");
}

static void floatsRoundTripExactly() {
  KernelSpec s;
  s.op = OpKind::Scale;
  for (float v : {1.1920929e-07f, 1e-6f, 0.1f, 3.0f, 1e-30f}) {
    s.normEps = v;
    auto parsed = KernelSpec::parse(s.canonical());
    EXPECT(parsed && parsed->normEps == v);
  }
}

static void hashIsStable() {
  // FNV-1a 64 of the canonical string: fixed forever, since it names files
  // in every user's cache.
  KernelSpec s;
  s.op = OpKind::Aggregate;
  s.channels = 2048;
  EXPECT(s.canonical() == "aggregate.fwd;n=4;act=bf16;layout=nc;C=2048;arch=sm_90a");
  EXPECT(s.hash() == 0x123f3d65709c76afull);
  EXPECT(s.kernelName() == "mhc_aggregate_fwd_n4_123f3d65709c76af");
}

static void rejectsNonCanonical() {
  std::string error;
  EXPECT(!KernelSpec::parse("", &error));
  EXPECT(!KernelSpec::parse("aggregate", &error));
  EXPECT(!KernelSpec::parse("aggregate.sideways;n=4", &error));
  EXPECT(!KernelSpec::parse("sinkhorn.fwd;n=4;n=4;mode=log;iters=20;arch=sm_90a", &error));
  EXPECT(error.find("duplicate key 'n'") != std::string::npos);
  EXPECT(!KernelSpec::parse("sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_90a;color=red", &error));
  EXPECT(error.find("unknown key 'color'") != std::string::npos);
  EXPECT(!KernelSpec::parse("sinkhorn.fwd;n=four;mode=log;iters=20;arch=sm_90a", &error));
  // Reordered keys and fields the op does not use are not canonical.
  EXPECT(!KernelSpec::parse("sinkhorn.fwd;mode=log;n=4;iters=20;arch=sm_90a", &error));
  EXPECT(error.find("not in canonical form") != std::string::npos);
  EXPECT(!KernelSpec::parse("sinkhorn.fwd;n=4;C=64;mode=log;iters=20;arch=sm_90a", &error));
}

static void supportRules() {
  KernelSpec s;
  s.channels = 64;
  EXPECT(unsupportedReason(s).empty());
  s.n = 9;
  EXPECT(unsupportedReason(s) == "n = 9 is outside the specialised range 1..8");
  s.n = 1;
  EXPECT(unsupportedReason(s).empty());
  s.channels = 0;
  EXPECT(unsupportedReason(s) == "the channel count C is not static");
  s.op = OpKind::Scale; // does not depend on C
  EXPECT(unsupportedReason(s).empty());
  s.arch = "sm_75";
  EXPECT(unsupportedReason(s).find("not a codegen target") != std::string::npos);

  KernelSpec p; // any K = n*C: the projection masks its tail (issue 35)
  p.op = OpKind::Project;
  p.n = 3;
  p.channels = 1001;
  EXPECT(unsupportedReason(p).empty());
  p.channels = 1000;
  EXPECT(unsupportedReason(p).empty());

  KernelSpec k; // sinkhorn backward history: 2*n*T floats, <= 384
  k.op = OpKind::Sinkhorn;
  k.dir = Direction::Backward;
  k.n = 8;
  k.iters = 24;
  EXPECT(unsupportedReason(k).empty());
  k.iters = 25;
  EXPECT(unsupportedReason(k).find("history") != std::string::npos);
  EXPECT(sinkhornHistoryFloats(k) == 2 * 8 * 25);
  // softmax_eps keeps the sums of one column step, then T - 1 row and
  // column steps: (2T - 1) n floats.
  k.mode = SinkhornMode::SoftmaxEps;
  EXPECT(sinkhornHistoryFloats(k) == 49 * 8);
  EXPECT(unsupportedReason(k).find("392 floats") != std::string::npos);
  k.iters = 24;
  EXPECT(sinkhornHistoryFloats(k) == 47 * 8);
  EXPECT(unsupportedReason(k).empty());
  k.dir = Direction::Forward; // the forward keeps no history
  EXPECT(unsupportedReason(k).empty());
}

// Fields past their hard limits are refused by the parser and by
// unsupportedReason before any size is computed from them (once, 2*n*iters
// overflowed and codegen divided by zero).
static void hardLimits() {
  std::string error;
  EXPECT(!KernelSpec::parse("sinkhorn.bwd;n=8;mode=log;iters=576460752303423488;arch=sm_90a", &error));
  EXPECT(error == "iters = 576460752303423488 is outside the valid range 1..65536");
  EXPECT(!KernelSpec::parse("sinkhorn.fwd;n=4;mode=log;iters=0;arch=sm_90a", &error));
  EXPECT(!KernelSpec::parse("aggregate.fwd;n=4;act=bf16;layout=nc;C=2305843009213693953;arch=sm_90a", &error));
  EXPECT(error.find("C = 2305843009213693953") != std::string::npos);
  EXPECT(!KernelSpec::parse("aggregate.fwd;n=4;act=bf16;layout=nc;C=-64;arch=sm_90a", &error));
  EXPECT(!KernelSpec::parse("aggregate.fwd;n=1025;act=bf16;layout=nc;C=64;arch=sm_90a", &error));
  EXPECT(!KernelSpec::parse("aggregate.fwd;n=0;act=bf16;layout=nc;C=64;arch=sm_90a", &error));
  EXPECT(!KernelSpec::parse("sinkhorn.fwd;n=4;mode=log;iters=9223372036854775808;arch=sm_90a", &error));
  EXPECT(!KernelSpec::parse("sinkhorn.fwd;n=4;mode=softmax_eps;iters=20;eps=nan;arch=sm_90a", &error));
  EXPECT(!KernelSpec::parse("scale.fwd;n=4;param=f32;norm_eps=0;pre_eps=0;post_mult=0;arch=sm_90a", &error));
  EXPECT(error == "post_mult = 0 must be finite and > 0");
  // The limits themselves are valid.
  EXPECT(KernelSpec::parse("sinkhorn.fwd;n=1024;mode=log;iters=65536;arch=sm_90a").has_value());
  EXPECT(KernelSpec::parse("aggregate.fwd;n=1024;act=bf16;layout=nc;C=1048576;arch=sm_90a").has_value());

  KernelSpec k; // built in code, as the runtime does: no parser in between
  k.op = OpKind::Sinkhorn;
  k.dir = Direction::Backward;
  k.n = 8;
  for (SinkhornMode mode : {SinkhornMode::Log, SinkhornMode::SoftmaxEps}) {
    k.mode = mode;
    k.iters = int64_t(1) << 59;
    EXPECT(unsupportedReason(k).find("iters") != std::string::npos);
    k.iters = kMaxSinkhornIters;
    EXPECT(unsupportedReason(k).find("history") != std::string::npos);
  }
  KernelSpec p;
  p.op = OpKind::Project;
  p.n = 8;
  p.channels = (int64_t(1) << 61) + 1; // n*C would wrap to 8
  EXPECT(unsupportedReason(p).find("C = ") != std::string::npos);
  p.channels = kMaxChannels;
  EXPECT(unsupportedReason(p).empty());
  EXPECT(invalidReason(p).empty());
}

// The seam's spec has the fields of its five ops; acc is a flag of three
// backward ops, printed only when set.
static void seamAndAcc() {
  KernelSpec s;
  s.op = OpKind::PostPre;
  s.channels = 64;
  s.hasBias = true;
  EXPECT(s.canonical() ==
         "post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;"
         "norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;"
         "iters=20;bias=1;arch=sm_90a");
  KernelSpec a;
  a.op = OpKind::Aggregate;
  a.dir = Direction::Backward;
  a.channels = 64;
  std::string plain = a.canonical();
  a.acc = true;
  EXPECT(a.canonical() == plain.substr(0, plain.size() - 12) + ";acc=1;arch=sm_90a");
  EXPECT(KernelSpec::parse(a.canonical()).has_value());
  EXPECT(unsupportedReason(a).empty()); // generated: codegen/kernels/Aggregate.cpp
  std::string error;
  EXPECT(!KernelSpec::parse(plain.substr(0, plain.size() - 12) + ";acc=0;arch=sm_90a", &error));
  EXPECT(error.find("not in canonical form") != std::string::npos);
  EXPECT(!KernelSpec::parse("aggregate.fwd;n=4;act=bf16;layout=nc;C=64;acc=1;arch=sm_90a", &error));
  EXPECT(error.find("acc is only a field") != std::string::npos);
}

// coop (the one-launch forward, docs/design/serve.md) is a flag of pre.fwd
// and post_pre.fwd, printed only when set; its parts are the multi-launch
// path's; a slice of x_next past the shared-memory limit is unsupported.
static void cooperative() {
  KernelSpec s;
  s.op = OpKind::PostPre;
  s.channels = 7168;
  std::string plain = s.canonical();
  s.cooperative = true;
  EXPECT(s.canonical() == plain.substr(0, plain.size() - 12) + ";coop=1;arch=sm_90a");
  EXPECT(KernelSpec::parse(s.canonical()).has_value());
  EXPECT(s.structuralHash() != KernelSpec::parse(plain)->structuralHash());
  EXPECT(unsupportedReason(s).empty());
  for (const KernelSpec &part : postPreParts(s))
    EXPECT(!part.cooperative);
  EXPECT(oneLaunchBlocks(s) == 132 && oneLaunchSliceBytes(s) == 4 * 4 * 55);
  s.arch = "sm_80";
  EXPECT(oneLaunchBlocks(s) == 108);
  s.channels = 16;
  EXPECT(oneLaunchBlocks(s) == 16);
  s.n = 8;
  s.channels = 1 << 20; // 8 * ceil(2^20 / 108) f32: past 32 KB
  EXPECT(unsupportedReason(s).find("the one-launch forward keeps") == 0);
  std::string error;
  EXPECT(!KernelSpec::parse(plain.substr(0, plain.size() - 12) + ";coop=0;arch=sm_90a", &error));
  s = KernelSpec();
  s.op = OpKind::Pre;
  s.dir = Direction::Backward;
  s.channels = 64;
  s.cooperative = true;
  EXPECT(invalidReason(s).find("coop is only a field") == 0);
  s.op = OpKind::Project;
  s.dir = Direction::Forward;
  EXPECT(invalidReason(s).find("coop is only a field") == 0);
  EXPECT(forwardRunsInOneLaunch(1) && forwardRunsInOneLaunch(kOneLaunchMaxTokens));
  EXPECT(!forwardRunsInOneLaunch(kOneLaunchMaxTokens + 1) && !forwardRunsInOneLaunch(-1) &&
         !forwardRunsInOneLaunch(0));
}

// acc=f32 (TE's f32 gradient buffer): its own spelling and structural hash,
// 2-byte activations only, one acc key; expand_combine's reads no acc.
static void accF32() {
  KernelSpec a;
  a.op = OpKind::Aggregate;
  a.dir = Direction::Backward;
  a.channels = 64;
  a.acc = true;
  KernelSpec f = a;
  f.acc = false;
  f.accF32 = true;
  EXPECT(f.canonical() == "aggregate.bwd;n=4;act=bf16;layout=nc;C=64;acc=f32;arch=sm_90a");
  auto parsed = KernelSpec::parse(f.canonical());
  EXPECT(parsed && parsed->accF32 && !parsed->acc && parsed->readsAcc());
  EXPECT(f.structuralHash() != a.structuralHash() && f != a);
  EXPECT(f.accType() == DType::F32 && f.gxType() == DType::F32 && invalidReason(f).empty());
  KernelSpec p = f;
  p.op = OpKind::Project;
  EXPECT(p.readsAcc() && p.accType() == DType::F32 && p.gxType() == DType::BF16);
  KernelSpec e = f;
  e.op = OpKind::ExpandCombine;
  EXPECT(!e.readsAcc() && e.gxType() == DType::F32);
  std::string error;
  KernelSpec wide = f;
  wide.act = DType::F32;
  EXPECT(!KernelSpec::parse(wide.canonical(), &error));
  EXPECT(error.find("acc=f32 is for 2-byte activations") != std::string::npos);
  KernelSpec both = f;
  both.acc = true;
  EXPECT(invalidReason(both) == "acc=1 and acc=f32 exclude each other");
  EXPECT(!KernelSpec::parse("aggregate.fwd;n=4;act=bf16;layout=nc;C=64;acc=f32;arch=sm_90a", &error));
  EXPECT(error.find("acc is only a field") != std::string::npos);
  EXPECT(!KernelSpec::parse("aggregate.bwd;n=4;act=bf16;layout=nc;C=64;acc=f16;arch=sm_90a", &error));
}

// The seam is made of its parts' specs (each with the seam's fields) and
// is supported where every part is.
static void seamParts() {
  KernelSpec s;
  s.op = OpKind::PostPre;
  s.channels = 64;
  s.hasBias = true;
  s.hasWeight = true;
  std::vector<KernelSpec> fwd = postPreParts(s);
  EXPECT(fwd.size() == 2 && fwd[0].op == OpKind::ExpandCombine && fwd[1].op == OpKind::Pre);
  EXPECT(fwd[0].canonical() ==
         "expand_combine.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;bias=1;arch=sm_90a");
  EXPECT(fwd[1].hasWeight && fwd[1].channels == 64);
  EXPECT(unsupportedReason(s).empty());
  s.dir = Direction::Backward;
  std::vector<KernelSpec> bwd = postPreParts(s);
  EXPECT(bwd.size() == 5);
  EXPECT(bwd[0].op == OpKind::Aggregate && bwd[0].acc && bwd[0].dir == Direction::Backward);
  EXPECT(bwd[1].op == OpKind::Sinkhorn && !bwd[1].acc);
  EXPECT(bwd[2].op == OpKind::Scale && bwd[3].op == OpKind::Project && bwd[3].acc);
  EXPECT(bwd[4].op == OpKind::ExpandCombine && !bwd[4].acc && bwd[4].hasBias);
  s.iters = 1000; // the sinkhorn backward's history no longer fits
  EXPECT(unsupportedReason(s).find("the seam's part ") == 0);
  s.dir = Direction::Forward;
  s.iters = 20;
  s.n = 3;
  s.channels = 1001; // K = 3003: every part runs at any K
  EXPECT(unsupportedReason(s).empty());
}

// pre.bwd (the pre step's backward, codegen/kernels/PreBackward.cpp): the
// flagship only, with no acc, acc=1 or acc=f32; its parts carry the acc
// the separate ops take (aggregate pre.bwd's, project acc=1 or acc=f32).
static void preBackwardParts() {
  KernelSpec s;
  s.op = OpKind::Pre;
  s.dir = Direction::Backward;
  s.layout = Layout::CN;
  s.channels = 64;
  EXPECT(foldsAggregateGrad(s) && unsupportedReason(s).empty());
  std::vector<KernelSpec> plain = preBackwardParts(s);
  EXPECT(plain.size() == 4 && plain[0].op == OpKind::Aggregate && !plain[0].readsAcc());
  EXPECT(plain[1].op == OpKind::Sinkhorn && plain[2].op == OpKind::Scale);
  EXPECT(plain[3].op == OpKind::Project && plain[3].acc && !plain[3].accF32);
  s.acc = true;
  EXPECT(KernelSpec::parse(s.canonical()).has_value());
  EXPECT(preBackwardParts(s)[0].acc && preBackwardParts(s)[3].acc);
  s.acc = false;
  s.accF32 = true;
  EXPECT(s.canonical().find(";acc=f32;") != std::string::npos);
  std::vector<KernelSpec> buffer = preBackwardParts(s);
  EXPECT(buffer[0].accF32 && !buffer[0].acc && buffer[3].accF32 && !buffer[3].acc);
  EXPECT(!buffer[1].accF32 && !buffer[2].accF32);
  s.layout = Layout::NC; // not the flagship: the four ops' kernels
  EXPECT(unsupportedReason(s).find("the pre step's backward kernel is the flagship's") == 0);
  s.layout = Layout::CN;
  s.iters = 1000;
  EXPECT(unsupportedReason(s).find("the pre step's part sinkhorn.bwd") == 0);
}

int main() {
  roundTripsEveryOp();
  preBackwardParts();
  seamAndAcc();
  accF32();
  seamParts();
  cooperative();
  leavesOutUnusedFields();
  floatsRoundTripExactly();
  hashIsStable();
  rejectsNonCanonical();
  supportRules();
  hardLimits();
  return summary();
}
