// The backward of one mHC layer around an opaque block, written with the
// gradient ops (n = 4, C = 2048, bf16, Transformer Engine's conventions:
// layout cn, log-domain Sinkhorn, norm_eps = FLT_EPSILON, pre_eps = 0).
// Forward values (h, ms, pre, post, logits, P, f) are inputs, as an autograd
// engine would have saved them; gf is the block's input gradient gy after the
// block's own backward, here the opaque @block_backward.
//
// x receives three gradient contributions (project, aggregate,
// expand_combine); they are summed into one gx (MATH.md, Backward).

func.func private @block_backward(%gf: tensor<?x2048xbf16>) -> tensor<?x2048xbf16>

func.func @backward(%gout: tensor<?x2048x4xbf16>, %x: tensor<?x2048x4xbf16>,
                    %f: tensor<?x2048xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>,
                    %pre: tensor<?x4xf32>, %post: tensor<?x4xf32>,
                    %logits: tensor<?x4x4xf32>, %P: tensor<?x4x4xf32>,
                    %phi: tensor<24x8192xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>)
    -> (tensor<?x2048x4xbf16>, tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>) {
  // post: out = P^T x + post (f)
  %gf, %gpost, %gx_res, %gP = mhc.expand_combine_grad cn %gout, %f, %post, %x, %P {n = 4 : i64}
      : (tensor<?x2048x4xbf16>, tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>)
      -> (tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>)
  // the block
  %gy = func.call @block_backward(%gf) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
  // pre: y = pre . x
  %gx_agg, %gpre = mhc.aggregate_grad cn %gy, %x, %pre {n = 4 : i64}
      : (tensor<?x2048xbf16>, tensor<?x2048x4xbf16>, tensor<?x4xf32>) -> (tensor<?x2048x4xbf16>, tensor<?x4xf32>)
  %glogits = mhc.sinkhorn_grad log %gP, %logits {n = 4 : i64}
      : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %gh, %gms, %galpha, %gbeta = mhc.scale_grad %gpre, %gpost, %glogits, %h, %ms, %alpha, %beta
      {n = 4 : i64, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32}
      : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
  %gx_proj, %gphi = mhc.project_grad cn %gh, %gms, %x, %phi {n = 4 : i64}
      : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x2048x4xbf16>, tensor<24x8192xf32>)
      -> (tensor<?x2048x4xbf16>, tensor<24x8192xf32>)
  %s = arith.addf %gx_res, %gx_agg : tensor<?x2048x4xbf16>
  %gx = arith.addf %s, %gx_proj : tensor<?x2048x4xbf16>
  return %gx, %gphi, %galpha, %gbeta : tensor<?x2048x4xbf16>, tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>
}
