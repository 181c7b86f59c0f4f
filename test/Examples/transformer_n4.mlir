// The shipped model graph lowers through the whole mhc pipeline (the passes
// of scripts/example.sh): four layers become five kernel ops, the first
// layer's pre step one mhc.pre, each of the three layer seams (a layer's
// post step and the next layer's pre step) one mhc.post_pre, the last
// layer's post step one expand_combine: three distinct kernels, and for the
// dynamic token count the pre step's and the seams' one-launch kernels
// beside them (coop=1, which the runtime takes at M <= 256): five.
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir | mhc-opt | FileCheck %s --check-prefix=PARSE
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir --mhc-expand-layers --canonicalize --cse --mhc-fuse-pre --mhc-fuse-layers | FileCheck %s --check-prefix=IR
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir --mhc-expand-layers --canonicalize --cse --mhc-fuse-pre --mhc-fuse-layers --mhc-specialize=arch=sm_90a --mhc-report-kernels -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: mhc-opt %mhc_src/examples/transformer_n4.mlir --mhc-expand-layers --canonicalize --cse --mhc-fuse-pre --mhc-fuse-layers --mhc-specialize=arch=sm_90a --mhc-generate-kernels | FileCheck %s --check-prefix=KERNELS

// PARSE-COUNT-4: mhc.layer nc

// The fused graph (independent of which kernels exist).
// IR-LABEL: func.func @forward
// IR-NOT: mhc.layer
// IR-NOT: mhc.{{project|scale|sinkhorn|aggregate}}
// IR: %{{[^ ,]+}}, %{{[^ ,]+}}, %{{[^ ,]+}}, %[[POST0:[^ ,]+]], %{{[^ ,]+}}, %[[P0:[^ ,]+]], %[[Y0:[^ ,]+]] = mhc.pre nc %arg0, %arg1, %arg2, %arg3 weight %arg4
// IR-NEXT: %[[F0:.*]] = call @attention(%[[Y0]])
// IR-NEXT: %[[X1:[^ ,]+]], {{.*}}, %[[POST1:[^ ,]+]], %{{[^ ,]+}}, %[[P1:[^ ,]+]], %[[Y1:[^ ,]+]] = mhc.post_pre nc %[[F0]], %[[POST0]], %arg0, %[[P0]] next %arg5, %arg6, %arg7 weight %arg8
// IR-NEXT: %[[F1:.*]] = call @mlp(%[[Y1]])
// IR-NEXT: %[[X2:[^ ,]+]], {{.*}}, %[[POST2:[^ ,]+]], %{{[^ ,]+}}, %[[P2:[^ ,]+]], %[[Y2:[^ ,]+]] = mhc.post_pre nc %[[F1]], %[[POST1]], %[[X1]], %[[P1]] next %arg9, %arg10, %arg11 weight %arg12
// IR-NEXT: %[[F2:.*]] = call @attention(%[[Y2]])
// IR-NEXT: %[[X3:[^ ,]+]], {{.*}}, %[[POST3:[^ ,]+]], %{{[^ ,]+}}, %[[P3:[^ ,]+]], %[[Y3:[^ ,]+]] = mhc.post_pre nc %[[F2]], %[[POST2]], %[[X2]], %[[P2]] next %arg13, %arg14, %arg15 weight %arg16
// IR-NEXT: %[[F3:.*]] = call @mlp(%[[Y3]])
// IR-NEXT: %[[X4:.*]] = mhc.expand_combine nc %[[F3]], %[[POST3]], %[[X3]], %[[P3]]
// IR-NEXT: return %[[X4]]

// The kernel specs: all five generated.
// REPORT: mhc kernels:
// REPORT-NEXT: mhc_pre_fwd_n4_{{[0-9a-f]+}} 1 op(s) codegen pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=1;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=20;eps=9.99999997e-07;arch=sm_90a
// REPORT-NEXT: mhc_pre_fwd_n4_{{[0-9a-f]+}} 1 op(s) codegen pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=1;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=20;eps=9.99999997e-07;coop=1;arch=sm_90a
// REPORT-NEXT: mhc_post_pre_fwd_n4_{{[0-9a-f]+}} 3 op(s) codegen post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=1;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=20;eps=9.99999997e-07;bias=0;arch=sm_90a
// REPORT-NEXT: mhc_post_pre_fwd_n4_{{[0-9a-f]+}} 3 op(s) codegen post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=1;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=20;eps=9.99999997e-07;bias=0;coop=1;arch=sm_90a
// REPORT-NEXT: mhc_expand_combine_fwd_n4_{{[0-9a-f]+}} 1 op(s) codegen expand_combine.fwd;n=4;act=bf16;layout=nc;C=2048;bias=0;arch=sm_90a
// REPORT-NEXT: summary: 5 distinct kernel(s), 5 for codegen, 0 on the reference path, 0 op(s) unspecialised

// The generated kernel modules (what --mhc-write-bundle compiles to cubins):
// one per distinct spec, the three seams sharing one.
// KERNELS: mhc.pre nc {{.*}}mhc.kernel = @[[PRE:mhc_pre_fwd_n4_[0-9a-f]+]], mhc.kernel_one_launch = @[[PRE1:mhc_pre_fwd_n4_[0-9a-f]+]]
// KERNELS-COUNT-3: mhc.post_pre nc {{.*}}mhc.kernel = @[[SEAM:mhc_post_pre_fwd_n4_[0-9a-f]+]], mhc.kernel_one_launch = @[[SEAM1:mhc_post_pre_fwd_n4_[0-9a-f]+]]
// KERNELS: mhc.expand_combine nc {{.*}}mhc.kernel = @[[EC:mhc_expand_combine_fwd_n4_[0-9a-f]+]]
// KERNELS: gpu.module @[[PRE]]
// KERNELS: gpu.module @[[PRE1]]
// KERNELS: gpu.module @[[SEAM]]
// KERNELS: gpu.module @[[SEAM1]]
// KERNELS: gpu.module @[[EC]]
