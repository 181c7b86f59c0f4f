// Kernels of the layer seam (mhc.post_pre, docs/design/seam.md): the
// forward is expand_combine's launch (stage "post", writing x_next) then
// the pre step's pack, partial and tail (stage "pre", reading x_next), each
// the part's own kernel under the name <seam>_<stage>_<launch>
// (seam-parts.test compares their PTX); the buffers are the contract's, in
// its order, then the stages' private workspaces. The backward needs its
// parts' in-kernel accumulation (acc): aggregate's gx is gx_next plus its
// own (g1), the projection's is g1 plus its own (g), which expand_combine's
// backward takes: no n-stream sum outside the kernels.
// The flagship ((C, n), n = 4, bf16, f32 parameters, sm_90a) fuses instead:
// the projection's partial launch computes x_next from x, f, post, P, bias
// where it loaded x_next, stores it and multiplies it (stage "expand"), and
// the pre step's tail follows. Its backward's token pass is aggregate's
// gpre alone (no g1) and the projection backward forms aggregate's gx
// from gx_next, gy and pre where it adds its acc (BackwardFused.cpp).
// (The inputs are kernel specs; this file has no IR of its own.)
// RUN: mhc-compile --spec 'post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=1;arch=sm_90a' --print-ir | FileCheck %s
// RUN: rm -rf %t && mhc-compile --spec 'post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=1;arch=sm_90a' -o %t && FileCheck %s --check-prefix=MANIFEST < %t/mhc_post_pre_fwd_n4_74d1a7d827492980.json
// RUN: mhc-compile --spec 'post_pre.fwd;n=4;act=bf16;param=f32;layout=cn;C=2048;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=FUSED
// RUN: rm -rf %t && mhc-compile --spec 'post_pre.bwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=0;arch=sm_90a' -o %t && FileCheck %s --check-prefix=BWD < %t/mhc_post_pre_bwd_n4_ecd03f9c9e131fcc.json
// RUN: rm -rf %t && mhc-compile --spec 'post_pre.bwd;n=4;act=bf16;param=f32;layout=cn;C=2048;tf32=1;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=0;arch=sm_90a' -o %t && FileCheck %s --check-prefix=FUSEDBWD < %t/mhc_post_pre_bwd_n4_f75843c672ee4477.json
// RUN: not mhc-compile --spec 'post_pre.bwd;n=3;act=bf16;param=f32;layout=nc;C=1001;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=1000;bias=0;arch=sm_90a' -o %t 2>&1 | FileCheck %s --check-prefix=PART

// CHECK: gpu.module @mhc_post_pre_fwd_n4_74d1a7d827492980
// CHECK: gpu.func @mhc_post_pre_fwd_n4_74d1a7d827492980_post_main(
// CHECK: gpu.func @mhc_post_pre_fwd_n4_74d1a7d827492980_pre_pack(
// CHECK: gpu.func @mhc_post_pre_fwd_n4_74d1a7d827492980_pre_partial(
// CHECK: gpu.func @mhc_post_pre_fwd_n4_74d1a7d827492980_pre_tail(
// CHECK-NOT: gpu.func

// The contract (operands, then results), then the pre stage's workspaces.
// MANIFEST: "spec": "post_pre.fwd;n=4;act=bf16;param=f32;layout=nc;C=2048;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=1;arch=sm_90a"
// MANIFEST: "split": {"tokens_per_block": 128,
// MANIFEST: "buffers": [
// MANIFEST-NEXT: {"name": "f", "dtype": "bf16", "role": "input", "elems": {"per_token": 2048,
// MANIFEST-NEXT: {"name": "post", "dtype": "f32", "role": "input", "elems": {"per_token": 4,
// MANIFEST-NEXT: {"name": "x", "dtype": "bf16", "role": "input", "elems": {"per_token": 8192,
// MANIFEST-NEXT: {"name": "P", "dtype": "f32", "role": "input", "elems": {"per_token": 16,
// MANIFEST-NEXT: {"name": "bias", "dtype": "f32", "role": "input", "elems": {"per_token": 0, "fixed": 2048,
// MANIFEST-NEXT: {"name": "phi", "dtype": "f32", "role": "input", "elems": {"per_token": 0, "fixed": 196608,
// MANIFEST-NEXT: {"name": "alpha", "dtype": "f32", "role": "input",
// MANIFEST-NEXT: {"name": "beta", "dtype": "f32", "role": "input",
// MANIFEST-NEXT: {"name": "weight", "dtype": "f32", "role": "input",
// MANIFEST-NEXT: {"name": "x_next", "dtype": "bf16", "role": "output", "elems": {"per_token": 8192,
// MANIFEST-NEXT: {"name": "h", "dtype": "f32", "role": "output", "elems": {"per_token": 24,
// MANIFEST-NEXT: {"name": "ms", "dtype": "f32", "role": "output",
// MANIFEST-NEXT: {"name": "pre", "dtype": "f32", "role": "output",
// MANIFEST-NEXT: {"name": "post_next", "dtype": "f32", "role": "output", "elems": {"per_token": 4,
// MANIFEST-NEXT: {"name": "logits", "dtype": "f32", "role": "output",
// MANIFEST-NEXT: {"name": "P_next", "dtype": "f32", "role": "output", "elems": {"per_token": 16,
// MANIFEST-NEXT: {"name": "y", "dtype": "bf16", "role": "output",
// MANIFEST-NEXT: {"name": "pre_packed", "dtype": "bf16", "role": "workspace",
// MANIFEST-NEXT: {"name": "pre_partials", "dtype": "f32", "role": "workspace", "elems": {"per_token": 0, "fixed": 0, "per_token_split": 25}}
// MANIFEST-NEXT: ],
// expand_combine writes x_next; the pre step reads it, and writes the next
// layer's post and P.
// MANIFEST: "entry": "mhc_post_pre_fwd_n4_74d1a7d827492980_post_main", "params": ["f", "post", "x", "P", "bias", "x_next", "M"]
// MANIFEST: "entry": "mhc_post_pre_fwd_n4_74d1a7d827492980_pre_pack", "params": ["phi", "weight", "pre_packed"]
// MANIFEST: "entry": "mhc_post_pre_fwd_n4_74d1a7d827492980_pre_partial", "params": ["x_next", "pre_packed", "phi", "weight", "pre_partials", "M", "S"]
// MANIFEST: "entry": "mhc_post_pre_fwd_n4_74d1a7d827492980_pre_tail", "params": ["pre_partials", "alpha", "beta", "x_next", "h", "ms", "pre", "post_next", "logits", "P_next", "y", "M", "S"]

// The fused forward: pack, expand + partials, tail. Per lane and chunk, 4
// pairs x 2 rows of 8 values: each one 4-stream fma chain after post * fb,
// rounded to bf16 once, stored to x_next (rows < M) and fed to mma.sync.
// x, f and the bias are loaded a chunk ahead: chunk 0's before the loop,
// chunk i + 1's in iteration i, carried in the loop's values. The block's
// post and P (128 tokens: 2 and 8 loads per thread) go to shared memory
// once, after chunk 0's loads and before the ring's barrier; the loop reads
// neither from global memory.
// FUSED: gpu.func @mhc_post_pre_fwd_n4_f0241967ad395345_expand_pack(
// FUSED: gpu.func @mhc_post_pre_fwd_n4_f0241967ad395345_expand_partial(%[[X:[a-z0-9]+]]: memref<?xbf16>, %[[F:[a-z0-9]+]]: memref<?xbf16>, %[[POST:[a-z0-9]+]]: memref<?xf32>, %[[P:[a-z0-9]+]]: memref<?xf32>, %[[BIAS:[a-z0-9]+]]: memref<?xf32>, %[[XN:[a-z0-9]+]]: memref<?xbf16>,
// FUSED-COUNT-8: vector.load %[[X]]{{.*}} : memref<?xbf16>, vector<8xbf16>
// FUSED-COUNT-8: vector.load %[[F]]{{.*}} : memref<?xbf16>, vector<2xbf16>
// FUSED-COUNT-2: memref.load %[[POST]][{{.*}}] : memref<?xf32>
// FUSED-COUNT-8: memref.load %[[P]][{{.*}}] : memref<?xf32>
// FUSED-COUNT-10: memref.store {{.*}} : memref<2560xf32, #gpu.address_space<workgroup>>
// FUSED: gpu.barrier
// FUSED: scf.for {{.*}} iter_args(
// FUSED-NOT: memref.load %[[POST]]
// FUSED-NOT: memref.load %[[P]]
// FUSED-COUNT-8: vector.load %[[X]]{{.*}} : memref<?xbf16>, vector<8xbf16>
// FUSED-COUNT-8: vector.load %[[F]]{{.*}} : memref<?xbf16>, vector<2xbf16>
// FUSED-NOT: memref.load %[[POST]]
// FUSED-NOT: memref.load %[[P]]
// FUSED-COUNT-8: vector.store %{{.*}}, %[[XN]]{{.*}} : memref<?xbf16>, vector<8xbf16>
// FUSED-NOT: memref.load %[[POST]]
// FUSED-NOT: memref.load %[[P]]
// FUSED: nvvm.mma.sync
// FUSED-NOT: vector.load %[[XN]]
// FUSED: scf.yield {{.*}} : {{.*}}, vector<8xbf16>, {{.*}}, vector<2xbf16>, {{.*}}, vector<2xf32>
// FUSED: gpu.func @mhc_post_pre_fwd_n4_f0241967ad395345_pre_tail(
// FUSED-NOT: gpu.func

// The backward's contract, then its intermediates and the stages' workspaces.
// BWD: "buffers": [
// BWD-NEXT: {"name": "gx_next", "dtype": "bf16", "role": "input", "elems": {"per_token": 8192,
// BWD-NEXT: {"name": "gy", "dtype": "bf16", "role": "input",
// BWD-NEXT: {"name": "gpost_next", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "gP_next", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "f", "dtype": "bf16", "role": "input",
// BWD-NEXT: {"name": "post", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "x", "dtype": "bf16", "role": "input",
// BWD-NEXT: {"name": "P", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "x_next", "dtype": "bf16", "role": "input",
// BWD-NEXT: {"name": "h", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "ms", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "pre", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "logits", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "phi", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "alpha", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "beta", "dtype": "f32", "role": "input",
// BWD-NEXT: {"name": "gx", "dtype": "bf16", "role": "output", "elems": {"per_token": 8192,
// BWD-NEXT: {"name": "gf", "dtype": "bf16", "role": "output",
// BWD-NEXT: {"name": "gpost", "dtype": "f32", "role": "output",
// BWD-NEXT: {"name": "gP", "dtype": "f32", "role": "output",
// BWD-NEXT: {"name": "gphi", "dtype": "f32", "role": "output",
// BWD-NEXT: {"name": "galpha", "dtype": "f32", "role": "output",
// BWD-NEXT: {"name": "gbeta", "dtype": "f32", "role": "output",
// BWD-NEXT: {"name": "g1", "dtype": "bf16", "role": "workspace", "elems": {"per_token": 8192,
// BWD-NEXT: {"name": "gpre", "dtype": "f32", "role": "workspace",
// BWD-NEXT: {"name": "glogits", "dtype": "f32", "role": "workspace",
// BWD-NEXT: {"name": "gh", "dtype": "f32", "role": "workspace",
// BWD-NEXT: {"name": "gms", "dtype": "f32", "role": "workspace",
// BWD-NEXT: {"name": "scale_contrib", "dtype": "f32", "role": "workspace",
// BWD-NEXT: {"name": "scale_contrib_partials", "dtype": "f32", "role": "workspace",
// BWD-NEXT: {"name": "g", "dtype": "bf16", "role": "workspace", "elems": {"per_token": 8192,
// BWD: "entry": "mhc_post_pre_bwd_n4_ecd03f9c9e131fcc_aggregate_main", "params": ["gy", "x_next", "pre", "gx_next", "g1", "gpre", "M"]
// BWD: "entry": "mhc_post_pre_bwd_n4_ecd03f9c9e131fcc_sinkhorn_main", "params": ["gP_next", "logits", "glogits", "M"]
// BWD: "entry": "mhc_post_pre_bwd_n4_ecd03f9c9e131fcc_scale_main", "params": ["gpre", "gpost_next", "glogits", "h", "ms", "alpha", "beta", "gh", "gms", "scale_contrib", "M"]
// BWD: "entry": "mhc_post_pre_bwd_n4_ecd03f9c9e131fcc_project_main", "params": ["gh", "gms", "x_next", "phi", "g1", "g",
// BWD: "entry": "mhc_post_pre_bwd_n4_ecd03f9c9e131fcc_post_main", "params": ["g", "f", "post", "x", "P", "gf", "gpost", "gx", "gP", "M"]
// PART: the seam's part sinkhorn.bwd: sinkhorn backward keeps 6000 floats of history per token; at most 384 fit

// FUSEDBWD-NOT: "g1"
// FUSEDBWD: {"name": "gpre", "dtype": "f32", "role": "workspace",
// FUSEDBWD: {"name": "g", "dtype": "bf16", "role": "workspace", "elems": {"per_token": 8192,
// FUSEDBWD: "entry": "mhc_post_pre_bwd_n4_f75843c672ee4477_aggregate_main", "params": ["gy", "x_next", "gpre", "M"]
// FUSEDBWD: "entry": "mhc_post_pre_bwd_n4_f75843c672ee4477_project_main", "params": ["gh", "gms", "x_next", "phi", "gx_next", "gy", "pre", "g", "project_partials", "project_progress", "M"]
// FUSEDBWD: "entry": "mhc_post_pre_bwd_n4_f75843c672ee4477_post_main", "params": ["g", "f", "post", "x", "P", "gf", "gpost", "gx", "gP", "M"]
// FUSEDBWD-NOT: "g1"
