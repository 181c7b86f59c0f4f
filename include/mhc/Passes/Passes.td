//===- Passes.td - mhc transformation passes ----------------*- tablegen -*-===//

#ifndef MHC_PASSES_TD
#define MHC_PASSES_TD

include "mlir/Pass/PassBase.td"

def ExpandLayers : Pass<"mhc-expand-layers"> {
  let summary = "rewrite each mhc.layer into project, scale, sinkhorn, aggregate, "
                "its block and expand_combine";
  let description = [{
    `mhc.layer` keeps one layer's residual path together so model graphs stay
    short; kernels are built per op. This pass replaces every `mhc.layer`
    with the five MATH.md ops and inlines its body (the opaque block) between
    `mhc.aggregate` and `mhc.expand_combine`. Attributes carry over
    unchanged: `tf32` to project, `norm_eps`/`pre_eps`/`post_mult` to scale,
    `mode`/`iters`/`eps` to sinkhorn.

    ```mlir
    %x1 = mhc.layer nc %x, %phi, %alpha, %beta sinkhorn log {n = 4 : i64} : ... {
    ^bb0(%y: tensor<?x64xbf16>):
      %f = func.call @block(%y) : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
      mhc.yield %f : tensor<?x64xbf16>
    }
    ```
    becomes
    ```mlir
    %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : ...
    %pre, %post, %logits = mhc.scale %h, %ms, %alpha, %beta {n = 4 : i64} : ...
    %P = mhc.sinkhorn log %logits {n = 4 : i64} : ...
    %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : ...
    %f = func.call @block(%y) : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
    %x1 = mhc.expand_combine nc %f, %post, %x, %P {n = 4 : i64} : ...
    ```
  }];
  let dependentDialects = ["::mlir::mhc::MhcDialect"];
}

def FusePre : Pass<"mhc-fuse-pre"> {
  let summary = "fuse project, scale, sinkhorn and aggregate of one layer into "
                "mhc.pre";
  let description = [{
    Replaces one layer's pre step, the four forward ops that
    `mhc-expand-layers` produces, with one `mhc.pre` (one kernel). It
    matches each `mhc.aggregate` whose `pre` is result 0 of an `mhc.scale`
    whose `h` and `ms` are the results of an `mhc.project` on the
    aggregate's `x` (same n and layout), with an `mhc.sinkhorn` reading that
    scale's `logits`. It fuses them when all four are in one block, `phi`,
    `alpha`, `beta` and `weight` share an element type (the kernel has one
    parameter dtype), and `alpha`/`beta` are defined before the project
    (where `mhc.pre` goes). Anything else is left unchanged.

    Attributes carry over: `tf32` from project, `norm_eps`/`pre_eps`/
    `post_mult` from scale, `mode`/`iters`/`eps` from the sinkhorn. Every
    use of the four ops' results, gradient ops included, reads the fused
    op's result instead. When several sinkhorns read the logits, the one
    whose `P` feeds an `mhc.expand_combine` with this scale's `post` (else
    the first in the block) is fused; others with the same attributes read
    the fused `P`, the rest keep reading the fused `logits`.

    Run after `mhc-expand-layers --canonicalize --cse` (so a unit weight is
    gone and duplicates are merged) and before `mhc-specialize`.

    Cost: three launches instead of six, the same bits. Whether a chain is
    fused at its token count M is `mhc::preStepFuses` (OpContract.h), the
    rule `torch.ops.mhc.pre` follows at run time: always for n <= 4; for
    n > 4 only when M is static and at most 512 (the fused tail's per-token
    Sinkhorn thread caps it at two blocks per SM, and past a few hundred
    tokens the four kernels are faster). A chain with n > 4 and a larger or
    dynamic M stays as four ops, with a remark saying why.

    ```mlir
    %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : ...
    %pre, %post, %logits = mhc.scale %h, %ms, %alpha, %beta {n = 4 : i64} : ...
    %P = mhc.sinkhorn log %logits {n = 4 : i64} : ...
    %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : ...
    ```
    becomes
    ```mlir
    %h, %ms, %pre, %post, %logits, %P, %y =
        mhc.pre nc %x, %phi, %alpha, %beta sinkhorn log {n = 4 : i64} : ...
    ```
  }];
  let dependentDialects = ["::mlir::mhc::MhcDialect"];
}

def FuseLayers : Pass<"mhc-fuse-layers"> {
  let summary = "fuse each layer seam (a layer's expand_combine and the next "
                "layer's mhc.pre) into mhc.post_pre, and its gradient chain "
                "into mhc.post_pre_grad; sum x's gradients in-kernel (acc)";
  let description = [{
    The seam between layer l and layer l+1 (docs/design/seam.md) is layer
    l's `mhc.expand_combine` followed by layer l+1's pre step; nothing runs
    between them. Three rewrites, in this order:

    1. Forward: an `mhc.expand_combine` whose result is the `x` of an
       `mhc.pre` (one block; same n and layout; the bias, if any, of phi's
       element type: the kernel has one parameter dtype) becomes one
       `mhc.post_pre`. `x_next` stays a result for the other users of the
       expand_combine's result (the next seam's residual path). Where the
       pre step would not fuse at the token count (`mhc::preStepFuses`, the
       rule of `mhc-fuse-pre` and of the runtime) the seam does not either,
       and a remark says why.
    2. Gradient sums: an `arith.addf` tree summing x's gradient
       contributions, where contributions are the `gx` of
       `mhc.aggregate_grad`, `mhc.project_grad` and `mhc.expand_combine_grad`
       (each used only by the sum) and at most one other value, becomes a
       chain of `acc` operands: in block order, each of those ops takes the
       previous one's `gx` (the first takes the other value), and the last
       one's `gx` is the sum. No n-stream `arith.addf` is left, e.g.

       ```mlir
       %gf, %gpost, %gx1, %gP = mhc.expand_combine_grad cn %gout, %f, %post, %x, %P ...
       %gx2, %gpre = mhc.aggregate_grad cn %gy, %x, %pre acc %gx1 ...
       %gx, %gphi = mhc.project_grad cn %gh, %gms, %x, %phi acc %gx2 ...
       ```
    3. Backward seams: the chain `aggregate_grad(gy, x_next, pre, acc =
       gx_next)`, `sinkhorn_grad`, `scale_grad`, `project_grad(x_next, acc =
       aggregate_grad's gx)` of layer l+1 and layer l's `expand_combine_grad`
       of project_grad's gx, each intermediate used only by the next op,
       becomes one `mhc.post_pre_grad` (same n, layout and parameter dtype
       rules, the same token-count rule, with a remark).

    The fused ops go where the last op they replace was, or, when a result's
    user comes earlier, right after their last operand's definition; where
    neither dominates every user, nothing is fused. A stack of L layers
    becomes `mhc.pre`, L-1 `mhc.post_pre` and an `mhc.expand_combine`; its
    backward, the last layer's `expand_combine_grad`, L-1
    `mhc.post_pre_grad` and the first layer's four gradient ops with `acc`.

    Run after `mhc-fuse-pre` (the forward seam reads its `mhc.pre`) and
    before `mhc-specialize`.
  }];
  let dependentDialects = ["::mlir::mhc::MhcDialect"];
}

def Specialize : Pass<"mhc-specialize"> {
  let summary = "stamp a concrete kernel spec on every mhc kernel op and mark "
                "the unsupported ones";
  let description = [{
    For every op that becomes a kernel (`mhc.project`, ..., and the gradient
    ops), builds its `mhc::KernelSpec` from the op's types and attributes (n,
    activation and parameter dtypes, layout, C, variant) and the `arch`
    option, and attaches it as `mhc.spec = #mhc.spec<"...">`. When codegen
    cannot build that spec (n outside 1..8, a dynamic C, an unknown arch,
    ...), the op also gets `mhc.fallback = "<reason>"`: later lowering skips
    it and the runtime runs the reference path instead. Both decisions come
    from one function, `mhc::unsupportedReason`. Without `arch` the pass
    targets sm_90a and says so in a remark.

    The forward of `mhc.pre` and `mhc.post_pre` at a static token count M
    with `mhc::forwardRunsInOneLaunch(M)` (M <= kOneLaunchMaxTokens) gets the
    one-launch kernel (`coop=1` in the spec; docs/design/serve.md), as the
    torch ops choose it at run time. With a dynamic M the op keeps the
    multi-launch spec in `mhc.spec` and gets the one-launch spec in
    `mhc.spec_one_launch` too: the runtime picks by M, so the kernels
    reported, generated and bundled cover both.

    Run after `mhc-expand-layers` (and `mhc-fuse-pre` and
    `mhc-fuse-layers`, whose fused ops it specialises like any kernel op):
    an `mhc.layer` left in the input is an error.
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_90a\"",
           "target GPU architecture: sm_80, sm_90a or sm_100a">,
  ];
}

def ReportKernels : Pass<"mhc-report-kernels"> {
  let summary = "print the distinct kernels the IR needs, one line each";
  let description = [{
    Lists each distinct `mhc.spec` in the IR (run `mhc-specialize` first)
    with how many ops use it and whether codegen builds it or it falls back
    to the reference path (`mhc.fallback`), then a summary line. The IR is left unchanged. Ops
    without a spec are counted as unspecialised.
  }];
  let options = [
    Option<"toStderr", "to-stderr", "bool", /*default=*/"false",
           "print to stderr instead of stdout">,
  ];
}

#endif // MHC_PASSES_TD
