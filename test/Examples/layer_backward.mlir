// The hand-written backward graph parses, verifies and, through the passes
// of scripts/example.sh (mhc-fuse-pre leaves gradient ops alone;
// mhc-fuse-layers sums x's three gradient contributions in-kernel through
// acc operands), needs one kernel per gradient op and no arith.addf.
// RUN: mhc-opt %mhc_src/examples/layer_backward.mlir --mhc-expand-layers --canonicalize --cse --mhc-fuse-pre --mhc-fuse-layers | FileCheck %s --check-prefix=IR
// RUN: mhc-opt %mhc_src/examples/layer_backward.mlir --mhc-expand-layers --canonicalize --cse --mhc-fuse-pre --mhc-fuse-layers --mhc-specialize=arch=sm_90a --mhc-report-kernels -o /dev/null | FileCheck %s

// The rewritten graph (independent of which kernels exist): in block order,
// aggregate_grad adds expand_combine_grad's gx, project_grad adds that.
// IR-LABEL: func.func @backward
// IR-NOT: arith.addf
// IR: %{{[^ ,]+}}, %{{[^ ,]+}}, %[[GX_RES:[^ ,]+]], %{{[^ ,]+}} = mhc.expand_combine_grad cn %arg0
// IR: %[[GX_AGG:[^ ,]+]], %{{[^ ,]+}} = mhc.aggregate_grad cn {{.*}} acc %[[GX_RES]]
// IR: %[[GX:[^ ,]+]], %[[GPHI:[^ ,]+]] = mhc.project_grad cn {{.*}} acc %[[GX_AGG]]
// IR-NOT: arith.addf
// IR: return %[[GX]], %[[GPHI]]

// The kernels: every gradient op, the acc=1 ones included, is generated.
// CHECK: mhc kernels:
// CHECK-NEXT: codegen expand_combine.bwd;n=4;act=bf16;layout=cn;C=2048;bias=0;arch=sm_90a
// CHECK-NEXT: codegen aggregate.bwd;n=4;act=bf16;layout=cn;C=2048;acc=1;arch=sm_90a
// CHECK-NEXT: codegen sinkhorn.bwd;n=4;mode=log;iters=20;arch=sm_90a
// CHECK-NEXT: codegen scale.bwd;n=4;param=f32;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;arch=sm_90a
// CHECK-NEXT: codegen project.bwd;n=4;act=bf16;param=f32;layout=cn;C=2048;tf32=0;weight=0;acc=1;arch=sm_90a
// CHECK-NEXT: summary: 5 distinct kernel(s), 5 for codegen, 0 on the reference path, 0 op(s) unspecialised
