// Kernels of mhc.scale: the forward takes one thread per (token, 4 logits),
// 16-byte loads and stores, 42 tokens x 6 groups per block for n = 4, and
// single-instruction rsqrt and sigmoid (MUFU: rsqrt, ex2, rcp); the
// backward 8 lanes per token (16 tokens per block of 128), in f64: n = 4's
// 24 logits are 3 per lane, the first holding pre and post (one f64
// sigmoid), and the token's sums (the dot and 3 segments) are butterflies
// over the 8 lanes, 3 steps of two 32-bit shuffles each; its galpha and
// gbeta column sums of per-token terms, reduced deterministically.
// RUN: mhc-compile --spec 'scale.fwd;n=4;param=f32;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=FWD
// RUN: mhc-compile --spec 'scale.bwd;n=4;param=bf16;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=BWD

// FWD: gpu.func @mhc_scale_fwd_n4_{{.*}}_main(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64) kernel attributes {known_block_size = array<i32: 252, 1, 1>}
// FWD-DAG: arith.constant 1.1920929E-7 : f32
// FWD-DAG: arith.constant 42 : index
// FWD-DAG: arith.constant 24 : index
// FWD: llvm.call_intrinsic "llvm.nvvm.rsqrt.approx.f"
// FWD: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// FWD: llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"
// FWD-NEXT: arith.addf
// FWD-NEXT: llvm.call_intrinsic "llvm.nvvm.rcp.approx.ftz.f"
// FWD-NOT: math.exp
// FWD-NOT: math.sqrt
// FWD: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// FWD-NOT: atomic

// BWD: gpu.func @mhc_scale_bwd_n4_{{.*}}_main(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xbf16>,
// BWD-SAME: known_block_size = array<i32: 128, 1, 1>
// BWD: math.sqrt {{.*}} : f64
// BWD: math.exp {{.*}} : f64
// BWD-NOT: math.exp
// BWD-COUNT-8: gpu.shuffle  xor %{{.*}}, %c4_i32, %c32_i32 : i32
// BWD-COUNT-8: gpu.shuffle  xor %{{.*}}, %c2_i32, %c32_i32 : i32
// BWD-COUNT-8: gpu.shuffle  xor %{{.*}}, %c1_i32, %c32_i32 : i32
// BWD: gpu.func @mhc_scale_bwd_n4_{{.*}}_contrib_colsum(
// BWD: gpu.func @mhc_scale_bwd_n4_{{.*}}_contrib_partials_final(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xbf16>)
// BWD: arith.truncf %{{.*}} : f32 to bf16
// BWD-NOT: atomic
