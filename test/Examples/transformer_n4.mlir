// The shipped model graph lowers through the whole mhc pipeline (the passes
// of scripts/example.sh): four layers become eight kernel ops, each layer's
// pre step one mhc.pre and its post step one expand_combine, sharing two
// distinct kernels.
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir | mhc-opt | FileCheck %s --check-prefix=PARSE
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir --mhc-expand-layers --canonicalize --cse --mhc-fuse-pre | FileCheck %s --check-prefix=IR
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir --mhc-expand-layers --canonicalize --cse --mhc-fuse-pre --mhc-specialize=arch=sm_90a --mhc-report-kernels -o /dev/null | FileCheck %s --check-prefix=REPORT

// PARSE-COUNT-4: mhc.layer nc

// IR-LABEL: func.func @forward
// IR-NOT: mhc.layer
// IR-NOT: mhc.{{project|scale|sinkhorn|aggregate}}
// IR: mhc.pre nc %arg0
// IR: call @attention
// IR: %[[X1:.*]] = mhc.expand_combine nc %{{.*}}, %{{.*}}, %arg0
// IR: mhc.pre nc %[[X1]]
// IR: call @mlp
// IR: %[[X2:.*]] = mhc.expand_combine nc %{{.*}}, %{{.*}}, %[[X1]]
// IR: mhc.pre nc %[[X2]]
// IR: call @attention
// IR: %[[X3:.*]] = mhc.expand_combine nc %{{.*}}, %{{.*}}, %[[X2]]
// IR: mhc.pre nc %[[X3]]
// IR: call @mlp
// IR: %[[X4:.*]] = mhc.expand_combine nc %{{.*}}, %{{.*}}, %[[X3]]
// IR-NOT: mhc.{{project|scale|sinkhorn|aggregate}}
// IR: return %[[X4]]

// REPORT: mhc kernels:
// REPORT-NEXT: mhc_pre_fwd_n4_{{[0-9a-f]+}} 4 op(s) codegen pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=1;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=20;eps=9.99999997e-07;arch=sm_90a
// REPORT-NEXT: mhc_expand_combine_fwd_n4_{{[0-9a-f]+}} 4 op(s) codegen expand_combine.fwd;n=4;act=bf16;layout=nc;C=2048;bias=0;arch=sm_90a
// REPORT-NEXT: summary: 2 distinct kernel(s), 2 for codegen, 0 on the reference path, 0 op(s) unspecialised
