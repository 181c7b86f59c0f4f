// RUN: mhc-opt %s -split-input-file -canonicalize | FileCheck %s

// An all-ones RMSNorm weight multiplies by 1: dropped.
// CHECK-LABEL: func @unit_weight
// CHECK-NOT: arith.constant
// CHECK: mhc.project nc %{{.*}}, %{{.*}} {n = 2 : i64} : (tensor<?x2x8xbf16>, tensor<8x16xf32>) -> (tensor<?x8xf32>, tensor<?xf32>)
func.func @unit_weight(%x: tensor<?x2x8xbf16>, %phi: tensor<8x16xf32>) -> (tensor<?x8xf32>, tensor<?xf32>) {
  %w = arith.constant dense<1.0> : tensor<16xf32>
  %h, %ms = mhc.project nc %x, %phi weight %w {n = 2 : i64} : (tensor<?x2x8xbf16>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<?x8xf32>, tensor<?xf32>)
  return %h, %ms : tensor<?x8xf32>, tensor<?xf32>
}

// -----

// Any other weight stays, including a splat that is not exactly 1.
// CHECK-LABEL: func @other_weight
// CHECK: %[[W:.*]] = arith.constant dense<1.00000012> : tensor<16xf32>
// CHECK: mhc.project nc %{{.*}}, %{{.*}} weight %[[W]]
// CHECK: mhc.project nc %{{.*}}, %{{.*}} weight %arg2
func.func @other_weight(%x: tensor<?x2x8xbf16>, %phi: tensor<8x16xf32>, %warg: tensor<16xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %w = arith.constant dense<1.00000012> : tensor<16xf32>
  %h, %ms = mhc.project nc %x, %phi weight %w {n = 2 : i64} : (tensor<?x2x8xbf16>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<?x8xf32>, tensor<?xf32>)
  %h2, %ms2 = mhc.project nc %x, %phi weight %warg {n = 2 : i64} : (tensor<?x2x8xbf16>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<?x8xf32>, tensor<?xf32>)
  return %h, %h2 : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// An all-zero bias adds 0: dropped (bf16 bias too).
// CHECK-LABEL: func @zero_bias
// CHECK-NOT: arith.constant
// CHECK: mhc.expand_combine nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {n = 2 : i64} : (tensor<?x8xbf16>, tensor<?x2xf32>, tensor<?x2x8xbf16>, tensor<?x2x2xf32>) -> tensor<?x2x8xbf16>
func.func @zero_bias(%f: tensor<?x8xbf16>, %post: tensor<?x2xf32>, %x: tensor<?x2x8xbf16>, %p: tensor<?x2x2xf32>) -> tensor<?x2x8xbf16> {
  %b = arith.constant dense<0.0> : tensor<8xbf16>
  %o = mhc.expand_combine nc %f, %post, %x, %p bias %b {n = 2 : i64} : (tensor<?x8xbf16>, tensor<?x2xf32>, tensor<?x2x8xbf16>, tensor<?x2x2xf32>, tensor<8xbf16>) -> tensor<?x2x8xbf16>
  return %o : tensor<?x2x8xbf16>
}

// -----

// A non-splat constant bias is kept.
// CHECK-LABEL: func @nonzero_bias
// CHECK: mhc.expand_combine nc {{.*}} bias
func.func @nonzero_bias(%f: tensor<?x2xf32>, %post: tensor<?x2xf32>, %x: tensor<?x2x2xf32>, %p: tensor<?x2x2xf32>) -> tensor<?x2x2xf32> {
  %b = arith.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %o = mhc.expand_combine nc %f, %post, %x, %p bias %b {n = 2 : i64} : (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<2xf32>) -> tensor<?x2x2xf32>
  return %o : tensor<?x2x2xf32>
}

// -----

// project_grad: a unit weight goes only when nobody reads its gradient.
// CHECK-LABEL: func @unit_weight_grad
// CHECK: %[[GX:.*]], %[[GPHI:.*]] = mhc.project_grad nc %arg0, %arg1, %arg2, %arg3 {n = 2 : i64} : (tensor<?x8xf32>, tensor<?xf32>, tensor<?x2x8xf32>, tensor<8x16xf32>) -> (tensor<?x2x8xf32>, tensor<8x16xf32>)
// CHECK: mhc.project_grad nc {{.*}} weight
// CHECK: return %[[GX]], %[[GPHI]]
func.func @unit_weight_grad(%gh: tensor<?x8xf32>, %gms: tensor<?xf32>, %x: tensor<?x2x8xf32>, %phi: tensor<8x16xf32>)
    -> (tensor<?x2x8xf32>, tensor<8x16xf32>, tensor<16xf32>) {
  %w = arith.constant dense<1.0> : tensor<16xf32>
  %gx, %gphi, %gw = mhc.project_grad nc %gh, %gms, %x, %phi weight %w {n = 2 : i64} : (tensor<?x8xf32>, tensor<?xf32>, tensor<?x2x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<?x2x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  %gx2, %gphi2, %gw2 = mhc.project_grad nc %gh, %gms, %x, %phi weight %w {n = 2 : i64, tf32} : (tensor<?x8xf32>, tensor<?xf32>, tensor<?x2x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<?x2x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  return %gx, %gphi, %gw2 : tensor<?x2x8xf32>, tensor<8x16xf32>, tensor<16xf32>
}

// -----

// expand_combine_grad: a zero bias goes only when gbias is unused.
// CHECK-LABEL: func @zero_bias_grad
// CHECK: mhc.expand_combine_grad nc %arg0, %arg1, %arg2, %arg3, %arg4 {n = 2 : i64} : (tensor<?x2x8xf32>, tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>) -> (tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>)
// CHECK-NOT: bias
func.func @zero_bias_grad(%g: tensor<?x2x8xf32>, %f: tensor<?x8xf32>, %post: tensor<?x2xf32>, %x: tensor<?x2x8xf32>, %p: tensor<?x2x2xf32>)
    -> (tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>) {
  %b = arith.constant dense<0.0> : tensor<8xf32>
  %gf, %gpost, %gx, %gp, %gb = mhc.expand_combine_grad nc %g, %f, %post, %x, %p bias %b {n = 2 : i64} : (tensor<?x2x8xf32>, tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>, tensor<8xf32>) -> (tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>, tensor<8xf32>)
  return %gf, %gpost, %gx, %gp : tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>
}

// -----

// mhc ops are pure: an unused one is erased.
// CHECK-LABEL: func @dead
// CHECK-NEXT: return %arg0
func.func @dead(%l: tensor<?x4x4xf32>, %gp: tensor<?x4x4xf32>) -> tensor<?x4x4xf32> {
  %p = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %gl = mhc.sinkhorn_grad log %gp, %l {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return %l : tensor<?x4x4xf32>
}
