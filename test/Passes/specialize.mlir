// RUN: mhc-opt %s -split-input-file -mhc-specialize | FileCheck %s --check-prefixes=CHECK,SM90
// RUN: mhc-opt %s -split-input-file -mhc-specialize=arch=sm_100a | FileCheck %s --check-prefixes=CHECK,SM100
// RUN: not mhc-opt %s -mhc-specialize=arch=sm_75 -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADARCH

// RUN: mhc-opt %s -mhc-specialize -o /dev/null 2>&1 | FileCheck %s --check-prefix=CHOSEN
// RUN: mhc-opt %s -mhc-specialize=arch=sm_90a -o /dev/null 2>&1 | FileCheck %s --check-prefix=GIVEN --allow-empty

// BADARCH: error: mhc-specialize: unknown arch 'sm_75'; expected sm_80, sm_90a or sm_100a

// Without an arch the pass says which one it chose; given one, it is quiet.
// CHOSEN: remark: mhc-specialize: no arch given, specialised for sm_90a (choose one with --mhc-specialize=arch=...)
// GIVEN-NOT: remark

// Forward ops: every field the kernel depends on, nothing it does not.
// CHECK-LABEL: func @forward
// SM90: mhc.project {{.*}} {mhc.spec = #mhc.spec<"project.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=1;weight=1;arch=sm_90a">, n = 4 : i64, tf32}
// SM100: mhc.project {{.*}} {mhc.spec = #mhc.spec<"project.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=1;weight=1;arch=sm_100a">, n = 4 : i64, tf32}
// SM90: mhc.scale {{.*}} {mhc.spec = #mhc.spec<"scale.fwd;n=4;param=bf16;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;arch=sm_90a">
// SM90: mhc.sinkhorn log {{.*}} {mhc.spec = #mhc.spec<"sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_90a">
// SM90: mhc.sinkhorn softmax_eps {{.*}} {eps = 0.000000e+00 : f32, iters = 10 : i64, mhc.spec = #mhc.spec<"sinkhorn.fwd;n=4;mode=softmax_eps;iters=10;eps=0;arch=sm_90a">
// SM90: mhc.aggregate {{.*}} {mhc.spec = #mhc.spec<"aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a">
// SM90: mhc.expand_combine {{.*}} {mhc.spec = #mhc.spec<"expand_combine.fwd;n=4;act=bf16;layout=nc;C=64;bias=0;arch=sm_90a">
// CHECK-NOT: mhc.fallback
func.func @forward(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %w: tensor<256xf32>,
                   %a: tensor<3xbf16>, %b: tensor<24xbf16>, %f: tensor<?x64xbf16>) {
  %h, %ms = mhc.project nc %x, %phi weight %w {n = 4 : i64, tf32} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64, norm_eps = 1.1920929e-07 : f32, pre_eps = 0.0 : f32} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xbf16>, tensor<24xbf16>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  %p = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %q = mhc.sinkhorn softmax_eps %l {n = 4 : i64, iters = 10 : i64, eps = 0.0 : f32} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  %o = mhc.expand_combine nc %f, %post, %x, %p {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> tensor<?x4x64xbf16>
  return
}

// -----

// The fused pre step carries the fields of project, scale and sinkhorn; its
// param dtype is phi's, which alpha, beta and weight share.
// CHECK-LABEL: func @pre
// (Their token count is dynamic: mhc.spec_one_launch names the kernel the
// runtime takes at M <= 256, @one_launch below.)
// SM90: mhc.pre nc {{.*}} {mhc.spec = #mhc.spec<"pre.fwd;n=4;act=bf16;param=bf16;layout=nc;C=64;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=0;post_mult=2;mode=log;iters=20;arch=sm_90a">, mhc.spec_one_launch = #mhc.spec<"pre.fwd;n=4;act=bf16;param=bf16;layout=nc;C=64;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=0;post_mult=2;mode=log;iters=20;coop=1;arch=sm_90a">, n = 4 : i64, pre_eps = 0.000000e+00 : f32}
// SM100: mhc.pre nc {{.*}} {mhc.spec = #mhc.spec<"pre.fwd;n=4;act=bf16;param=bf16;layout=nc;C=64;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=0;post_mult=2;mode=log;iters=20;arch=sm_100a">, mhc.spec_one_launch = #mhc.spec<"pre.fwd;n=4;act=bf16;param=bf16;layout=nc;C=64;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=0;post_mult=2;mode=log;iters=20;coop=1;arch=sm_100a">, n = 4 : i64, pre_eps = 0.000000e+00 : f32}
// SM90: mhc.pre cn {{.*}} {eps = 0.000000e+00 : f32, iters = 3 : i64, mhc.spec = #mhc.spec<"pre.fwd;n=2;act=f32;param=f32;layout=cn;C=8;tf32=1;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=3;eps=0;arch=sm_90a">, mhc.spec_one_launch = #mhc.spec<"pre.fwd;n=2;act=f32;param=f32;layout=cn;C=8;tf32=1;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=3;eps=0;coop=1;arch=sm_90a">, n = 2 : i64, tf32}
// CHECK-NOT: mhc.fallback
func.func @pre(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xbf16>, %a: tensor<3xbf16>, %b: tensor<24xbf16>, %w: tensor<256xbf16>,
               %xt: tensor<?x8x2xf32>, %phit: tensor<8x16xf32>, %at: tensor<3xf32>, %bt: tensor<8xf32>) {
  %0:7 = mhc.pre nc %x, %phi, %a, %b weight %w sinkhorn log {n = 4 : i64, pre_eps = 0.0 : f32} : (tensor<?x4x64xbf16>, tensor<24x256xbf16>, tensor<3xbf16>, tensor<24xbf16>, tensor<256xbf16>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  %1:7 = mhc.pre cn %xt, %phit, %at, %bt sinkhorn softmax_eps {n = 2 : i64, tf32, iters = 3 : i64, eps = 0.0 : f32} : (tensor<?x8x2xf32>, tensor<8x16xf32>, tensor<3xf32>, tensor<8xf32>) -> (tensor<?x8xf32>, tensor<?xf32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?x8xf32>)
  return
}

// -----

// The forward of pre and post_pre picks its kernel by the token count
// (mhc::forwardRunsInOneLaunch, as the torch ops do at run time): a static
// M <= 4 (kOneLaunchMaxTokens) the one-launch kernel (coop=1), M = 5 the multi-launch one,
// which a dynamic M keeps in mhc.spec with the one-launch spec beside it.
// CHECK-LABEL: func @one_launch
// SM90: mhc.pre nc {{.*}} {mhc.spec = #mhc.spec<"pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;coop=1;arch=sm_90a">, n = 4 : i64}
// SM90: mhc.pre nc {{.*}} {mhc.spec = #mhc.spec<"pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;coop=1;arch=sm_90a">, n = 4 : i64}
// SM90: mhc.pre nc {{.*}} {mhc.spec = #mhc.spec<"pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;arch=sm_90a">, n = 4 : i64}
// SM90: mhc.post_pre nc {{.*}} {mhc.spec = #mhc.spec<"post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=0;coop=1;arch=sm_90a">, n = 4 : i64}
// SM90: mhc.post_pre nc {{.*}} {mhc.spec = #mhc.spec<"post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=0;arch=sm_90a">, n = 4 : i64}
// SM90: mhc.post_pre nc {{.*}} {mhc.spec = #mhc.spec<"post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=0;arch=sm_90a">, mhc.spec_one_launch = #mhc.spec<"post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=0;coop=1;arch=sm_90a">, n = 4 : i64}
// The backward has one kernel for every M.
// SM90: mhc.post_pre_grad {{.*}}mhc.spec = #mhc.spec<"post_pre.bwd;{{[^"]*}};bias=0;arch=sm_90a">
// SM90-NOT: mhc.spec_one_launch
// CHECK-NOT: mhc.fallback
func.func @one_launch(%x1: tensor<1x4x64xbf16>, %x4: tensor<4x4x64xbf16>, %x5: tensor<5x4x64xbf16>,
                      %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>,
                      %f: tensor<4x64xbf16>, %post: tensor<4x4xf32>, %p: tensor<4x4x4xf32>,
                      %f7: tensor<5x64xbf16>, %post7: tensor<5x4xf32>, %p7: tensor<5x4x4xf32>,
                      %fd: tensor<?x64xbf16>, %postd: tensor<?x4xf32>, %xd: tensor<?x4x64xbf16>, %pd: tensor<?x4x4xf32>,
                      %gd: tensor<?x24xf32>, %msd: tensor<?xf32>, %yd: tensor<?x64xbf16>) {
  %0:7 = mhc.pre nc %x1, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<1x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<1x24xf32>, tensor<1xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4x4xf32>, tensor<1x4x4xf32>, tensor<1x64xbf16>)
  %1:7 = mhc.pre nc %x4, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<4x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<4x24xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4x4xf32>, tensor<4x4x4xf32>, tensor<4x64xbf16>)
  %2:7 = mhc.pre nc %x5, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<5x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<5x24xf32>, tensor<5xf32>, tensor<5x4xf32>, tensor<5x4xf32>, tensor<5x4x4xf32>, tensor<5x4x4xf32>, tensor<5x64xbf16>)
  %3:8 = mhc.post_pre nc %f, %post, %x4, %p next %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<4x64xbf16>, tensor<4x4xf32>, tensor<4x4x64xbf16>, tensor<4x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<4x4x64xbf16>, tensor<4x24xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4x4xf32>, tensor<4x4x4xf32>, tensor<4x64xbf16>)
  %4:8 = mhc.post_pre nc %f7, %post7, %x5, %p7 next %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<5x64xbf16>, tensor<5x4xf32>, tensor<5x4x64xbf16>, tensor<5x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<5x4x64xbf16>, tensor<5x24xf32>, tensor<5xf32>, tensor<5x4xf32>, tensor<5x4xf32>, tensor<5x4x4xf32>, tensor<5x4x4xf32>, tensor<5x64xbf16>)
  %5:8 = mhc.post_pre nc %fd, %postd, %xd, %pd next %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  %6:7 = mhc.post_pre_grad nc %xd, %yd, %postd, %pd, %fd, %postd, %xd, %pd next %xd, %gd, %msd, %postd, %pd, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

// Gradient ops get the bwd spec of their forward op; layout cn and f16.
// CHECK-LABEL: func @backward
// SM90: mhc.project_grad {{.*}}mhc.spec = #mhc.spec<"project.bwd;n=2;act=f16;param=f32;layout=cn;C=8;tf32=0;weight=0;arch=sm_90a">
// SM90: mhc.scale_grad {{.*}}mhc.spec = #mhc.spec<"scale.bwd;n=2;param=f32;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;arch=sm_90a">
// SM90: mhc.sinkhorn_grad {{.*}}mhc.spec = #mhc.spec<"sinkhorn.bwd;n=2;mode=softmax_eps;iters=20;eps=9.99999997e-07;arch=sm_90a">
// SM90: mhc.aggregate_grad {{.*}}mhc.spec = #mhc.spec<"aggregate.bwd;n=2;act=f16;layout=cn;C=8;arch=sm_90a">
// SM90: mhc.expand_combine_grad {{.*}}mhc.spec = #mhc.spec<"expand_combine.bwd;n=2;act=f16;param=bf16;layout=cn;C=8;bias=1;arch=sm_90a">
// CHECK-NOT: mhc.fallback
func.func @backward(%gh: tensor<?x8xf32>, %gms: tensor<?xf32>, %x: tensor<?x8x2xf16>, %phi: tensor<8x16xf32>,
                    %g2: tensor<?x2xf32>, %g22: tensor<?x2x2xf32>, %a: tensor<3xf32>, %b: tensor<8xf32>,
                    %gy: tensor<?x8xf16>, %bias: tensor<8xbf16>) {
  %gx, %gphi = mhc.project_grad cn %gh, %gms, %x, %phi {n = 2 : i64} : (tensor<?x8xf32>, tensor<?xf32>, tensor<?x8x2xf16>, tensor<8x16xf32>) -> (tensor<?x8x2xf16>, tensor<8x16xf32>)
  %0:4 = mhc.scale_grad %g2, %g2, %g22, %gh, %gms, %a, %b {n = 2 : i64} : (tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2x2xf32>, tensor<?x8xf32>, tensor<?xf32>, tensor<3xf32>, tensor<8xf32>) -> (tensor<?x8xf32>, tensor<?xf32>, tensor<3xf32>, tensor<8xf32>)
  %1 = mhc.sinkhorn_grad softmax_eps %g22, %g22 {n = 2 : i64} : (tensor<?x2x2xf32>, tensor<?x2x2xf32>) -> tensor<?x2x2xf32>
  %2:2 = mhc.aggregate_grad cn %gy, %x, %g2 {n = 2 : i64} : (tensor<?x8xf16>, tensor<?x8x2xf16>, tensor<?x2xf32>) -> (tensor<?x8x2xf16>, tensor<?x2xf32>)
  %3:5 = mhc.expand_combine_grad cn %x, %gy, %g2, %x, %g22 bias %bias {n = 2 : i64} : (tensor<?x8x2xf16>, tensor<?x8xf16>, tensor<?x2xf32>, tensor<?x8x2xf16>, tensor<?x2x2xf32>, tensor<8xbf16>) -> (tensor<?x8xf16>, tensor<?x2xf32>, tensor<?x8x2xf16>, tensor<?x2x2xf32>, tensor<8xbf16>)
  return
}

// -----

// What codegen cannot build is marked, with the reason, for the runtime's
// reference path: n beyond 8, a dynamic C. A fused pre step with K = n*C not
// a multiple of 8 runs generated code (issue 35).
// CHECK-LABEL: func @unsupported
// SM90: mhc.aggregate nc {{.*}} {mhc.fallback = "n = 9 is outside the specialised range 1..8", mhc.spec = #mhc.spec<"aggregate.fwd;n=9;act=f32;layout=nc;C=16;arch=sm_90a">, n = 9 : i64}
// SM90: mhc.aggregate nc {{.*}} {mhc.fallback = "the channel count C is not static", mhc.spec = #mhc.spec<"aggregate.fwd;n=4;act=bf16;layout=nc;C=0;arch=sm_90a">, n = 4 : i64}
// SM90: mhc.pre nc {{.*}} {mhc.spec = #mhc.spec<"pre.fwd;n=2;act=f32;param=f32;layout=nc;C=3;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;arch=sm_90a">, mhc.spec_one_launch = #mhc.spec<"pre.fwd;n=2;act=f32;param=f32;layout=nc;C=3;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;coop=1;arch=sm_90a">, n = 2 : i64}
// The same ops on small shapes are fine; sinkhorn does not depend on C.
// SM90: mhc.sinkhorn log {{.*}} {mhc.spec = #mhc.spec<"sinkhorn.fwd;n=1;mode=log;iters=20;arch=sm_90a">, n = 1 : i64}
func.func @unsupported(%x9: tensor<?x9x16xf32>, %pre9: tensor<?x9xf32>, %xd: tensor<?x4x?xbf16>, %pre: tensor<?x4xf32>, %l1: tensor<?x1x1xf32>,
                       %x3: tensor<?x2x3xf32>, %phi3: tensor<8x6xf32>, %a3: tensor<3xf32>, %b3: tensor<8xf32>) {
  %y = mhc.aggregate nc %x9, %pre9 {n = 9 : i64} : (tensor<?x9x16xf32>, tensor<?x9xf32>) -> tensor<?x16xf32>
  %yd = mhc.aggregate nc %xd, %pre {n = 4 : i64} : (tensor<?x4x?xbf16>, tensor<?x4xf32>) -> tensor<?x?xbf16>
  %k:7 = mhc.pre nc %x3, %phi3, %a3, %b3 sinkhorn log {n = 2 : i64} : (tensor<?x2x3xf32>, tensor<8x6xf32>, tensor<3xf32>, tensor<8xf32>) -> (tensor<?x8xf32>, tensor<?xf32>, tensor<?x2xf32>, tensor<?x2xf32>, tensor<?x2x2xf32>, tensor<?x2x2xf32>, tensor<?x3xf32>)
  %p = mhc.sinkhorn log %l1 {n = 1 : i64} : (tensor<?x1x1xf32>) -> tensor<?x1x1xf32>
  return
}

// -----

// A stale fallback mark from an earlier run is cleared when the spec is now
// supported; the spec is recomputed.
// CHECK-LABEL: func @restamp
// SM90: mhc.sinkhorn log %{{.*}} {mhc.spec = #mhc.spec<"sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_90a">, n = 4 : i64}
func.func @restamp(%l: tensor<?x4x4xf32>) {
  %p = mhc.sinkhorn log %l {n = 4 : i64, mhc.fallback = "old", mhc.spec = #mhc.spec<"sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_80">} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}
