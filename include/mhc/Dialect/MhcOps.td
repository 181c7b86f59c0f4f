//===- MhcOps.td - mhc operations ---------------------------*- tablegen -*-===//
//
// Forward ops (MATH.md "Forward"), their gradients (MATH.md "Backward") and the
// layer-level ops used to write model graphs. Shapes, dtypes and attribute
// ranges are checked in dialect/*.cpp so each diagnostic can name the operand
// and the shape it expected.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_OPS_TD
#define MHC_OPS_TD

include "mhc/Dialect/MhcDialect.td"
include "mhc/Dialect/MhcAttrs.td"
include "mhc/Dialect/MhcInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

//===----------------------------------------------------------------------===//
// Attribute groups shared by an op, its gradient and mhc.layer.
//===----------------------------------------------------------------------===//

defvar StreamAttrs = (ins ConfinedAttr<I64Attr, [IntPositive]>:$n);
defvar LayoutAttrs = (ins Mhc_LayoutAttr:$layout);
defvar ProjectAttrs = (ins UnitAttr:$tf32);
defvar ScaleAttrs = (ins
  DefaultValuedAttr<F32Attr, "1.0e-6">:$norm_eps,
  DefaultValuedAttr<F32Attr, "1.0e-6">:$pre_eps,
  DefaultValuedAttr<F32Attr, "2.0">:$post_mult);
defvar SinkhornAttrs = (ins
  Mhc_SinkhornModeAttr:$mode,
  DefaultValuedAttr<ConfinedAttr<I64Attr, [IntPositive]>, "20">:$iters,
  OptionalAttr<F32Attr>:$eps);

defvar ScaleAttrDoc = [{
    Attributes (MATH.md step 2): `n`; `norm_eps` (default 1e-6; TE uses
    FLT_EPSILON = 1.1920929e-07), `pre_eps` (default 1e-6; TE uses 0),
    `post_mult` (default 2). `norm_eps` and `pre_eps` must be finite and
    >= 0, `post_mult` finite and > 0.
}];
defvar SinkhornAttrDoc = [{
    Attributes (MATH.md step 3): `n`; the mode (`log` or `softmax_eps`,
    written after the op name); `iters` = T, 1 to 65536 (default 20;
    `mhc::kMaxSinkhornIters`); `eps`, only in
    `softmax_eps` mode (default 1e-6, finite and >= 0). Both modes end on a
    column normalisation, so every column of P sums to 1.
}];

// Runs the op's verifySignature() (operand/result shapes and dtypes, attribute
// ranges) before InferTypeOpInterface compares result types, so a bad operand
// is reported by name rather than as a result-type mismatch.
def Mhc_SignatureVerified : NativeOpTrait<"SignatureVerified"> {
  let cppNamespace = "::mlir::mhc::OpTrait";
}

class Mhc_KernelOp<string mnemonic, list<Trait> traits = []>
    : Mhc_Op<mnemonic, !listconcat(traits, [Pure, Mhc_SignatureVerified,
        InferTypeOpAdaptorWithIsCompatible,
        DeclareOpInterfaceMethods<Mhc_KernelOpInterface>])> {
  let extraClassDeclaration = [{
    ::mlir::LogicalResult verifySignature();
  }];
}

//===----------------------------------------------------------------------===//
// Forward ops
//===----------------------------------------------------------------------===//

def Mhc_ProjectOp : Mhc_KernelOp<"project"> {
  let summary = "mixing logits h = (x * w) phi^T and mean square ms (eq. 14-15)";
  let description = [{
    For every token m, with `xvec[m]` the `K = n*C` values of `x[m]` in memory
    order (so `phi`'s columns follow `layout`):

    ```
    h[m]  = (xvec[m] * weight) . phi^T      // [N], N = 2n + n^2
    ms[m] = (1/K) sum_k xvec[m,k]^2         // always plain fp32
    ```

    `weight` is the optional RMSNorm weight (`[K]`; absent means ones). The
    `tf32` unit attribute allows TF32 tensor-core math for the product
    (DeepSeek's recipe); `ms` never uses it.

    Operands: `x` `[M, n, C]` (`nc`) or `[M, C, n]` (`cn`), activation dtype;
    `phi` `[N, K]` with rows `[pre (n) | post (n) | res (n*n)]`; `weight`
    `[K]`. Results: `h` `[M, N]` f32, `ms` `[M]` f32.

    ```mlir
    %h, %ms = mhc.project nc %x, %phi {n = 4 : i64, tf32}
        : (tensor<?x4x2048xbf16>, tensor<24x8192xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
    ```
  }];
  let arguments = !con((ins AnyRankedTensor:$x, AnyRankedTensor:$phi,
                            Optional<AnyRankedTensor>:$weight),
                       StreamAttrs, LayoutAttrs, ProjectAttrs);
  let results = (outs AnyRankedTensor:$h, AnyRankedTensor:$ms);
  let assemblyFormat = [{
    custom<Layout>($layout) $x `,` $phi (`weight` $weight^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasCanonicalizer = 1;
}

def Mhc_ScaleOp : Mhc_KernelOp<"scale"> {
  let summary = "RMS-normalise, scale and squash the mixing logits (eq. 16-18)";
  let description = !strconcat([{
    ```
    r      = 1 / sqrt(ms + norm_eps)
    z_k    = alpha[seg(k)] * h_k * r + beta_k      seg in {pre, post, res}
    pre    = sigmoid(z_pre) + pre_eps              // [M, n]
    post   = post_mult * sigmoid(z_post)           // [M, n]
    logits = z_res                                 // [M, n, n], row-major i*n+j
    ```

    Operands: `h` `[M, N]`, `ms` `[M]` (f32); `alpha` `[3]` (pre, post, res)
    and `beta` `[N]` (f32 or bf16 parameters).
  }], ScaleAttrDoc, [{

    ```mlir
    %pre, %post, %logits = mhc.scale %h, %ms, %alpha, %beta {n = 4 : i64}
        : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
        -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
    ```
  }]);
  let arguments = !con((ins AnyRankedTensor:$h, AnyRankedTensor:$ms,
                            AnyRankedTensor:$alpha, AnyRankedTensor:$beta),
                       StreamAttrs, ScaleAttrs);
  let results = (outs AnyRankedTensor:$pre, AnyRankedTensor:$post,
                      AnyRankedTensor:$logits);
  let assemblyFormat = [{
    $h `,` $ms `,` $alpha `,` $beta attr-dict `:` functional-type(operands, results)
  }];
}

def Mhc_SinkhornOp : Mhc_KernelOp<"sinkhorn"> {
  let summary = "project the residual mixing logits onto doubly stochastic matrices (eq. 19)";
  let description = !strconcat([{
    Per token, an `n x n` Sinkhorn-Knopp normalisation of `logits`:

    * `log`: `f = g = 0`; T times: `f_i = -logsumexp_j(L_ij + g_j)`,
      `g_j = -logsumexp_i(L_ij + f_i)`; then `P_ij = exp(f_i + L_ij + g_j)`.
    * `softmax_eps`: `P = softmax_j(L) + eps`; `P /= colsum(P) + eps`; then
      T-1 times `P /= rowsum(P) + eps`; `P /= colsum(P) + eps`.

    Operand `logits` and result `P`: `[M, n, n]` f32.
  }], SinkhornAttrDoc, [{

    ```mlir
    %P = mhc.sinkhorn log %logits {n = 4 : i64, iters = 20 : i64}
        : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
    ```
  }]);
  let arguments = !con((ins AnyRankedTensor:$logits), StreamAttrs, SinkhornAttrs);
  let results = (outs AnyRankedTensor:$P);
  let assemblyFormat = [{
    custom<SinkhornMode>($mode) $logits attr-dict `:` functional-type(operands, results)
  }];
}

def Mhc_AggregateOp : Mhc_KernelOp<"aggregate"> {
  let summary = "collapse the n streams into the block input, y = pre . x (F_pre)";
  let description = [{
    `y[m, c] = sum_i pre[m, i] * x[m, i, c]`, accumulated in f32 and stored
    in the activation dtype.

    Operands: `x` `[M, n, C]` (`nc`) or `[M, C, n]` (`cn`); `pre` `[M, n]`
    f32. Result: `y` `[M, C]` with `x`'s element type.

    ```mlir
    %y = mhc.aggregate nc %x, %pre {n = 4 : i64}
        : (tensor<?x4x2048xbf16>, tensor<?x4xf32>) -> tensor<?x2048xbf16>
    ```
  }];
  let arguments = !con((ins AnyRankedTensor:$x, AnyRankedTensor:$pre),
                       StreamAttrs, LayoutAttrs);
  let results = (outs AnyRankedTensor:$y);
  let assemblyFormat = [{
    custom<Layout>($layout) $x `,` $pre attr-dict `:` functional-type(operands, results)
  }];
}

def Mhc_ExpandCombineOp : Mhc_KernelOp<"expand_combine"> {
  let summary = "mix the streams and add the block output, out = P^T x + post (f + bias)";
  let description = [{
    F_post plus the residual:
    `out[m, j, c] = post[m, j] * (f[m, c] + bias[c]) + sum_i P[m, i, j] * x[m, i, c]`.

    Operands: `f` `[M, C]` (the block output, same dtype as `x`); `post`
    `[M, n]` f32; `x` `[M, n, C]` (`nc`) or `[M, C, n]` (`cn`); `P`
    `[M, n, n]` f32; optional `bias` `[C]` (f32 or bf16). Result: `out`, the
    next layer's residual streams, with `x`'s type.

    ```mlir
    %out = mhc.expand_combine nc %f, %post, %x, %P {n = 4 : i64}
        : (tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x4x2048xbf16>, tensor<?x4x4xf32>)
        -> tensor<?x4x2048xbf16>
    ```
  }];
  let arguments = !con((ins AnyRankedTensor:$f, AnyRankedTensor:$post,
                            AnyRankedTensor:$x, AnyRankedTensor:$P,
                            Optional<AnyRankedTensor>:$bias),
                       StreamAttrs, LayoutAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    custom<Layout>($layout) $f `,` $post `,` $x `,` $P (`bias` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Fused forward ops: several forward ops in one kernel (mhc-fuse-pre).
//===----------------------------------------------------------------------===//

def Mhc_PreOp : Mhc_KernelOp<"pre"> {
  let summary = "one layer's pre step fused: project, scale, sinkhorn, aggregate";
  let description = !strconcat([{
    Exactly the four forward ops, in one kernel:

    ```
    (h, ms)              = project(x, phi, weight)
    (pre, post, logits)  = scale(h, ms, alpha, beta)
    P                    = sinkhorn(logits)
    y                    = aggregate(x, pre)
    ```

    Every intermediate is a result, so gradient ops (and `expand_combine`,
    which reads `post` and `P`) use them as they would the separate ops'
    results; one kernel computes them all. `mhc-fuse-pre` forms this op
    from the four separate ops.

    Operands: `x` `[M, n, C]` (`nc`) or `[M, C, n]` (`cn`), activation dtype;
    `phi` `[N, K]`, `alpha` `[3]`, `beta` `[N]` and the optional RMSNorm
    `weight` `[K]`, all parameters of one element type (f32 or bf16: the
    kernel has one parameter dtype). Results: `h` `[M, N]`, `ms` `[M]`,
    `pre` and `post` `[M, n]`, `logits` and `P` `[M, n, n]`, all f32; `y`
    `[M, C]` with `x`'s element type.

    Attributes: those of `mhc.project` (`tf32`), `mhc.scale` and
    `mhc.sinkhorn`.
  }], ScaleAttrDoc, SinkhornAttrDoc, [{

    ```mlir
    %h, %ms, %pre, %post, %logits, %P, %y =
        mhc.pre nc %x, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
        : (tensor<?x4x2048xbf16>, tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>)
        -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>,
            tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x2048xbf16>)
    ```
  }]);
  let arguments = !con((ins AnyRankedTensor:$x, AnyRankedTensor:$phi,
                            AnyRankedTensor:$alpha, AnyRankedTensor:$beta,
                            Optional<AnyRankedTensor>:$weight),
                       StreamAttrs, LayoutAttrs, ProjectAttrs, ScaleAttrs,
                       SinkhornAttrs);
  let results = (outs AnyRankedTensor:$h, AnyRankedTensor:$ms,
                      AnyRankedTensor:$pre, AnyRankedTensor:$post,
                      AnyRankedTensor:$logits, AnyRankedTensor:$P,
                      AnyRankedTensor:$y);
  let assemblyFormat = [{
    custom<Layout>($layout) $x `,` $phi `,` $alpha `,` $beta (`weight` $weight^)?
    `sinkhorn` custom<SinkhornMode>($mode) attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Backward ops: gradients of the exact discrete forward (MATH.md "Backward").
//===----------------------------------------------------------------------===//

def Mhc_ProjectGradOp : Mhc_KernelOp<"project_grad", [AttrSizedOperandSegments]> {
  let summary = "gradient of mhc.project";
  let description = [{
    Given the upstream gradients `gh` `[M, N]` and `gms` `[M]` (f32):

    ```
    gxvec = (gh . phi) * w + (2/K) * gms * xvec         // per token
    gphi  = sum_m gh[m]^T (xvec[m] * w)                 // [N, K]
    gw    = sum_m (gh[m] . phi) * xvec[m]               // [K], only with weight
    ```

    The sums over tokens are cross-token reductions: kernels compute them as
    fixed-order partial sums (deterministic, no float atomics). `gx` has
    `x`'s type, `gphi` `phi`'s and `gw` `weight`'s. Attributes as in
    `mhc.project`.

    With the optional `acc` (x's shape and type), `gx` is `acc` plus this
    op's gradient of x, summed in the kernel where `gx` is stored: x's
    gradient from its other users enters here, so no `arith.addf` of
    n-stream tensors is needed (`mhc-fuse-layers` threads it).

    ```mlir
    %gx, %gphi = mhc.project_grad nc %gh, %gms, %x, %phi {n = 4 : i64}
        : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>)
        -> (tensor<?x4x64xbf16>, tensor<24x256xf32>)
    ```
  }];
  let arguments = !con((ins AnyRankedTensor:$gh, AnyRankedTensor:$gms,
                            AnyRankedTensor:$x, AnyRankedTensor:$phi,
                            Optional<AnyRankedTensor>:$weight,
                            Optional<AnyRankedTensor>:$acc),
                       StreamAttrs, LayoutAttrs, ProjectAttrs);
  let results = (outs AnyRankedTensor:$gx, AnyRankedTensor:$gphi,
                      Optional<AnyRankedTensor>:$gweight);
  let assemblyFormat = [{
    custom<Layout>($layout) $gh `,` $gms `,` $x `,` $phi (`weight` $weight^)? (`acc` $acc^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasCanonicalizer = 1;
}

def Mhc_ScaleGradOp : Mhc_KernelOp<"scale_grad"> {
  let summary = "gradient of mhc.scale";
  let description = !strconcat([{
    Recomputes `r`, `z` and `s = sigmoid(z)` from `h`, `ms`, `alpha`, `beta`,
    then, from the upstream `gpre`, `gpost` `[M, n]` and `glogits` `[M, n, n]`:

    ```
    gz_pre  = gpre * s (1 - s)
    gz_post = gpost * post * (1 - post / post_mult)
    gz_res  = glogits
    gh_k    = gz_k * alpha_seg * r                          // [M, N]
    gms     = -0.5 * r^3 * sum_k gz_k * alpha_seg * h_k     // [M]
    galpha_seg = sum_m sum_{k in seg} gz_k h_k r            // [3], cross-token
    gbeta      = sum_m gz                                   // [N], cross-token
    ```

    Cross-token sums are deterministic fixed-order reductions.
  }], ScaleAttrDoc);
  let arguments = !con((ins AnyRankedTensor:$gpre, AnyRankedTensor:$gpost,
                            AnyRankedTensor:$glogits, AnyRankedTensor:$h,
                            AnyRankedTensor:$ms, AnyRankedTensor:$alpha,
                            AnyRankedTensor:$beta),
                       StreamAttrs, ScaleAttrs);
  let results = (outs AnyRankedTensor:$gh, AnyRankedTensor:$gms,
                      AnyRankedTensor:$galpha, AnyRankedTensor:$gbeta);
  let assemblyFormat = [{
    $gpre `,` $gpost `,` $glogits `,` $h `,` $ms `,` $alpha `,` $beta attr-dict `:` functional-type(operands, results)
  }];
}

def Mhc_SinkhornGradOp : Mhc_KernelOp<"sinkhorn_grad"> {
  let summary = "gradient of mhc.sinkhorn, by reverse mode through the T iterations";
  let description = !strconcat([{
    `glogits = d(sinkhorn(logits))/d(logits)^T . gP`, the exact gradient of
    the discrete T-iteration forward (not an implicit-function
    approximation). Kernels recompute the forward per token in registers and
    replay it backwards; nothing but `logits` is kept from the forward.

    Operands `gP`, `logits` and result `glogits`: `[M, n, n]` f32.
  }], SinkhornAttrDoc);
  let arguments = !con((ins AnyRankedTensor:$gP, AnyRankedTensor:$logits),
                       StreamAttrs, SinkhornAttrs);
  let results = (outs AnyRankedTensor:$glogits);
  let assemblyFormat = [{
    custom<SinkhornMode>($mode) $gP `,` $logits attr-dict `:` functional-type(operands, results)
  }];
}

def Mhc_AggregateGradOp : Mhc_KernelOp<"aggregate_grad"> {
  let summary = "gradient of mhc.aggregate";
  let description = [{
    `gx[m, i, c] = pre[m, i] * gy[m, c]` and `gpre[m, i] = sum_c gy[m, c] * x[m, i, c]`.

    Operands: `gy` `[M, C]` (x's dtype), `x`, `pre` `[M, n]` f32. Results:
    `gx` (x's type) and `gpre` `[M, n]` f32.

    With the optional `acc` (x's shape and type), `gx` is `acc` plus this
    op's gradient of x, summed in the kernel where `gx` is stored: x's
    gradient from its other users enters here, so no `arith.addf` of
    n-stream tensors is needed (`mhc-fuse-layers` threads it).
  }];
  let arguments = !con((ins AnyRankedTensor:$gy, AnyRankedTensor:$x,
                            AnyRankedTensor:$pre, Optional<AnyRankedTensor>:$acc),
                       StreamAttrs, LayoutAttrs);
  let results = (outs AnyRankedTensor:$gx, AnyRankedTensor:$gpre);
  let assemblyFormat = [{
    custom<Layout>($layout) $gy `,` $x `,` $pre (`acc` $acc^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasCanonicalizer = 1;
}

def Mhc_ExpandCombineGradOp : Mhc_KernelOp<"expand_combine_grad", [AttrSizedOperandSegments]> {
  let summary = "gradient of mhc.expand_combine";
  let description = [{
    From the upstream gradient `gout` (x's type):

    ```
    gf[m, c]    = sum_j post[m, j] gout[m, j, c]
    gpost[m, j] = sum_c (f[m, c] + bias[c]) gout[m, j, c]
    gP[m, i, j] = sum_c x[m, i, c] gout[m, j, c]
    gx[m, i, c] = sum_j P[m, i, j] gout[m, j, c]
    gbias[c]    = sum_m gf[m, c]                    // only with bias, cross-token
    ```

    Results: `gf` (f's type), `gpost` `[M, n]` f32, `gx` (x's type), `gP`
    `[M, n, n]` f32, and `gbias` (bias's type) when `bias` is given.

    With the optional `acc` (x's shape and type), `gx` is `acc` plus this
    op's gradient of x, summed in the kernel where `gx` is stored: x's
    gradient from its other users enters here, so no `arith.addf` of
    n-stream tensors is needed (`mhc-fuse-layers` threads it).

    ```mlir
    %gf, %gpost, %gx, %gP = mhc.expand_combine_grad nc %gout, %f, %post, %x, %P acc %gx_other {n = 4 : i64}
        : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>,
           tensor<?x4x4xf32>, tensor<?x4x64xbf16>)
        -> (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>)
    ```
  }];
  let arguments = !con((ins AnyRankedTensor:$gout, AnyRankedTensor:$f,
                            AnyRankedTensor:$post, AnyRankedTensor:$x,
                            AnyRankedTensor:$P, Optional<AnyRankedTensor>:$bias,
                            Optional<AnyRankedTensor>:$acc),
                       StreamAttrs, LayoutAttrs);
  let results = (outs AnyRankedTensor:$gf, AnyRankedTensor:$gpost,
                      AnyRankedTensor:$gx, AnyRankedTensor:$gP,
                      Optional<AnyRankedTensor>:$gbias);
  let assemblyFormat = [{
    custom<Layout>($layout) $gout `,` $f `,` $post `,` $x `,` $P (`bias` $bias^)? (`acc` $acc^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// The layer seam (docs/design/seam.md): expand_combine of layer l and the pre
// step of layer l+1 in one op, forward and backward (mhc-fuse-layers).
//===----------------------------------------------------------------------===//

def Mhc_PostPreOp : Mhc_KernelOp<"post_pre", [AttrSizedOperandSegments]> {
  let summary = "the layer seam: layer l's expand_combine, then layer l+1's pre step";
  let description = !strconcat([{
    Nothing runs between the post step of layer l and the pre step of layer
    l+1, so one kernel computes both, reading `x_next` back once instead of
    twice:

    ```
    x_next                         = P^T x + post (f + bias)          // expand_combine
    (h, ms)                        = project(x_next, phi, weight)
    (pre, post_next, logits)       = scale(h, ms, alpha, beta)
    P_next                         = sinkhorn(logits)
    y                              = aggregate(x_next, pre)
    ```

    `x_next` stays a result for its other users (the next seam's residual
    path); `h`, `ms`, `pre` and `logits` are what the backward needs.

    Operands, the contract of docs/design/seam.md: layer l's `f` `[M, C]`
    (x's dtype), `post` `[M, n]` f32, `x` `[M, n, C]` (`nc`) or `[M, C, n]`
    (`cn`, activation dtype), `P` `[M, n, n]` f32 and optional `bias` `[C]`;
    then, after `next`, layer l+1's `phi` `[N, K]`, `alpha` `[3]`, `beta`
    `[N]` and optional RMSNorm `weight` `[K]`. `bias`, `phi`, `alpha`,
    `beta` and `weight` share one parameter element type (f32 or bf16: the
    kernel has one). Results: `x_next` (x's type), `h` `[M, N]`, `ms` `[M]`,
    `pre` and `post_next` `[M, n]`, `logits` and `P_next` `[M, n, n]`, all
    f32, and `y` `[M, C]` (x's element type).

    Attributes: those of `mhc.pre` (`tf32`, scale's and the Sinkhorn's), for
    layer l+1's pre step.
  }], ScaleAttrDoc, SinkhornAttrDoc, [{

    ```mlir
    %x1, %h, %ms, %pre, %post1, %logits, %P1, %y =
        mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
        : (tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x4x2048xbf16>, tensor<?x4x4xf32>,
           tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>)
        -> (tensor<?x4x2048xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>,
            tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x2048xbf16>)
    ```
  }]);
  let arguments = !con((ins AnyRankedTensor:$f, AnyRankedTensor:$post,
                            AnyRankedTensor:$x, AnyRankedTensor:$P,
                            Optional<AnyRankedTensor>:$bias,
                            AnyRankedTensor:$phi, AnyRankedTensor:$alpha,
                            AnyRankedTensor:$beta,
                            Optional<AnyRankedTensor>:$weight),
                       StreamAttrs, LayoutAttrs, ProjectAttrs, ScaleAttrs,
                       SinkhornAttrs);
  let results = (outs AnyRankedTensor:$x_next, AnyRankedTensor:$h,
                      AnyRankedTensor:$ms, AnyRankedTensor:$pre,
                      AnyRankedTensor:$post_next, AnyRankedTensor:$logits,
                      AnyRankedTensor:$P_next, AnyRankedTensor:$y);
  let assemblyFormat = [{
    custom<Layout>($layout) $f `,` $post `,` $x `,` $P (`bias` $bias^)?
    `next` $phi `,` $alpha `,` $beta (`weight` $weight^)?
    `sinkhorn` custom<SinkhornMode>($mode) attr-dict `:` functional-type(operands, results)
  }];
}

def Mhc_PostPreGradOp : Mhc_KernelOp<"post_pre_grad",
    [AttrSizedOperandSegments, AttrSizedResultSegments]> {
  let summary = "gradient of mhc.post_pre: the layer seam's backward, x's gradient summed in-kernel";
  let description = !strconcat([{
    From x_next's gradient from its other users `gx_next` (the next seam's
    residual path) and the upstream `gy`, `gpost_next`, `gP_next`, exactly
    the five gradient ops it replaces, with no n-stream add left:

    ```
    gpre, g1                 = aggregate_grad(gy, x_next, pre, acc = gx_next)
    glogits                  = sinkhorn_grad(gP_next, logits)
    gh, gms, galpha, gbeta   = scale_grad(gpre, gpost_next, glogits, h, ms, alpha, beta)
    g, gphi, gweight         = project_grad(gh, gms, x_next, phi, weight, acc = g1)
    gf, gpost, gx, gP, gbias = expand_combine_grad(g, f, post, x, P, bias)
    ```

    so per token `g = gx_next + pre gy + (gh . phi) * w + (2/K) gms x_next`
    is x_next's whole gradient, `gx = P g` and `gf = sum_j post[j] g[j]`.
    Sums over tokens (`gbias`, `gphi`, `gweight`, `galpha`, `gbeta`) are
    deterministic fixed-order reductions.

    Operands (docs/design/seam.md): `gx_next` (x's type), `gy` `[M, C]`
    (x's dtype), `gpost_next` `[M, n]`, `gP_next` `[M, n, n]` (f32); layer
    l's `f`, `post`, `x`, `P` and optional `bias` as in `mhc.post_pre`; then,
    after `next`, the saved `x_next` (x's type), `h`, `ms`, `pre`, `logits`
    (the forward's results) and layer l+1's `phi`, `alpha`, `beta` and
    optional `weight`, one parameter element type for all. Results: `gx`
    (x's type), `gf` (f's), `gpost` `[M, n]` and `gP` `[M, n, n]` f32,
    `gbias` (bias's type) exactly when `bias` is given, `gphi`, `galpha`,
    `gbeta` (their parameters' types) and `gweight` exactly when `weight`
    is given. Attributes as in `mhc.post_pre`.
  }], ScaleAttrDoc, SinkhornAttrDoc, [{

    ```mlir
    %gx, %gf, %gpost, %gP, %gphi, %galpha, %gbeta =
        mhc.post_pre_grad nc %gx1, %gy, %gpost1, %gP1, %f, %post, %x, %P
        next %x1, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
        : (tensor<?x4x2048xbf16>, tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>,
           tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x4x2048xbf16>, tensor<?x4x4xf32>,
           tensor<?x4x2048xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>,
           tensor<?x4x4xf32>, tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>)
        -> (tensor<?x4x2048xbf16>, tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>,
            tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>)
    ```
  }]);
  let arguments = !con((ins AnyRankedTensor:$gx_next, AnyRankedTensor:$gy,
                            AnyRankedTensor:$gpost_next,
                            AnyRankedTensor:$gP_next,
                            AnyRankedTensor:$f, AnyRankedTensor:$post,
                            AnyRankedTensor:$x, AnyRankedTensor:$P,
                            Optional<AnyRankedTensor>:$bias,
                            AnyRankedTensor:$x_next, AnyRankedTensor:$h,
                            AnyRankedTensor:$ms, AnyRankedTensor:$pre,
                            AnyRankedTensor:$logits,
                            AnyRankedTensor:$phi, AnyRankedTensor:$alpha,
                            AnyRankedTensor:$beta,
                            Optional<AnyRankedTensor>:$weight),
                       StreamAttrs, LayoutAttrs, ProjectAttrs, ScaleAttrs,
                       SinkhornAttrs);
  let results = (outs AnyRankedTensor:$gx, AnyRankedTensor:$gf,
                      AnyRankedTensor:$gpost, AnyRankedTensor:$gP,
                      Optional<AnyRankedTensor>:$gbias,
                      AnyRankedTensor:$gphi, AnyRankedTensor:$galpha,
                      AnyRankedTensor:$gbeta,
                      Optional<AnyRankedTensor>:$gweight);
  let assemblyFormat = [{
    custom<Layout>($layout) $gx_next `,` $gy `,` $gpost_next `,` $gP_next `,`
    $f `,` $post `,` $x `,` $P (`bias` $bias^)?
    `next` $x_next `,` $h `,` $ms `,` $pre `,` $logits `,` $phi `,` $alpha `,` $beta (`weight` $weight^)?
    `sinkhorn` custom<SinkhornMode>($mode) attr-dict `:` `(` type(operands) `)` `->`
    custom<SeamGradResultTypes>(ref($bias), ref($weight), type($gx), type($gf),
                                type($gpost), type($gP), type($gbias), type($gphi),
                                type($galpha), type($gbeta), type($gweight))
  }];
}

//===----------------------------------------------------------------------===//
// Layer-level ops: one layer's residual path around an opaque block.
//===----------------------------------------------------------------------===//

def Mhc_LayerOp : Mhc_Op<"layer", [
    RecursiveMemoryEffects, AttrSizedOperandSegments, SingleBlock,
    Mhc_SignatureVerified, InferTypeOpAdaptorWithIsCompatible]> {
  let summary = "one mHC layer: pre(x), the block, then post";
  let description = !strconcat([{
    The whole residual path of one transformer layer with mHC:

    ```
    (h, ms)              = project(x, phi, weight)
    (pre, post, logits)  = scale(h, ms, alpha, beta)
    P                    = sinkhorn(logits)
    y                    = aggregate(x, pre)
    f                    = block(y)                 // the region
    x_next               = expand_combine(f, post, x, P, bias)
    ```

    The region is the block (attention or MLP): it takes `y` `[M, C]` (x's
    dtype) as its one argument and yields `f` of the same type with
    `mhc.yield`. Its contents are opaque to mhc: usually a `func.call`.
    `mhc-expand-layers` rewrites the layer into the five ops above, which
    later passes fuse and specialise.

    Attributes: those of `mhc.project`, `mhc.scale` and `mhc.sinkhorn`.
  }], ScaleAttrDoc, SinkhornAttrDoc, [{

    ```mlir
    %x1 = mhc.layer nc %x0, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
        : (tensor<?x4x2048xbf16>, tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>)
        -> tensor<?x4x2048xbf16> {
    ^bb0(%y: tensor<?x2048xbf16>):
      %f = func.call @attention(%y) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
      mhc.yield %f : tensor<?x2048xbf16>
    }
    ```
  }]);
  let arguments = !con((ins AnyRankedTensor:$x, AnyRankedTensor:$phi,
                            AnyRankedTensor:$alpha, AnyRankedTensor:$beta,
                            Optional<AnyRankedTensor>:$weight,
                            Optional<AnyRankedTensor>:$bias),
                       StreamAttrs, LayoutAttrs, ProjectAttrs, ScaleAttrs,
                       SinkhornAttrs);
  let results = (outs AnyRankedTensor:$x_next);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    custom<Layout>($layout) $x `,` $phi `,` $alpha `,` $beta (`weight` $weight^)? (`bias` $bias^)?
    `sinkhorn` custom<SinkhornMode>($mode) attr-dict `:` functional-type(operands, results) $body
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::LogicalResult verifySignature();
  }];
}

def Mhc_YieldOp : Mhc_Op<"yield", [Pure, Terminator, HasParent<"LayerOp">]> {
  let summary = "the block output f of an mhc.layer";
  let description = [{
    Terminates the body of `mhc.layer`, returning the block's output `f`
    (`[M, C]`, the activation dtype) to the layer's post step.
  }];
  let arguments = (ins AnyRankedTensor:$f);
  let assemblyFormat = "$f attr-dict `:` type($f)";
}

#endif // MHC_OPS_TD
