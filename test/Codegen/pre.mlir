// Kernels of the fused pre step (mhc.pre): the projection's own launches
// (here the bf16 pack and the split-K partial) and one tail launch with a
// block per token that sums the partials in split order, scales the logits
// into shared memory, runs the Sinkhorn iterations in thread 0 while warps
// 1.. stream y = pre . x; every intermediate is an output. (The inputs are kernel
// specs; this file has no IR of its own.)
// RUN: mhc-compile --spec 'pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=20;eps=9.99999997e-07;arch=sm_90a' --print-ir | FileCheck %s
// RUN: rm -rf %t && mhc-compile --spec 'pre.fwd;n=4;act=bf16;param=f32;layout=cn;C=4096;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;arch=sm_90a' -o %t && FileCheck %s --check-prefix=MANIFEST < %t/mhc_pre_fwd_n4_be533d40e1601ef6.json
// RUN: FileCheck %s --check-prefix=PTX < %t/mhc_pre_fwd_n4_be533d40e1601ef6.ptx
// RUN: not mhc-compile --spec 'pre.bwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;arch=sm_90a' -o %t 2>&1 | FileCheck %s --check-prefix=BWD

// CHECK: gpu.module @mhc_pre_fwd_n4_8f84e46a152eba4e
// CHECK: gpu.func @mhc_pre_fwd_n4_8f84e46a152eba4e_pack(
// CHECK: gpu.func @mhc_pre_fwd_n4_8f84e46a152eba4e_partial(
// CHECK: gpu.func @mhc_pre_fwd_n4_8f84e46a152eba4e_tail(%[[PART:.*]]: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %[[X:.*]]: memref<?xbf16>, %[[H:.*]]: memref<?xf32>, %[[MS:.*]]: memref<?xf32>, %[[PRE:.*]]: memref<?xf32>, %[[POST:.*]]: memref<?xf32>, %[[LOGITS:.*]]: memref<?xf32>, %[[P:.*]]: memref<?xf32>, %[[Y:.*]]: memref<?xbf16>, %{{.*}}: i64, %{{.*}}: i64) workgroup(%[[ROW:.*]] : memref<25xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[MIX:.*]] : memref<24xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64},
// The token's S partials staged in shared memory ([S, 25], S up to the
// SM count: 132 x 25 on sm_90a), sixteen loads a thread before its stores;
// then a thread per column sums them in split order (sixteen loads a step,
// then the remainder).
// CHECK-SAME: %[[PARTS:.*]] : memref<3300xf32, #gpu.address_space<workgroup>>)
// CHECK: scf.for %{{.*}} = %thread_id_x to %{{.*}} step %c4096
// CHECK-COUNT-16: memref.load %[[PART]]
// CHECK: memref.store {{.*}}, %[[PARTS]]
// CHECK: gpu.barrier
// CHECK: scf.for {{.*}} step %c16{{.*}} iter_args
// CHECK-COUNT-16: memref.load %[[PARTS]]
// CHECK: scf.for
// CHECK-NOT: memref.load %[[PART]]
// CHECK: memref.store {{.*}}, %[[MS]]
// CHECK: memref.store {{.*}}, %[[H]]
// CHECK: gpu.barrier
// CHECK: memref.store {{.*}}, %[[PRE]]
// CHECK: memref.store {{.*}}, %[[POST]]
// CHECK: memref.store {{.*}}, %[[LOGITS]]
// CHECK: gpu.barrier
// softmax_eps: T - 1 = 19 more row/column normalisations after the first.
// CHECK: scf.for %{{.*}} = %c1 to %c20 step %c1
// CHECK-COUNT-16: memref.store {{.*}}, %[[P]]
// y by warps 1..7 (224 threads), the thread's two chunks loaded before
// either is summed.
// CHECK: scf.for %{{.*}} = %{{.*}} to %c256 step %c448
// CHECK-COUNT-8: vector.load %[[X]]{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// CHECK: vector.store {{.*}}, %[[Y]]{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// CHECK: vector.store {{.*}}, %[[Y]]{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// CHECK-NOT: atomic

// MANIFEST: "spec": "pre.fwd;n=4;act=bf16;param=f32;layout=cn;C=4096;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;arch=sm_90a"
// One token block (M <= 128): no pack launch, the partial splits phi.
// MANIFEST: "entry": "mhc_pre_fwd_n4_be533d40e1601ef6_pack"
// MANIFEST-SAME: "min_tokens": 129
// MANIFEST: "entry": "mhc_pre_fwd_n4_be533d40e1601ef6_partial", "params": ["x", "packed", "phi", "partials", "M", "S"]
// MANIFEST: "entry": "mhc_pre_fwd_n4_be533d40e1601ef6_tail"
// MANIFEST-SAME: "params": ["partials", "alpha", "beta", "x", "h", "ms", "pre", "post", "logits", "P", "y", "M", "S"]
// MANIFEST-SAME: "grid": {"tokens_per_block": 1,

// Each launch is lowered as its own LLVM module, on its own thread; the PTX
// is one module again: one header, the launches in order.
// PTX: .version
// PTX-NOT: .version
// PTX: .visible .entry mhc_pre_fwd_n4_be533d40e1601ef6_pack(
// PTX-NOT: .version
// PTX: .visible .entry mhc_pre_fwd_n4_be533d40e1601ef6_partial(
// PTX-NOT: .version
// PTX: .visible .entry mhc_pre_fwd_n4_be533d40e1601ef6_tail(
// PTX-NOT: .version

// BWD: the pre step's backward kernel is the flagship's (n = 4, bf16 activations, f32 parameters, sm_90a, layout cn)
