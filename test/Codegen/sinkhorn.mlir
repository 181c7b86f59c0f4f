// Kernels of mhc.sinkhorn: one thread per token, T iterations as an scf.for
// over the n x n matrix in registers; the backward keeps the iteration
// history in shared memory and walks it in reverse. The log mode runs in
// base 2 (logits scaled by log2(e)) and in the scaling form first: K =
// exp2(L2 - rowmax) once, then u = 1 / (K v), v = 1 / (K^T u) per iteration
// (rcp.approx); a token whose sums leave [2^-100, 2^100] is redone in the
// log domain (exp2, lg2.approx).
// RUN: mhc-compile --spec 'sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=LOG
// RUN: mhc-compile --spec 'sinkhorn.fwd;n=3;mode=softmax_eps;iters=10;eps=9.99999975e-06;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=SOFT
// RUN: mhc-compile --spec 'sinkhorn.bwd;n=4;mode=log;iters=20;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=BWD
// RUN: not mhc-compile --spec 'sinkhorn.bwd;n=8;mode=log;iters=40;arch=sm_90a' --print-ir 2>&1 | FileCheck %s --check-prefix=BIG

// LOG: gpu.func @mhc_sinkhorn_fwd_n4_{{.*}}_main(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64)
// LOG-DAG: arith.constant 20 : index
// LOG: arith.constant 1.44269502 : f32
// LOG-COUNT-16: math.exp2
// LOG: scf.for %{{.*}} = %{{.*}} to %c20 step %c1 iter_args(
// LOG-COUNT-8: llvm.call_intrinsic "llvm.nvvm.rcp.approx.ftz.f"
// LOG: scf.if
// LOG: scf.if
// LOG: scf.for %{{.*}} = %{{.*}} to %c20 step %c1 iter_args(
// LOG: math.exp2
// LOG: llvm.call_intrinsic "llvm.nvvm.lg2.approx.f"
// LOG-NOT: math.log

// SOFT: arith.constant 9.99999974E-6 : f32
// SOFT: scf.for %{{.*}} = %c1 to %c10 step %c1 iter_args(
// SOFT: arith.divf

// 2n*T = 160 floats of history per thread, 64 threads: 40 KiB.
// BWD: gpu.func @mhc_sinkhorn_bwd_n4_{{.*}}_main(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64) workgroup(%{{.*}} : memref<10240xf32, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 64, 1, 1>}
// BWD-COUNT-2: scf.for
// BWD-NOT: atomic

// BIG: cannot generate kernels for 'sinkhorn.bwd;n=8;mode=log;iters=40;arch=sm_90a': sinkhorn backward keeps 640 floats of history per token; at most 384 fit
