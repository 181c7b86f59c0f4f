// Every op parses, verifies and prints; the printed form re-parses to the
// same IR (the second RUN line compares print(parse(print(x))) with print(x)).
// RUN: mhc-opt %s -split-input-file | FileCheck %s
// RUN: mhc-opt %s -split-input-file | mhc-opt -split-input-file | FileCheck %s
// RUN: mhc-opt %s -split-input-file -mlir-print-op-generic | mhc-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func @project
// CHECK: mhc.project nc %{{.*}}, %{{.*}} {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
// CHECK: mhc.project cn %{{.*}}, %{{.*}} weight %{{.*}} {n = 4 : i64, tf32} : (tensor<?x64x4xf16>, tensor<24x256xbf16>, tensor<256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
func.func @project(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>,
                   %xt: tensor<?x64x4xf16>, %phib: tensor<24x256xbf16>,
                   %w: tensor<256xf32>) {
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %h2, %ms2 = mhc.project cn %xt, %phib weight %w {n = 4 : i64, tf32} : (tensor<?x64x4xf16>, tensor<24x256xbf16>, tensor<256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

// CHECK-LABEL: func @scale
// CHECK: mhc.scale %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {n = 2 : i64} : (tensor<?x8xf32>, tensor<?xf32>, tensor<3xf32>, tensor<8xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2x2xf32>)
// CHECK: mhc.scale {{.*}} {n = 2 : i64, norm_eps = 1.1920929E-7 : f32, post_mult = 1.000000e+00 : f32, pre_eps = 0.000000e+00 : f32}
func.func @scale(%h: tensor<?x8xf32>, %ms: tensor<?xf32>, %alpha: tensor<3xf32>, %beta: tensor<8xf32>) {
  %pre, %post, %l = mhc.scale %h, %ms, %alpha, %beta {n = 2 : i64} : (tensor<?x8xf32>, tensor<?xf32>, tensor<3xf32>, tensor<8xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2x2xf32>)
  // Transformer Engine's constants; defaults (1e-6, 1e-6, 2) are not printed.
  %pre2, %post2, %l2 = mhc.scale %h, %ms, %alpha, %beta {n = 2 : i64, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32, post_mult = 1.0 : f32} : (tensor<?x8xf32>, tensor<?xf32>, tensor<3xf32>, tensor<8xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2x2xf32>)
  %pre3, %post3, %l3 = mhc.scale %h, %ms, %alpha, %beta {n = 2 : i64, norm_eps = 1.0e-06 : f32, pre_eps = 1.0e-06 : f32, post_mult = 2.0 : f32} : (tensor<?x8xf32>, tensor<?xf32>, tensor<3xf32>, tensor<8xf32>) -> (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2x2xf32>)
  return
}
// CHECK: mhc.scale {{.*}} {n = 2 : i64} :

// -----

// CHECK-LABEL: func @sinkhorn
// CHECK: mhc.sinkhorn log %{{.*}} {n = 3 : i64} : (tensor<?x3x3xf32>) -> tensor<?x3x3xf32>
// CHECK: mhc.sinkhorn softmax_eps %{{.*}} {eps = 9.99999974E-6 : f32, iters = 10 : i64, n = 3 : i64} : (tensor<?x3x3xf32>) -> tensor<?x3x3xf32>
// CHECK: mhc.sinkhorn softmax_eps %{{.*}} {n = 8 : i64} : (tensor<16x8x8xf32>) -> tensor<16x8x8xf32>
func.func @sinkhorn(%l: tensor<?x3x3xf32>, %l8: tensor<16x8x8xf32>) {
  %p = mhc.sinkhorn log %l {n = 3 : i64, iters = 20 : i64} : (tensor<?x3x3xf32>) -> tensor<?x3x3xf32>
  %q = mhc.sinkhorn softmax_eps %l {n = 3 : i64, iters = 10 : i64, eps = 1.0e-5 : f32} : (tensor<?x3x3xf32>) -> tensor<?x3x3xf32>
  %r = mhc.sinkhorn softmax_eps %l8 {n = 8 : i64} : (tensor<16x8x8xf32>) -> tensor<16x8x8xf32>
  return
}

// -----

// CHECK-LABEL: func @aggregate
// CHECK: mhc.aggregate nc %{{.*}}, %{{.*}} {n = 6 : i64} : (tensor<?x6x1000xf32>, tensor<?x6xf32>) -> tensor<?x1000xf32>
// CHECK: mhc.aggregate cn %{{.*}}, %{{.*}} {n = 6 : i64} : (tensor<7x1000x6xbf16>, tensor<?x6xf32>) -> tensor<7x1000xbf16>
func.func @aggregate(%x: tensor<?x6x1000xf32>, %xt: tensor<7x1000x6xbf16>, %pre: tensor<?x6xf32>) {
  %y = mhc.aggregate nc %x, %pre {n = 6 : i64} : (tensor<?x6x1000xf32>, tensor<?x6xf32>) -> tensor<?x1000xf32>
  %yt = mhc.aggregate cn %xt, %pre {n = 6 : i64} : (tensor<7x1000x6xbf16>, tensor<?x6xf32>) -> tensor<7x1000xbf16>
  return
}

// -----

// CHECK-LABEL: func @expand_combine
// CHECK: mhc.expand_combine nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> tensor<?x4x64xbf16>
// CHECK: mhc.expand_combine cn %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x64x4xbf16>, tensor<?x4x4xf32>, tensor<64xbf16>) -> tensor<?x64x4xbf16>
func.func @expand_combine(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>,
                          %xt: tensor<?x64x4xbf16>, %p: tensor<?x4x4xf32>, %b: tensor<64xbf16>) {
  %o = mhc.expand_combine nc %f, %post, %x, %p {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> tensor<?x4x64xbf16>
  %ot = mhc.expand_combine cn %f, %post, %xt, %p bias %b {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x64x4xbf16>, tensor<?x4x4xf32>, tensor<64xbf16>) -> tensor<?x64x4xbf16>
  return
}

// -----

// CHECK-LABEL: func @pre
// CHECK: mhc.pre nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
// CHECK: mhc.pre cn %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} weight %{{.*}} sinkhorn softmax_eps {eps = 0.000000e+00 : f32, iters = 10 : i64, n = 2 : i64, norm_eps = 1.1920929E-7 : f32, pre_eps = 0.000000e+00 : f32, tf32} : (tensor<8x16x2xf16>, tensor<8x32xbf16>, tensor<3xbf16>, tensor<8xbf16>, tensor<32xbf16>) -> (tensor<8x8xf32>, tensor<8xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2x2xf32>, tensor<8x2x2xf32>, tensor<8x16xf16>)
func.func @pre(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>,
               %xt: tensor<8x16x2xf16>, %phib: tensor<8x32xbf16>, %alphab: tensor<3xbf16>, %betab: tensor<8xbf16>,
               %w: tensor<32xbf16>) {
  %0:7 = mhc.pre nc %x, %phi, %alpha, %beta sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  %1:7 = mhc.pre cn %xt, %phib, %alphab, %betab weight %w sinkhorn softmax_eps {n = 2 : i64, tf32, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32, iters = 10 : i64, eps = 0.0 : f32} : (tensor<8x16x2xf16>, tensor<8x32xbf16>, tensor<3xbf16>, tensor<8xbf16>, tensor<32xbf16>) -> (tensor<8x8xf32>, tensor<8xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2x2xf32>, tensor<8x2x2xf32>, tensor<8x16xf16>)
  return
}

// -----

// CHECK-LABEL: func @project_grad
// CHECK: mhc.project_grad nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x4x64xbf16>, tensor<24x256xf32>)
// CHECK: mhc.project_grad cn %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} weight %{{.*}} {n = 4 : i64, tf32} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x64x4xbf16>, tensor<24x256xf32>, tensor<256xbf16>) -> (tensor<?x64x4xbf16>, tensor<24x256xf32>, tensor<256xbf16>)
func.func @project_grad(%gh: tensor<?x24xf32>, %gms: tensor<?xf32>, %x: tensor<?x4x64xbf16>,
                        %xt: tensor<?x64x4xbf16>, %phi: tensor<24x256xf32>, %w: tensor<256xbf16>) {
  %gx, %gphi = mhc.project_grad nc %gh, %gms, %x, %phi {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x4x64xbf16>, tensor<24x256xf32>)
  %gx2, %gphi2, %gw = mhc.project_grad cn %gh, %gms, %xt, %phi weight %w {n = 4 : i64, tf32} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x64x4xbf16>, tensor<24x256xf32>, tensor<256xbf16>) -> (tensor<?x64x4xbf16>, tensor<24x256xf32>, tensor<256xbf16>)
  // x's gradient from other users, summed in (with and without weight).
  %gx3, %gphi3 = mhc.project_grad nc %gh, %gms, %x, %phi acc %x {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<?x4x64xbf16>) -> (tensor<?x4x64xbf16>, tensor<24x256xf32>)
  %gx4, %gphi4, %gw4 = mhc.project_grad cn %gh, %gms, %xt, %phi weight %w acc %gx2 {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x64x4xbf16>, tensor<24x256xf32>, tensor<256xbf16>, tensor<?x64x4xbf16>) -> (tensor<?x64x4xbf16>, tensor<24x256xf32>, tensor<256xbf16>)
  return
}
// CHECK: mhc.project_grad nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} acc %{{.*}} {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<?x4x64xbf16>) -> (tensor<?x4x64xbf16>, tensor<24x256xf32>)
// CHECK: mhc.project_grad cn %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} weight %{{.*}} acc %{{.*}} {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x64x4xbf16>, tensor<24x256xf32>, tensor<256xbf16>, tensor<?x64x4xbf16>) -> (tensor<?x64x4xbf16>, tensor<24x256xf32>, tensor<256xbf16>)

// -----

// CHECK-LABEL: func @scale_grad
// CHECK: mhc.scale_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {n = 4 : i64, pre_eps = 0.000000e+00 : f32} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
func.func @scale_grad(%gpre: tensor<?x4xf32>, %gpost: tensor<?x4xf32>, %gl: tensor<?x4x4xf32>,
                      %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  %gh, %gms, %ga, %gb = mhc.scale_grad %gpre, %gpost, %gl, %h, %ms, %alpha, %beta {n = 4 : i64, pre_eps = 0.0 : f32} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

// CHECK-LABEL: func @sinkhorn_grad
// CHECK: mhc.sinkhorn_grad log %{{.*}}, %{{.*}} {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
// CHECK: mhc.sinkhorn_grad softmax_eps %{{.*}}, %{{.*}} {eps = 0.000000e+00 : f32, iters = 5 : i64, n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
func.func @sinkhorn_grad(%gp: tensor<?x4x4xf32>, %l: tensor<?x4x4xf32>) {
  %gl = mhc.sinkhorn_grad log %gp, %l {n = 4 : i64} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %gl2 = mhc.sinkhorn_grad softmax_eps %gp, %l {n = 4 : i64, iters = 5 : i64, eps = 0.0 : f32} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

// CHECK-LABEL: func @aggregate_grad
// CHECK: mhc.aggregate_grad nc %{{.*}}, %{{.*}}, %{{.*}} {n = 8 : i64} : (tensor<?x32xf16>, tensor<?x8x32xf16>, tensor<?x8xf32>) -> (tensor<?x8x32xf16>, tensor<?x8xf32>)
func.func @aggregate_grad(%gy: tensor<?x32xf16>, %x: tensor<?x8x32xf16>, %pre: tensor<?x8xf32>) {
  %gx, %gpre = mhc.aggregate_grad nc %gy, %x, %pre {n = 8 : i64} : (tensor<?x32xf16>, tensor<?x8x32xf16>, tensor<?x8xf32>) -> (tensor<?x8x32xf16>, tensor<?x8xf32>)
  %gx2, %gpre2 = mhc.aggregate_grad nc %gy, %x, %pre acc %gx {n = 8 : i64} : (tensor<?x32xf16>, tensor<?x8x32xf16>, tensor<?x8xf32>, tensor<?x8x32xf16>) -> (tensor<?x8x32xf16>, tensor<?x8xf32>)
  return
}
// CHECK: mhc.aggregate_grad nc %{{.*}}, %{{.*}}, %{{.*}} acc %{{.*}} {n = 8 : i64} : (tensor<?x32xf16>, tensor<?x8x32xf16>, tensor<?x8xf32>, tensor<?x8x32xf16>) -> (tensor<?x8x32xf16>, tensor<?x8xf32>)

// -----

// CHECK-LABEL: func @expand_combine_grad
// CHECK: mhc.expand_combine_grad nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {n = 2 : i64} : (tensor<?x2x16xf32>, tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>) -> (tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>)
// CHECK: mhc.expand_combine_grad nc {{.*}} bias %{{.*}} {n = 2 : i64} : ({{.*}}, tensor<16xf32>) -> ({{.*}}, tensor<16xf32>)
func.func @expand_combine_grad(%g: tensor<?x2x16xf32>, %f: tensor<?x16xf32>, %post: tensor<?x2xf32>,
                               %x: tensor<?x2x16xf32>, %p: tensor<?x2x2xf32>, %b: tensor<16xf32>) {
  %gf, %gpost, %gx, %gp = mhc.expand_combine_grad nc %g, %f, %post, %x, %p {n = 2 : i64} : (tensor<?x2x16xf32>, tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>) -> (tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>)
  %gf2, %gpost2, %gx2, %gp2, %gb = mhc.expand_combine_grad nc %g, %f, %post, %x, %p bias %b {n = 2 : i64} : (tensor<?x2x16xf32>, tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>, tensor<16xf32>) -> (tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>, tensor<16xf32>)
  %gf3, %gpost3, %gx3, %gp3 = mhc.expand_combine_grad nc %g, %f, %post, %x, %p acc %gx {n = 2 : i64} : (tensor<?x2x16xf32>, tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>, tensor<?x2x16xf32>) -> (tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>)
  %gf4, %gpost4, %gx4, %gp4, %gb4 = mhc.expand_combine_grad nc %g, %f, %post, %x, %p bias %b acc %gx {n = 2 : i64} : (tensor<?x2x16xf32>, tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>, tensor<16xf32>, tensor<?x2x16xf32>) -> (tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>, tensor<16xf32>)
  return
}
// CHECK: mhc.expand_combine_grad nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} acc %{{.*}} {n = 2 : i64} : ({{.*}}, tensor<?x2x16xf32>) -> (tensor<?x16xf32>, tensor<?x2xf32>, tensor<?x2x16xf32>, tensor<?x2x2xf32>)
// CHECK: mhc.expand_combine_grad nc {{.*}} bias %{{.*}} acc %{{.*}} {n = 2 : i64} : ({{.*}}, tensor<16xf32>, tensor<?x2x16xf32>) -> ({{.*}}, tensor<16xf32>)

// -----

// The layer seam, without and with its optional bias and weight (which
// share phi's element type).
// CHECK-LABEL: func @post_pre
// CHECK: mhc.post_pre nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} next %{{.*}}, %{{.*}}, %{{.*}} sinkhorn log {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
// CHECK: mhc.post_pre cn %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} next %{{.*}}, %{{.*}}, %{{.*}} weight %{{.*}} sinkhorn softmax_eps {iters = 10 : i64, n = 2 : i64, norm_eps = 1.1920929E-7 : f32, pre_eps = 0.000000e+00 : f32, tf32} : (tensor<8x16xf16>, tensor<8x2xf32>, tensor<8x16x2xf16>, tensor<8x2x2xf32>, tensor<16xbf16>, tensor<8x32xbf16>, tensor<3xbf16>, tensor<8xbf16>, tensor<32xbf16>) -> (tensor<8x16x2xf16>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2x2xf32>, tensor<8x2x2xf32>, tensor<8x16xf16>)
func.func @post_pre(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>,
                    %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>,
                    %ft: tensor<8x16xf16>, %postt: tensor<8x2xf32>, %xt: tensor<8x16x2xf16>, %pt: tensor<8x2x2xf32>,
                    %bias: tensor<16xbf16>, %phib: tensor<8x32xbf16>, %alphab: tensor<3xbf16>, %betab: tensor<8xbf16>,
                    %w: tensor<32xbf16>) {
  %0:8 = mhc.post_pre nc %f, %post, %x, %p next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  %1:8 = mhc.post_pre cn %ft, %postt, %xt, %pt bias %bias next %phib, %alphab, %betab weight %w sinkhorn softmax_eps
      {n = 2 : i64, tf32, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32, iters = 10 : i64}
      : (tensor<8x16xf16>, tensor<8x2xf32>, tensor<8x16x2xf16>, tensor<8x2x2xf32>, tensor<16xbf16>, tensor<8x32xbf16>, tensor<3xbf16>, tensor<8xbf16>, tensor<32xbf16>)
      -> (tensor<8x16x2xf16>, tensor<8x8xf32>, tensor<8xf32>, tensor<8x2xf32>, tensor<8x2xf32>, tensor<8x2x2xf32>, tensor<8x2x2xf32>, tensor<8x16xf16>)
  return
}

// -----

// Its gradient: gbias and gweight come exactly with bias and weight, so the
// result list splits into the op's result segments in every combination.
// CHECK-LABEL: func @post_pre_grad
// CHECK: mhc.post_pre_grad nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} next %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
// CHECK: mhc.post_pre_grad nc {{.*}} %{{.*}} bias %{{.*}} next {{.*}} sinkhorn log {n = 4 : i64} : ({{.*}}) -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<64xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
// CHECK: mhc.post_pre_grad nc {{.*}} %{{.*}} next {{.*}} weight %{{.*}} sinkhorn softmax_eps {n = 4 : i64, tf32} : ({{.*}}) -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>)
// CHECK: mhc.post_pre_grad nc {{.*}} bias %{{.*}} next {{.*}} weight %{{.*}} sinkhorn log {n = 4 : i64} : ({{.*}}) -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<64xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>)
func.func @post_pre_grad(%gx1: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost1: tensor<?x4xf32>, %gp1: tensor<?x4x4xf32>,
                         %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>,
                         %bias: tensor<64xf32>, %x1: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>,
                         %pre: tensor<?x4xf32>, %l: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>,
                         %beta: tensor<24xf32>, %w: tensor<256xf32>) {
  %0:7 = mhc.post_pre_grad nc %gx1, %gy, %gpost1, %gp1, %f, %post, %x, %p
      next %x1, %h, %ms, %pre, %l, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>,
         tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  %1:8 = mhc.post_pre_grad nc %gx1, %gy, %gpost1, %gp1, %f, %post, %x, %p bias %bias
      next %x1, %h, %ms, %pre, %l, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<64xf32>,
         tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<64xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  %2:8 = mhc.post_pre_grad nc %gx1, %gy, %gpost1, %gp1, %f, %post, %x, %p
      next %x1, %h, %ms, %pre, %l, %phi, %alpha, %beta weight %w sinkhorn softmax_eps {n = 4 : i64, tf32}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>,
         tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>)
  %3:9 = mhc.post_pre_grad nc %gx1, %gy, %gpost1, %gp1, %f, %post, %x, %p bias %bias
      next %x1, %h, %ms, %pre, %l, %phi, %alpha, %beta weight %w sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<64xf32>,
         tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<64xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>)
  return
}

// -----

// CHECK-LABEL: func @layer
// CHECK: %[[X1:.*]] = mhc.layer nc %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} weight %{{.*}} bias %{{.*}} sinkhorn softmax_eps {iters = 10 : i64, n = 4 : i64, tf32} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>, tensor<64xf32>) -> tensor<?x4x64xbf16> {
// CHECK-NEXT: ^bb0(%[[Y:.*]]: tensor<?x64xbf16>):
// CHECK-NEXT:   %[[F:.*]] = func.call @block(%[[Y]])
// CHECK-NEXT:   mhc.yield %[[F]] : tensor<?x64xbf16>
// CHECK-NEXT: }
// CHECK: mhc.layer nc %[[X1]], {{.*}} sinkhorn log {n = 4 : i64}
func.func private @block(tensor<?x64xbf16>) -> tensor<?x64xbf16>
func.func @layer(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>,
                 %beta: tensor<24xf32>, %w: tensor<256xf32>, %b: tensor<64xf32>) -> tensor<?x4x64xbf16> {
  %x1 = mhc.layer nc %x, %phi, %alpha, %beta weight %w bias %b sinkhorn softmax_eps {n = 4 : i64, iters = 10 : i64, tf32}
      : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>, tensor<64xf32>) -> tensor<?x4x64xbf16> {
  ^bb0(%y: tensor<?x64xbf16>):
    %f = func.call @block(%y) : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
    mhc.yield %f : tensor<?x64xbf16>
  }
  %x2 = mhc.layer nc %x1, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> tensor<?x4x64xbf16> {
  ^bb0(%y: tensor<?x64xbf16>):
    mhc.yield %y : tensor<?x64xbf16>
  }
  return %x2 : tensor<?x4x64xbf16>
}

// -----

// A kernel spec attribute round-trips too.
// CHECK-LABEL: func @spec
// CHECK: mhc.spec = #mhc.spec<"sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_90a">
func.func @spec(%l: tensor<?x4x4xf32>) {
  %p = mhc.sinkhorn log %l {n = 4 : i64, mhc.spec = #mhc.spec<"sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_90a">} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}
