// The shipped model graph lowers through the whole mhc pipeline: four layers
// become twenty kernel ops sharing five distinct kernels.
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir | mhc-opt | FileCheck %s --check-prefix=PARSE
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir --mhc-expand-layers --canonicalize --cse | FileCheck %s --check-prefix=IR
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir --mhc-expand-layers --canonicalize --cse --mhc-specialize=arch=sm_90a --mhc-report-kernels -o /dev/null | FileCheck %s --check-prefix=REPORT

// PARSE-COUNT-4: mhc.layer nc

// IR-LABEL: func.func @forward
// IR-NOT: mhc.layer
// IR: mhc.project nc %arg0
// IR: call @attention
// IR: %[[X1:.*]] = mhc.expand_combine nc %{{.*}}, %{{.*}}, %arg0
// IR: mhc.project nc %[[X1]]
// IR: call @mlp
// IR: %[[X2:.*]] = mhc.expand_combine nc %{{.*}}, %{{.*}}, %[[X1]]
// IR: mhc.project nc %[[X2]]
// IR: call @attention
// IR: %[[X3:.*]] = mhc.expand_combine nc %{{.*}}, %{{.*}}, %[[X2]]
// IR: mhc.project nc %[[X3]]
// IR: call @mlp
// IR: %[[X4:.*]] = mhc.expand_combine nc %{{.*}}, %{{.*}}, %[[X3]]
// IR: return %[[X4]]

// REPORT: mhc kernels:
// REPORT-NEXT: mhc_project_fwd_n4_{{[0-9a-f]+}} 4 op(s) codegen project.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=1;weight=1;arch=sm_90a
// REPORT-NEXT: mhc_scale_fwd_n4_{{[0-9a-f]+}} 4 op(s) codegen scale.fwd;n=4;param=f32;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;arch=sm_90a
// REPORT-NEXT: mhc_sinkhorn_fwd_n4_{{[0-9a-f]+}} 4 op(s) codegen sinkhorn.fwd;n=4;mode=softmax_eps;iters=20;eps=9.99999997e-07;arch=sm_90a
// REPORT-NEXT: mhc_aggregate_fwd_n4_{{[0-9a-f]+}} 4 op(s) codegen aggregate.fwd;n=4;act=bf16;layout=nc;C=2048;arch=sm_90a
// REPORT-NEXT: mhc_expand_combine_fwd_n4_{{[0-9a-f]+}} 4 op(s) codegen expand_combine.fwd;n=4;act=bf16;layout=nc;C=2048;bias=0;arch=sm_90a
// REPORT-NEXT: summary: 5 distinct kernel(s), 5 for codegen, 0 on the reference path, 0 op(s) unspecialised
