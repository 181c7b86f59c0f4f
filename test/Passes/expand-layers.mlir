// RUN: mhc-opt %s -split-input-file -mhc-expand-layers | FileCheck %s

// CHECK-LABEL: func @one_layer
// CHECK-SAME: (%[[X:.*]]: tensor<?x4x64xbf16>, %[[PHI:.*]]: tensor<24x256xf32>, %[[A:.*]]: tensor<3xf32>, %[[B:.*]]: tensor<24xf32>, %[[W:.*]]: tensor<256xf32>, %[[BIAS:.*]]: tensor<64xbf16>)
// CHECK-NEXT: %[[H:.*]], %[[MS:.*]] = mhc.project nc %[[X]], %[[PHI]] weight %[[W]] {n = 4 : i64, tf32} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
// CHECK-NEXT: %[[PRE:.*]], %[[POST:.*]], %[[L:.*]] = mhc.scale %[[H]], %[[MS]], %[[A]], %[[B]] {n = 4 : i64, norm_eps = 1.1920929E-7 : f32, pre_eps = 0.000000e+00 : f32} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
// CHECK-NEXT: %[[P:.*]] = mhc.sinkhorn softmax_eps %[[L]] {eps = 9.99999974E-6 : f32, iters = 10 : i64, n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
// CHECK-NEXT: %[[Y:.*]] = mhc.aggregate nc %[[X]], %[[PRE]] {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
// CHECK-NEXT: %[[F:.*]] = call @block(%[[Y]]) : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
// CHECK-NEXT: %[[OUT:.*]] = mhc.expand_combine nc %[[F]], %[[POST]], %[[X]], %[[P]] bias %[[BIAS]] {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<64xbf16>) -> tensor<?x4x64xbf16>
// CHECK-NEXT: return %[[OUT]]
// CHECK-NOT: mhc.layer
func.func private @block(tensor<?x64xbf16>) -> tensor<?x64xbf16>
func.func @one_layer(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>,
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

// Two chained layers, layout cn, an identity block (the yield returns y) and
// a multi-op block: each block lands between its aggregate and expand_combine.
// CHECK-LABEL: func @two_layers
// CHECK: mhc.project cn %arg0
// CHECK: %[[Y1:.*]] = mhc.aggregate cn %arg0
// CHECK-NOT: call
// CHECK: %[[X1:.*]] = mhc.expand_combine cn %[[Y1]], %{{.*}}, %arg0
// CHECK: mhc.project cn %[[X1]]
// CHECK: mhc.sinkhorn log
// CHECK: %[[Y2:.*]] = mhc.aggregate cn %[[X1]]
// CHECK: %[[T:.*]] = call @block(%[[Y2]])
// CHECK: %[[F:.*]] = call @block(%[[T]])
// CHECK: %[[X2:.*]] = mhc.expand_combine cn %[[F]], %{{.*}}, %[[X1]]
// CHECK: return %[[X2]]
func.func private @block(tensor<?x16xf32>) -> tensor<?x16xf32>
func.func @two_layers(%x: tensor<?x16x2xf32>, %phi: tensor<8x32xf32>, %a: tensor<3xf32>, %b: tensor<8xf32>) -> tensor<?x16x2xf32> {
  %x1 = mhc.layer cn %x, %phi, %a, %b sinkhorn log {n = 2 : i64}
      : (tensor<?x16x2xf32>, tensor<8x32xf32>, tensor<3xf32>, tensor<8xf32>) -> tensor<?x16x2xf32> {
  ^bb0(%y: tensor<?x16xf32>):
    mhc.yield %y : tensor<?x16xf32>
  }
  %x2 = mhc.layer cn %x1, %phi, %a, %b sinkhorn log {n = 2 : i64}
      : (tensor<?x16x2xf32>, tensor<8x32xf32>, tensor<3xf32>, tensor<8xf32>) -> tensor<?x16x2xf32> {
  ^bb0(%y: tensor<?x16xf32>):
    %t = func.call @block(%y) : (tensor<?x16xf32>) -> tensor<?x16xf32>
    %f = func.call @block(%t) : (tensor<?x16xf32>) -> tensor<?x16xf32>
    mhc.yield %f : tensor<?x16xf32>
  }
  return %x2 : tensor<?x16x2xf32>
}
