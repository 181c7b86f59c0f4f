// RUN: mhc-opt %s -split-input-file -mhc-fuse-pre | FileCheck %s
// RUN: mhc-opt %s -split-input-file -mhc-expand-layers -canonicalize -cse -mhc-fuse-pre -mhc-specialize=arch=sm_90a | FileCheck %s --check-prefix=PIPE
// RUN: mhc-opt %s -split-input-file -mhc-fuse-pre -verify-diagnostics -o /dev/null

// One layer's pre step becomes one mhc.pre with the four ops' attributes;
// every use reads its results.
// CHECK-LABEL: func @chain
// CHECK-SAME: (%[[X:.*]]: tensor<?x4x64xbf16>, %[[PHI:.*]]: tensor<24x256xf32>, %[[A:.*]]: tensor<3xf32>, %[[B:.*]]: tensor<24xf32>)
// CHECK-NEXT: %[[H:[^ ,]+]], %[[MS:[^ ,]+]], %[[PRE:[^ ,]+]], %[[POST:[^ ,]+]], %[[L:[^ ,]+]], %[[P:[^ ,]+]], %[[Y:[^ ,]+]] = mhc.pre nc %[[X]], %[[PHI]], %[[A]], %[[B]] sinkhorn softmax_eps {eps = 9.99999974E-6 : f32, iters = 10 : i64, n = 4 : i64, norm_eps = 1.1920929E-7 : f32, post_mult = 1.000000e+00 : f32, pre_eps = 0.000000e+00 : f32, tf32} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
// CHECK-NEXT: %[[F:.*]] = call @block(%[[Y]])
// CHECK-NEXT: %[[OUT:.*]] = mhc.expand_combine nc %[[F]], %[[POST]], %[[X]], %[[P]] {n = 4 : i64}
// CHECK-NEXT: return %[[OUT]], %[[H]], %[[MS]], %[[L]] :
func.func private @block(tensor<?x64xbf16>) -> tensor<?x64xbf16>
func.func @chain(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>)
    -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64, tf32} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32, post_mult = 1.0 : f32} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %P = mhc.sinkhorn softmax_eps %l {n = 4 : i64, iters = 10 : i64, eps = 1.0e-5 : f32} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  %f = func.call @block(%y) : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
  %out = mhc.expand_combine nc %f, %post, %x, %P {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> tensor<?x4x64xbf16>
  return %out, %h, %ms, %l : tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x4xf32>
}

// -----

// With the RMSNorm weight, bf16 parameters, layout cn, static M: the
// result types are the replaced ops'.
// CHECK-LABEL: func @chain_weight
// CHECK-SAME: (%[[X:.*]]: tensor<8x16x2xf16>, %[[PHI:.*]]: tensor<8x32xbf16>, %[[A:.*]]: tensor<3xbf16>, %[[B:.*]]: tensor<8xbf16>, %[[W:.*]]: tensor<32xbf16>)
// CHECK-NEXT: %{{[^ ,]+}}, %{{[^ ,]+}}, %{{[^ ,]+}}, %[[POST:[^ ,]+]], %{{[^ ,]+}}, %[[P:[^ ,]+]], %[[Y:[^ ,]+]] = mhc.pre cn %[[X]], %[[PHI]], %[[A]], %[[B]] weight %[[W]] sinkhorn log {n = 2 : i64} : (tensor<8x16x2xf16>, tensor<8x32xbf16>, tensor<3xbf16>, tensor<8xbf16>, tensor<32xbf16>) -> (tensor<8x8xf32>, tensor<8xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2x2xf32>, tensor<8x2x2xf32>, tensor<8x16xf16>)
// CHECK-NEXT: %[[OUT:.*]] = mhc.expand_combine cn %[[Y]], %[[POST]], %[[X]], %[[P]] {n = 2 : i64}
// CHECK-NEXT: return %[[OUT]]
func.func @chain_weight(%x: tensor<8x16x2xf16>, %phi: tensor<8x32xbf16>, %a: tensor<3xbf16>, %b: tensor<8xbf16>, %w: tensor<32xbf16>) -> tensor<8x16x2xf16> {
  %h, %ms = mhc.project cn %x, %phi weight %w {n = 2 : i64} : (tensor<8x16x2xf16>, tensor<8x32xbf16>, tensor<32xbf16>) -> (tensor<8x8xf32>, tensor<8xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 2 : i64} : (tensor<8x8xf32>, tensor<8xf32>, tensor<3xbf16>, tensor<8xbf16>) -> (tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2x2xf32>)
  %P = mhc.sinkhorn log %l {n = 2 : i64} : (tensor<8x2x2xf32>) -> tensor<8x2x2xf32>
  %y = mhc.aggregate cn %x, %pre {n = 2 : i64} : (tensor<8x16x2xf16>, tensor<8x2xf32>) -> tensor<8x16xf16>
  %out = mhc.expand_combine cn %y, %post, %x, %P {n = 2 : i64} : (tensor<8x16xf16>, tensor<8x2xf32>, tensor<8x16x2xf16>, tensor<8x2x2xf32>) -> tensor<8x16x2xf16>
  return %out : tensor<8x16x2xf16>
}

// -----

// Forward and backward in one function: the gradient ops read the fused
// intermediates. Of three sinkhorns on the logits, the one feeding the
// layer's expand_combine is fused (though another comes first), an identical
// one (explicit default iters) takes its P, and the different one stays on
// the fused logits.
// CHECK-LABEL: func @with_grads
// CHECK-SAME: (%[[X:.*]]: tensor<?x4x64xbf16>, %[[PHI:.*]]: tensor<24x256xf32>, %[[A:.*]]: tensor<3xf32>, %[[B:.*]]: tensor<24xf32>, %[[GOUT:.*]]: tensor<?x4x64xbf16>)
// CHECK-NEXT: %[[H:[^ ,]+]], %[[MS:[^ ,]+]], %[[PRE:[^ ,]+]], %[[POST:[^ ,]+]], %[[L:[^ ,]+]], %[[P:[^ ,]+]], %[[Y:[^ ,]+]] = mhc.pre nc %[[X]], %[[PHI]], %[[A]], %[[B]] sinkhorn log {n = 4 : i64} :
// CHECK-NEXT: %[[Q:.*]] = mhc.sinkhorn log %[[L]] {iters = 5 : i64, n = 4 : i64}
// CHECK-NEXT: %[[F:.*]] = call @block(%[[Y]])
// CHECK-NEXT: %[[OUT:.*]] = mhc.expand_combine nc %[[F]], %[[POST]], %[[X]], %[[P]] {n = 4 : i64}
// CHECK-NEXT: %[[GF:[^ ,]+]], %[[GPOST:[^ ,]+]], %[[GX1:[^ ,]+]], %[[GP:[^ ,]+]] = mhc.expand_combine_grad nc %[[GOUT]], %[[F]], %[[POST]], %[[X]], %[[P]] {n = 4 : i64}
// CHECK-NEXT: %[[GY:.*]] = call @block_backward(%[[GF]])
// CHECK-NEXT: %[[GX2:[^ ,]+]], %[[GPRE:[^ ,]+]] = mhc.aggregate_grad nc %[[GY]], %[[X]], %[[PRE]] {n = 4 : i64}
// CHECK-NEXT: %[[GL:.*]] = mhc.sinkhorn_grad log %[[GP]], %[[L]] {n = 4 : i64}
// CHECK-NEXT: %[[GH:[^ ,]+]], %[[GMS:[^ ,]+]], %[[GA:[^ ,]+]], %[[GB:[^ ,]+]] = mhc.scale_grad %[[GPRE]], %[[GPOST]], %[[GL]], %[[H]], %[[MS]], %[[A]], %[[B]] {n = 4 : i64}
// CHECK-NEXT: %[[GX3:[^ ,]+]], %[[GPHI:[^ ,]+]] = mhc.project_grad nc %[[GH]], %[[GMS]], %[[X]], %[[PHI]] {n = 4 : i64}
// CHECK-NEXT: return %[[OUT]], %[[GX1]], %[[GX2]], %[[GX3]], %[[GPHI]], %[[GA]], %[[GB]], %[[Q]], %[[P]] :
func.func private @block(tensor<?x64xbf16>) -> tensor<?x64xbf16>
func.func private @block_backward(tensor<?x64xbf16>) -> tensor<?x64xbf16>
func.func @with_grads(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>, %gout: tensor<?x4x64xbf16>)
    -> (tensor<?x4x64xbf16>, tensor<?x4x64xbf16>, tensor<?x4x64xbf16>, tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %Q = mhc.sinkhorn log %l {n = 4 : i64, iters = 5 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %P2 = mhc.sinkhorn log %l {n = 4 : i64, iters = 20 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  %f = func.call @block(%y) : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
  %out = mhc.expand_combine nc %f, %post, %x, %P {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> tensor<?x4x64xbf16>
  // The backward, as in examples/layer_backward.mlir.
  %gf, %gpost, %gx1, %gP = mhc.expand_combine_grad nc %gout, %f, %post, %x, %P {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>)
      -> (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>)
  %gy = func.call @block_backward(%gf) : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
  %gx2, %gpre = mhc.aggregate_grad nc %gy, %x, %pre {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4x64xbf16>, tensor<?x4xf32>) -> (tensor<?x4x64xbf16>, tensor<?x4xf32>)
  %gl = mhc.sinkhorn_grad log %gP, %l {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %gh, %gms, %ga, %gb = mhc.scale_grad %gpre, %gpost, %gl, %h, %ms, %a, %b {n = 4 : i64}
      : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
  %gx3, %gphi = mhc.project_grad nc %gh, %gms, %x, %phi {n = 4 : i64}
      : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x4x64xbf16>, tensor<24x256xf32>)
  return %out, %gx1, %gx2, %gx3, %gphi, %ga, %gb, %Q, %P2
      : tensor<?x4x64xbf16>, tensor<?x4x64xbf16>, tensor<?x4x64xbf16>, tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>
}

// -----

// Not fused: the aggregate reads other streams than the projection.
// CHECK-LABEL: func @other_x
// CHECK-NOT: mhc.pre
// CHECK: mhc.project nc %arg0
// CHECK: mhc.scale
// CHECK: mhc.sinkhorn
// CHECK: mhc.aggregate nc %arg1
func.func @other_x(%x: tensor<?x4x64xbf16>, %x2: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>)
    -> (tensor<?x64xbf16>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x2, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return %y, %P : tensor<?x64xbf16>, tensor<?x4x4xf32>
}

// -----

// Not fused: phi is f32 but beta bf16 (one parameter dtype per kernel).
// CHECK-LABEL: func @mixed_params
// CHECK-NOT: mhc.pre
// CHECK: mhc.project
// CHECK: mhc.aggregate
func.func @mixed_params(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xbf16>)
    -> (tensor<?x64xbf16>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xbf16>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return %y, %P : tensor<?x64xbf16>, tensor<?x4x4xf32>
}

// -----

// Not fused: the weight's dtype differs from phi's.
// CHECK-LABEL: func @mixed_weight
// CHECK-NOT: mhc.pre
// CHECK: mhc.project
func.func @mixed_weight(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>, %w: tensor<256xbf16>)
    -> (tensor<?x64xbf16>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi weight %w {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<256xbf16>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return %y, %P : tensor<?x64xbf16>, tensor<?x4x4xf32>
}

// -----

// Not fused: no sinkhorn reads the logits (only a sinkhorn_grad).
// CHECK-LABEL: func @no_sinkhorn
// CHECK-NOT: mhc.pre
// CHECK: mhc.project
// CHECK: mhc.sinkhorn_grad
// CHECK: mhc.aggregate
func.func @no_sinkhorn(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>, %gP: tensor<?x4x4xf32>)
    -> (tensor<?x64xbf16>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %gl = mhc.sinkhorn_grad log %gP, %l {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return %y, %gl : tensor<?x64xbf16>, tensor<?x4x4xf32>
}

// -----

// Not fused: x [M, 4, 4] fits both layouts, and project and aggregate read
// it in different ones.
// CHECK-LABEL: func @other_layout
// CHECK-NOT: mhc.pre
// CHECK: mhc.project nc
// CHECK: mhc.aggregate cn
func.func @other_layout(%x: tensor<?x4x4xf32>, %phi: tensor<24x16xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>)
    -> (tensor<?x4xf32>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<24x16xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate cn %x, %pre {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %y, %P : tensor<?x4xf32>, tensor<?x4x4xf32>
}

// -----

// Not fused: alpha is defined after the project, where mhc.pre would go.
// CHECK-LABEL: func @late_alpha
// CHECK-NOT: mhc.pre
// CHECK: mhc.project
// CHECK: call @make_alpha
// CHECK: mhc.scale
func.func private @make_alpha() -> tensor<3xf32>
func.func @late_alpha(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %b: tensor<24xf32>)
    -> (tensor<?x64xbf16>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %a = func.call @make_alpha() : () -> tensor<3xf32>
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return %y, %P : tensor<?x64xbf16>, tensor<?x4x4xf32>
}

// -----

// Not fused: the aggregate is in a nested region, not the project's block.
// CHECK-LABEL: func @other_block
// CHECK-NOT: mhc.pre
// CHECK: mhc.project
// CHECK: scf.execute_region
// CHECK: mhc.aggregate
func.func @other_block(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>)
    -> (tensor<?x64xbf16>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = scf.execute_region -> tensor<?x64xbf16> {
    %y0 = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
    scf.yield %y0 : tensor<?x64xbf16>
  }
  return %y, %P : tensor<?x64xbf16>, tensor<?x4x4xf32>
}

// -----

// Result types are the replaced ops': a static M that refines a dynamic x
// stays on each result.
// CHECK-LABEL: func @refined_tokens
// CHECK-NEXT: mhc.pre nc {{.*}} -> (tensor<8x24xf32>, tensor<8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4x4xf32>, tensor<?x4x4xf32>, tensor<8x64xbf16>)
func.func @refined_tokens(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>)
    -> (tensor<8x64xbf16>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<8x24xf32>, tensor<8xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<8x24xf32>, tensor<8xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4x4xf32>)
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<8x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<8x4xf32>) -> tensor<8x64xbf16>
  return %y, %P : tensor<8x64xbf16>, tensor<?x4x4xf32>
}

// -----

// Not fused: the ops refine a dynamic M to different counts (8 and 16),
// which one op's results cannot.
// CHECK-LABEL: func @conflicting_tokens
// CHECK-NOT: mhc.pre
// CHECK: mhc.project
func.func @conflicting_tokens(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>)
    -> (tensor<16x64xbf16>, tensor<?x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<8x24xf32>, tensor<8xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<8x24xf32>, tensor<8xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<16x64xbf16>
  return %y, %P : tensor<16x64xbf16>, tensor<?x4x4xf32>
}

// -----

// The pipeline of scripts/example.sh: a layer expands, its pre step fuses,
// and mhc.pre gets the kernel spec of all four ops.
// CHECK-LABEL: func @pipeline
// CHECK: mhc.layer
// PIPE-LABEL: func @pipeline
// PIPE-NOT: mhc.project
// PIPE: mhc.pre nc %arg0, %arg1, %arg2, %arg3 weight %arg4 sinkhorn softmax_eps {eps = 9.99999974E-6 : f32, iters = 10 : i64, mhc.spec = #mhc.spec<"pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=1;weight=1;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=softmax_eps;iters=10;eps=9.99999975e-06;arch=sm_90a">, mhc.spec_one_launch = #mhc.spec<"pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=1;weight=1;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=softmax_eps;iters=10;eps=9.99999975e-06;coop=1;arch=sm_90a">, n = 4 : i64, norm_eps = 1.1920929E-7 : f32, pre_eps = 0.000000e+00 : f32, tf32}
// PIPE-NEXT: call @block
// PIPE-NEXT: mhc.expand_combine nc {{.*}} bias %arg5 {mhc.spec = #mhc.spec<"expand_combine.fwd;n=4;act=bf16;param=bf16;layout=nc;C=64;bias=1;arch=sm_90a">, n = 4 : i64}
// PIPE-NEXT: return
func.func private @block(tensor<?x64xbf16>) -> tensor<?x64xbf16>
func.func @pipeline(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>,
                    %w: tensor<256xf32>, %bias: tensor<64xbf16>) -> tensor<?x4x64xbf16> {
  %x1 = mhc.layer nc %x, %phi, %a, %b weight %w bias %bias sinkhorn softmax_eps
      {n = 4 : i64, tf32, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32, iters = 10 : i64, eps = 1.0e-5 : f32}
      : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>, tensor<64xbf16>) -> tensor<?x4x64xbf16> {
  ^bb0(%y: tensor<?x64xbf16>):
    %f = func.call @block(%y) : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
    mhc.yield %f : tensor<?x64xbf16>
  }
  return %x1 : tensor<?x4x64xbf16>
}

// -----

// Whether a chain fuses at its token count is the runtime's rule
// (mhc::preStepFuses): with n <= 4 at any M.
// CHECK-LABEL: func @n4_many_tokens
// CHECK-NEXT: mhc.pre nc
// CHECK-NOT: mhc.aggregate
func.func @n4_many_tokens(%x: tensor<65536x4x8xf32>, %phi: tensor<24x32xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>)
    -> (tensor<65536x8xf32>, tensor<65536x4x4xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<65536x4x8xf32>, tensor<24x32xf32>) -> (tensor<65536x24xf32>, tensor<65536xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<65536x24xf32>, tensor<65536xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<65536x4xf32>, tensor<65536x4xf32>, tensor<65536x4x4xf32>)
  %P = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<65536x4x4xf32>) -> tensor<65536x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<65536x4x8xf32>, tensor<65536x4xf32>) -> tensor<65536x8xf32>
  return %y, %P : tensor<65536x8xf32>, tensor<65536x4x4xf32>
}

// -----

// With n > 4, up to 512 tokens.
// CHECK-LABEL: func @n6_512_tokens
// CHECK-NEXT: mhc.pre nc
// CHECK-NOT: mhc.aggregate
func.func @n6_512_tokens(%x: tensor<512x6x8xf32>, %phi: tensor<48x48xf32>, %a: tensor<3xf32>, %b: tensor<48xf32>)
    -> (tensor<512x8xf32>, tensor<512x6x6xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 6 : i64} : (tensor<512x6x8xf32>, tensor<48x48xf32>) -> (tensor<512x48xf32>, tensor<512xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 6 : i64} : (tensor<512x48xf32>, tensor<512xf32>, tensor<3xf32>, tensor<48xf32>) -> (tensor<512x6xf32>, tensor<512x6xf32>, tensor<512x6x6xf32>)
  %P = mhc.sinkhorn log %l {n = 6 : i64} : (tensor<512x6x6xf32>) -> tensor<512x6x6xf32>
  %y = mhc.aggregate nc %x, %pre {n = 6 : i64} : (tensor<512x6x8xf32>, tensor<512x6xf32>) -> tensor<512x8xf32>
  return %y, %P : tensor<512x8xf32>, tensor<512x6x6xf32>
}

// -----

// One token more, and the four ops stay (the runtime runs them too).
// CHECK-LABEL: func @n6_513_tokens
// CHECK-NOT: mhc.pre
// CHECK: mhc.aggregate
func.func @n6_513_tokens(%x: tensor<513x6x8xf32>, %phi: tensor<48x48xf32>, %a: tensor<3xf32>, %b: tensor<48xf32>)
    -> (tensor<513x8xf32>, tensor<513x6x6xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 6 : i64} : (tensor<513x6x8xf32>, tensor<48x48xf32>) -> (tensor<513x48xf32>, tensor<513xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 6 : i64} : (tensor<513x48xf32>, tensor<513xf32>, tensor<3xf32>, tensor<48xf32>) -> (tensor<513x6xf32>, tensor<513x6xf32>, tensor<513x6x6xf32>)
  %P = mhc.sinkhorn log %l {n = 6 : i64} : (tensor<513x6x6xf32>) -> tensor<513x6x6xf32>
  // expected-remark @below {{pre step not fused: M = 513 and n = 6 > 4, where the fused kernel is slower than the four ops above 512 tokens}}
  %y = mhc.aggregate nc %x, %pre {n = 6 : i64} : (tensor<513x6x8xf32>, tensor<513x6xf32>) -> tensor<513x8xf32>
  return %y, %P : tensor<513x8xf32>, tensor<513x6x6xf32>
}

// -----

// With n > 4 and a dynamic token count the rule cannot be decided here:
// the four ops stay, as they would for any M > 512.
// CHECK-LABEL: func @n6_dynamic_tokens
// CHECK-NOT: mhc.pre
// CHECK: mhc.aggregate
func.func @n6_dynamic_tokens(%x: tensor<?x6x8xf32>, %phi: tensor<48x48xf32>, %a: tensor<3xf32>, %b: tensor<48xf32>)
    -> (tensor<?x8xf32>, tensor<?x6x6xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 6 : i64} : (tensor<?x6x8xf32>, tensor<48x48xf32>) -> (tensor<?x48xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 6 : i64} : (tensor<?x48xf32>, tensor<?xf32>, tensor<3xf32>, tensor<48xf32>) -> (tensor<?x6xf32>, tensor<?x6xf32>, tensor<?x6x6xf32>)
  %P = mhc.sinkhorn log %l {n = 6 : i64} : (tensor<?x6x6xf32>) -> tensor<?x6x6xf32>
  // expected-remark @below {{pre step not fused: the token count is dynamic and n = 6 > 4, where the fused kernel is slower than the four ops above 512 tokens}}
  %y = mhc.aggregate nc %x, %pre {n = 6 : i64} : (tensor<?x6x8xf32>, tensor<?x6xf32>) -> tensor<?x8xf32>
  return %y, %P : tensor<?x8xf32>, tensor<?x6x6xf32>
}
