// The hand-written backward graph parses, verifies and, through the passes
// of scripts/example.sh (mhc-fuse-pre leaves gradient ops alone), needs one
// kernel per gradient op.
// RUN: mhc-opt %mhc_src/examples/layer_backward.mlir --mhc-expand-layers --canonicalize --cse --mhc-fuse-pre --mhc-specialize=arch=sm_90a --mhc-report-kernels -o /dev/null | FileCheck %s

// CHECK: mhc kernels:
// CHECK-NEXT: expand_combine.bwd;n=4;act=bf16;layout=cn;C=2048;bias=0;arch=sm_90a
// CHECK-NEXT: aggregate.bwd;n=4;act=bf16;layout=cn;C=2048;arch=sm_90a
// CHECK-NEXT: sinkhorn.bwd;n=4;mode=log;iters=20;arch=sm_90a
// CHECK-NEXT: scale.bwd;n=4;param=f32;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;arch=sm_90a
// CHECK-NEXT: project.bwd;n=4;act=bf16;param=f32;layout=cn;C=2048;tf32=0;weight=0;arch=sm_90a
// CHECK-NEXT: summary: 5 distinct kernel(s), 5 for codegen, 0 on the reference path, 0 op(s) unspecialised
