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

// A zero acc adds 0 to x's gradient: dropped from all three ops that take
// one (bf16 and -0.0 too), and from project_grad and expand_combine_grad
// alongside their weight and bias.
// CHECK-LABEL: func @zero_acc
// CHECK-NOT: arith.constant
// CHECK: mhc.aggregate_grad nc %arg0, %arg1, %arg2 {n = 2 : i64} : (tensor<4x8xbf16>, tensor<4x2x8xbf16>, tensor<4x2xf32>) -> (tensor<4x2x8xbf16>, tensor<4x2xf32>)
// CHECK: mhc.project_grad nc %arg3, %arg4, %arg1, %arg5 weight %arg6 {n = 2 : i64} : (tensor<4x8xf32>, tensor<4xf32>, tensor<4x2x8xbf16>, tensor<8x16xf32>, tensor<16xf32>) -> (tensor<4x2x8xbf16>, tensor<8x16xf32>, tensor<16xf32>)
// CHECK: mhc.expand_combine_grad nc %arg7, %arg0, %arg2, %arg1, %arg8 bias %arg9 {n = 2 : i64} : (tensor<4x2x8xbf16>, tensor<4x8xbf16>, tensor<4x2xf32>, tensor<4x2x8xbf16>, tensor<4x2x2xf32>, tensor<8xf32>) -> (tensor<4x8xbf16>, tensor<4x2xf32>, tensor<4x2x8xbf16>, tensor<4x2x2xf32>, tensor<8xf32>)
func.func @zero_acc(%gy: tensor<4x8xbf16>, %x: tensor<4x2x8xbf16>, %pre: tensor<4x2xf32>,
                    %gh: tensor<4x8xf32>, %gms: tensor<4xf32>, %phi: tensor<8x16xf32>, %w: tensor<16xf32>,
                    %g: tensor<4x2x8xbf16>, %p: tensor<4x2x2xf32>, %b: tensor<8xf32>)
    -> (tensor<4x2x8xbf16>, tensor<4x2x8xbf16>, tensor<16xf32>, tensor<4x2x8xbf16>, tensor<8xf32>) {
  %zero = arith.constant dense<0.0> : tensor<4x2x8xbf16>
  %negzero = arith.constant dense<-0.0> : tensor<4x2x8xbf16>
  %gx1, %gpre = mhc.aggregate_grad nc %gy, %x, %pre acc %zero {n = 2 : i64} : (tensor<4x8xbf16>, tensor<4x2x8xbf16>, tensor<4x2xf32>, tensor<4x2x8xbf16>) -> (tensor<4x2x8xbf16>, tensor<4x2xf32>)
  %gx2, %gphi, %gw = mhc.project_grad nc %gh, %gms, %x, %phi weight %w acc %negzero {n = 2 : i64} : (tensor<4x8xf32>, tensor<4xf32>, tensor<4x2x8xbf16>, tensor<8x16xf32>, tensor<16xf32>, tensor<4x2x8xbf16>) -> (tensor<4x2x8xbf16>, tensor<8x16xf32>, tensor<16xf32>)
  %gf, %gpost, %gx3, %gp, %gb = mhc.expand_combine_grad nc %g, %gy, %pre, %x, %p bias %b acc %zero {n = 2 : i64} : (tensor<4x2x8xbf16>, tensor<4x8xbf16>, tensor<4x2xf32>, tensor<4x2x8xbf16>, tensor<4x2x2xf32>, tensor<8xf32>, tensor<4x2x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x2xf32>, tensor<4x2x8xbf16>, tensor<4x2x2xf32>, tensor<8xf32>)
  return %gx1, %gx2, %gw, %gx3, %gb : tensor<4x2x8xbf16>, tensor<4x2x8xbf16>, tensor<16xf32>, tensor<4x2x8xbf16>, tensor<8xf32>
}

// -----

// Any other acc stays: a non-zero splat, a non-splat constant, an argument.
// CHECK-LABEL: func @other_acc
// CHECK: %[[ONE:.*]] = arith.constant dense<1.000000e+00>
// CHECK: mhc.aggregate_grad nc {{.*}} acc %[[ONE]]
// CHECK: mhc.aggregate_grad nc {{.*}} acc %{{.*}} {
// CHECK: mhc.aggregate_grad nc {{.*}} acc %arg3
func.func @other_acc(%gy: tensor<2x8xf32>, %x: tensor<2x2x8xf32>, %pre: tensor<2x2xf32>, %acc: tensor<2x2x8xf32>)
    -> (tensor<2x2x8xf32>, tensor<2x2x8xf32>, tensor<2x2x8xf32>) {
  %one = arith.constant dense<1.0> : tensor<2x2x8xf32>
  %mixed = arith.constant dense<[[[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]],
                                 [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]]]> : tensor<2x2x8xf32>
  %gx1, %gpre1 = mhc.aggregate_grad nc %gy, %x, %pre acc %one {n = 2 : i64} : (tensor<2x8xf32>, tensor<2x2x8xf32>, tensor<2x2xf32>, tensor<2x2x8xf32>) -> (tensor<2x2x8xf32>, tensor<2x2xf32>)
  %gx2, %gpre2 = mhc.aggregate_grad nc %gy, %x, %pre acc %mixed {n = 2 : i64} : (tensor<2x8xf32>, tensor<2x2x8xf32>, tensor<2x2xf32>, tensor<2x2x8xf32>) -> (tensor<2x2x8xf32>, tensor<2x2xf32>)
  %gx3, %gpre3 = mhc.aggregate_grad nc %gy, %x, %pre acc %acc {n = 2 : i64} : (tensor<2x8xf32>, tensor<2x2x8xf32>, tensor<2x2xf32>, tensor<2x2x8xf32>) -> (tensor<2x2x8xf32>, tensor<2x2xf32>)
  return %gx1, %gx2, %gx3 : tensor<2x2x8xf32>, tensor<2x2x8xf32>, tensor<2x2x8xf32>
}

// -----

// Dropping a unit weight or a zero bias from a gradient op keeps its acc.
// CHECK-LABEL: func @drop_keeps_acc
// CHECK: mhc.project_grad nc %arg0, %arg1, %arg2, %arg3 acc %arg4 {n = 2 : i64} : (tensor<?x8xf32>, tensor<?xf32>, tensor<?x2x8xf32>, tensor<8x16xf32>, tensor<?x2x8xf32>) -> (tensor<?x2x8xf32>, tensor<8x16xf32>)
// CHECK: mhc.expand_combine_grad nc %arg4, %arg5, %arg6, %arg2, %arg7 acc %arg4 {n = 2 : i64} : (tensor<?x2x8xf32>, tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>, tensor<?x2x8xf32>) -> (tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>)
func.func @drop_keeps_acc(%gh: tensor<?x8xf32>, %gms: tensor<?xf32>, %x: tensor<?x2x8xf32>, %phi: tensor<8x16xf32>,
                          %acc: tensor<?x2x8xf32>, %f: tensor<?x8xf32>, %post: tensor<?x2xf32>, %p: tensor<?x2x2xf32>)
    -> (tensor<?x2x8xf32>, tensor<?x2x8xf32>) {
  %w = arith.constant dense<1.0> : tensor<16xf32>
  %b = arith.constant dense<0.0> : tensor<8xf32>
  %gx, %gphi, %gw = mhc.project_grad nc %gh, %gms, %x, %phi weight %w acc %acc {n = 2 : i64} : (tensor<?x8xf32>, tensor<?xf32>, tensor<?x2x8xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<?x2x8xf32>) -> (tensor<?x2x8xf32>, tensor<8x16xf32>, tensor<16xf32>)
  %gf, %gpost, %gx2, %gp, %gb = mhc.expand_combine_grad nc %acc, %f, %post, %x, %p bias %b acc %acc {n = 2 : i64} : (tensor<?x2x8xf32>, tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>, tensor<8xf32>, tensor<?x2x8xf32>) -> (tensor<?x8xf32>, tensor<?x2xf32>, tensor<?x2x8xf32>, tensor<?x2x2xf32>, tensor<8xf32>)
  return %gx, %gx2 : tensor<?x2x8xf32>, tensor<?x2x8xf32>
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
