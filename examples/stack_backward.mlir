// The backward of the four mHC layers of a stack (the backward companion of
// examples/layer_backward.mlir, with the layers of examples/transformer_n4.mlir:
// attention, MLP, attention, MLP), written with the gradient ops: n = 4,
// C = 2048, bf16, Transformer Engine's conventions (layout cn, log-domain
// Sinkhorn, norm_eps = FLT_EPSILON, pre_eps = 0). Layer l maps x<l> to
// x<l+1>; its forward values are inputs, as an autograd engine would have
// saved them, and gout is the gradient of x4, the stack's output.
//
// Each layer is the backward of layer_backward.mlir: x<l> receives three
// gradient contributions (layer l's project, aggregate and expand_combine),
// summed into gx<l>, which is the incoming gradient of layer l-1's
// expand_combine.
//
// mhc-fuse-layers turns it into the last layer's expand_combine_grad, three
// mhc.post_pre_grad (one per seam: layer l's post step and layer l+1's pre
// step) and the first layer's pre-step gradients, every x gradient summed
// in-kernel through acc: no arith.addf is left.

func.func private @attention_backward(%gf: tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
func.func private @mlp_backward(%gf: tensor<?x2048xbf16>) -> tensor<?x2048xbf16>

func.func @backward(%gout: tensor<?x2048x4xbf16>,
                    %x0: tensor<?x2048x4xbf16>, %f0: tensor<?x2048xbf16>, %h0: tensor<?x24xf32>, %ms0: tensor<?xf32>, %pre0: tensor<?x4xf32>,
                    %post0: tensor<?x4xf32>, %logits0: tensor<?x4x4xf32>, %P0: tensor<?x4x4xf32>, %phi0: tensor<24x8192xf32>, %alpha0: tensor<3xf32>, %beta0: tensor<24xf32>,
                    %x1: tensor<?x2048x4xbf16>, %f1: tensor<?x2048xbf16>, %h1: tensor<?x24xf32>, %ms1: tensor<?xf32>, %pre1: tensor<?x4xf32>,
                    %post1: tensor<?x4xf32>, %logits1: tensor<?x4x4xf32>, %P1: tensor<?x4x4xf32>, %phi1: tensor<24x8192xf32>, %alpha1: tensor<3xf32>, %beta1: tensor<24xf32>,
                    %x2: tensor<?x2048x4xbf16>, %f2: tensor<?x2048xbf16>, %h2: tensor<?x24xf32>, %ms2: tensor<?xf32>, %pre2: tensor<?x4xf32>,
                    %post2: tensor<?x4xf32>, %logits2: tensor<?x4x4xf32>, %P2: tensor<?x4x4xf32>, %phi2: tensor<24x8192xf32>, %alpha2: tensor<3xf32>, %beta2: tensor<24xf32>,
                    %x3: tensor<?x2048x4xbf16>, %f3: tensor<?x2048xbf16>, %h3: tensor<?x24xf32>, %ms3: tensor<?xf32>, %pre3: tensor<?x4xf32>,
                    %post3: tensor<?x4xf32>, %logits3: tensor<?x4x4xf32>, %P3: tensor<?x4x4xf32>, %phi3: tensor<24x8192xf32>, %alpha3: tensor<3xf32>, %beta3: tensor<24xf32>)
    -> (tensor<?x2048x4xbf16>,
        tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>,
        tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>,
        tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>,
        tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>) {
  // Layer 3 (mlp): post step, the block, pre step; x3's three contributions summed.
  %gf3, %gpost3, %gx3_res, %gP3 = mhc.expand_combine_grad cn %gout, %f3, %post3, %x3, %P3 {n = 4 : i64}
      : (tensor<?x2048x4xbf16>, tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>) -> (tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>)
  %gy3 = func.call @mlp_backward(%gf3) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
  %gx3_agg, %gpre3 = mhc.aggregate_grad cn %gy3, %x3, %pre3 {n = 4 : i64}
      : (tensor<?x2048xbf16>, tensor<?x2048x4xbf16>, tensor<?x4xf32>) -> (tensor<?x2048x4xbf16>, tensor<?x4xf32>)
  %glogits3 = mhc.sinkhorn_grad log %gP3, %logits3 {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %gh3, %gms3, %galpha3, %gbeta3 = mhc.scale_grad %gpre3, %gpost3, %glogits3, %h3, %ms3, %alpha3, %beta3
      {n = 4 : i64, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32}
      : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
  %gx3_proj, %gphi3 = mhc.project_grad cn %gh3, %gms3, %x3, %phi3 {n = 4 : i64}
      : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x2048x4xbf16>, tensor<24x8192xf32>) -> (tensor<?x2048x4xbf16>, tensor<24x8192xf32>)
  %s3 = arith.addf %gx3_res, %gx3_agg : tensor<?x2048x4xbf16>
  %gx3 = arith.addf %s3, %gx3_proj : tensor<?x2048x4xbf16>
  // Layer 2 (attention): post step, the block, pre step; x2's three contributions summed.
  %gf2, %gpost2, %gx2_res, %gP2 = mhc.expand_combine_grad cn %gx3, %f2, %post2, %x2, %P2 {n = 4 : i64}
      : (tensor<?x2048x4xbf16>, tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>) -> (tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>)
  %gy2 = func.call @attention_backward(%gf2) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
  %gx2_agg, %gpre2 = mhc.aggregate_grad cn %gy2, %x2, %pre2 {n = 4 : i64}
      : (tensor<?x2048xbf16>, tensor<?x2048x4xbf16>, tensor<?x4xf32>) -> (tensor<?x2048x4xbf16>, tensor<?x4xf32>)
  %glogits2 = mhc.sinkhorn_grad log %gP2, %logits2 {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %gh2, %gms2, %galpha2, %gbeta2 = mhc.scale_grad %gpre2, %gpost2, %glogits2, %h2, %ms2, %alpha2, %beta2
      {n = 4 : i64, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32}
      : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
  %gx2_proj, %gphi2 = mhc.project_grad cn %gh2, %gms2, %x2, %phi2 {n = 4 : i64}
      : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x2048x4xbf16>, tensor<24x8192xf32>) -> (tensor<?x2048x4xbf16>, tensor<24x8192xf32>)
  %s2 = arith.addf %gx2_res, %gx2_agg : tensor<?x2048x4xbf16>
  %gx2 = arith.addf %s2, %gx2_proj : tensor<?x2048x4xbf16>
  // Layer 1 (mlp): post step, the block, pre step; x1's three contributions summed.
  %gf1, %gpost1, %gx1_res, %gP1 = mhc.expand_combine_grad cn %gx2, %f1, %post1, %x1, %P1 {n = 4 : i64}
      : (tensor<?x2048x4xbf16>, tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>) -> (tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>)
  %gy1 = func.call @mlp_backward(%gf1) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
  %gx1_agg, %gpre1 = mhc.aggregate_grad cn %gy1, %x1, %pre1 {n = 4 : i64}
      : (tensor<?x2048xbf16>, tensor<?x2048x4xbf16>, tensor<?x4xf32>) -> (tensor<?x2048x4xbf16>, tensor<?x4xf32>)
  %glogits1 = mhc.sinkhorn_grad log %gP1, %logits1 {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %gh1, %gms1, %galpha1, %gbeta1 = mhc.scale_grad %gpre1, %gpost1, %glogits1, %h1, %ms1, %alpha1, %beta1
      {n = 4 : i64, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32}
      : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
  %gx1_proj, %gphi1 = mhc.project_grad cn %gh1, %gms1, %x1, %phi1 {n = 4 : i64}
      : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x2048x4xbf16>, tensor<24x8192xf32>) -> (tensor<?x2048x4xbf16>, tensor<24x8192xf32>)
  %s1 = arith.addf %gx1_res, %gx1_agg : tensor<?x2048x4xbf16>
  %gx1 = arith.addf %s1, %gx1_proj : tensor<?x2048x4xbf16>
  // Layer 0 (attention): post step, the block, pre step; x0's three contributions summed.
  %gf0, %gpost0, %gx0_res, %gP0 = mhc.expand_combine_grad cn %gx1, %f0, %post0, %x0, %P0 {n = 4 : i64}
      : (tensor<?x2048x4xbf16>, tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>) -> (tensor<?x2048xbf16>, tensor<?x4xf32>, tensor<?x2048x4xbf16>, tensor<?x4x4xf32>)
  %gy0 = func.call @attention_backward(%gf0) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
  %gx0_agg, %gpre0 = mhc.aggregate_grad cn %gy0, %x0, %pre0 {n = 4 : i64}
      : (tensor<?x2048xbf16>, tensor<?x2048x4xbf16>, tensor<?x4xf32>) -> (tensor<?x2048x4xbf16>, tensor<?x4xf32>)
  %glogits0 = mhc.sinkhorn_grad log %gP0, %logits0 {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %gh0, %gms0, %galpha0, %gbeta0 = mhc.scale_grad %gpre0, %gpost0, %glogits0, %h0, %ms0, %alpha0, %beta0
      {n = 4 : i64, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32}
      : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
  %gx0_proj, %gphi0 = mhc.project_grad cn %gh0, %gms0, %x0, %phi0 {n = 4 : i64}
      : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x2048x4xbf16>, tensor<24x8192xf32>) -> (tensor<?x2048x4xbf16>, tensor<24x8192xf32>)
  %s0 = arith.addf %gx0_res, %gx0_agg : tensor<?x2048x4xbf16>
  %gx0 = arith.addf %s0, %gx0_proj : tensor<?x2048x4xbf16>
  return %gx0, %gphi0, %galpha0, %gbeta0, %gphi1, %galpha1, %gbeta1, %gphi2, %galpha2, %gbeta2, %gphi3, %galpha3, %gbeta3
      : tensor<?x2048x4xbf16>,
        tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>,
        tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>,
        tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>,
        tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>
}
