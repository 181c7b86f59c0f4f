// The decode-size forward in one cooperative launch (docs/design/serve.md,
// spec field coop=1): one gpu.func per spec that takes the runtime's grid
// barrier words ("sync", i32) after M, computes x_next (the seam) and the
// block's split-K partials, waits on two grid barriers (integer atomics on
// the sync words; no float atomics anywhere), and finishes the tokens and y;
// the manifest marks the launch cooperative, with a fixed grid of one block
// per flagship SM (H100: 132; fewer where C has fewer channels). On sm_90+
// it is a programmatic dependent launch ("pdl"): griddepcontrol.wait (then
// launch_dependents) after the block's own prologue and before its first
// global access; sm_80 has neither.
// (The inputs are kernel specs; this file has no IR of its own.)
// RUN: mhc-compile --spec 'post_pre.fwd;n=4;act=bf16;param=f32;layout=cn;C=4096;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;bias=1;coop=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=SEAM
// RUN: rm -rf %t.s && mhc-compile --spec 'post_pre.fwd;n=4;act=bf16;param=f32;layout=cn;C=4096;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;bias=1;coop=1;arch=sm_90a' -o %t.s && cat %t.s/*.json | FileCheck %s --check-prefix=MANIFEST
// RUN: cat %t.s/*.ptx | FileCheck %s --check-prefix=PTX
// RUN: cat %t.s/*.ptx | FileCheck %s --check-prefix=NOFENCE
// RUN: mhc-compile --spec 'pre.fwd;n=2;act=f32;param=bf16;layout=nc;C=64;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=20;eps=9.99999997e-07;coop=1;arch=sm_80' --print-ir | FileCheck %s --check-prefix=PRE
// RUN: rm -rf %t.p && mhc-compile --spec 'pre.fwd;n=2;act=f32;param=bf16;layout=nc;C=64;tf32=0;weight=1;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=softmax_eps;iters=20;eps=9.99999997e-07;coop=1;arch=sm_80' -o %t.p && cat %t.p/*.json | FileCheck %s --check-prefix=PREMANIFEST
// RUN: not mhc-compile --spec 'post_pre.bwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=0;coop=1;arch=sm_90a' -o %t.b 2>&1 | FileCheck %s --check-prefix=BWD

// SEAM: gpu.module @mhc_post_pre_fwd_n4_
// SEAM-NOT: gpu.func
// SEAM: gpu.func @mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_one(%{{[^:]*}}: memref<?xbf16>, %{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xbf16>, %{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xf32>, %[[XN:[^:]*]]: memref<?xbf16>, {{.*}}, %{{[^:]*}}: i64, %[[SYNC:[^:]*]]: memref<?xi32>)
// The prologue (xs zeroed) touches shared memory only; then the wait for the
// stream's previous grid and the go for the next one.
// SEAM-NOT: memref.load %arg
// SEAM-NOT: vector.load
// SEAM-NOT: memref.store {{.*}} %arg{{[0-9]+}}[{{[^]]*}}] : memref<?x
// SEAM: gpu.barrier
// SEAM-NEXT: llvm.inline_asm has_side_effects asm_dialect = att "griddepcontrol.wait;"
// SEAM-NEXT: llvm.inline_asm has_side_effects asm_dialect = att "griddepcontrol.launch_dependents;"
// Phase 1: a token's n values of x loaded and x_next stored as one vector
// each (layout cn, 4 bf16), xs read a quad of tokens at a time, the
// partials written.
// SEAM: vector.load %{{[^[]*}}[{{[^]]*}}] {alignment = 8 : i64} : memref<?xbf16>, vector<4xbf16>
// SEAM: vector.store {{.*}}, %[[XN]][{{[^]]*}}] {alignment = 8 : i64} : memref<?xbf16>, vector<4xbf16>
// SEAM: vector.load {{.*}} {alignment = 16 : i64} : memref<2080xf32, #gpu.address_space<workgroup>>, vector<4xf32>
// The first grid barrier on the sync words, between block barriers.
// SEAM: gpu.barrier
// SEAM: memref.extract_aligned_pointer_as_index %[[SYNC]]
// SEAM: llvm.inline_asm has_side_effects {{.*}}atom.acq_rel.gpu.global.add.u32{{.*}}red.release.gpu.global.add.u32{{.*}}ld.acquire.gpu.global.u32
// SEAM: gpu.barrier
// Decode (M <= 16, the tile): no second grid barrier (every block finds
// pre itself, y from shared memory, then the tokens it owns).
// SEAM: %[[DECODE:[0-9]+]] = arith.cmpi ult, %{{[0-9]+}}, %c17 : index
// SEAM-NEXT: scf.if %[[DECODE]] {
// SEAM-NOT: atom.acq_rel
// SEAM: scf.for %{{[^ ]*}} = %block_id_x to %{{[0-9]+}} step %c132 {
// SEAM-NOT: atom.acq_rel
// Past the tile: the owners finish their tokens, then the second barrier.
// SEAM: scf.for %{{[^ ]*}} = %block_id_x to %{{[0-9]+}} step %c132 {
// SEAM: llvm.inline_asm has_side_effects {{.*}}atom.acq_rel.gpu.global.add.u32
// SEAM-NOT: llvm.inline_asm has_side_effects {{.*}}atom
// SEAM-NOT: atomic_rmw
// SEAM: gpu.return
// SEAM-NOT: gpu.func

// MANIFEST: "spec": "post_pre.fwd;{{.*}};bias=1;coop=1;arch=sm_90a"
// MANIFEST: "name": "partials", "dtype": "f32", "role": "workspace", "elems": {"per_token": 3300, "fixed": 0, "per_token_split": 0}
// MANIFEST: "launches": [
// MANIFEST-NEXT: {"entry": "mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_one", "params": ["f", "post", "x", "P", "bias", "x_next", "phi", "alpha", "beta", "h", "ms", "pre", "post_next", "logits", "P_next", "y", "partials", "M", "sync"], "ptx_params": 91, "block": [256, 1, 1], "grid": {"tokens_per_block": 0, "fixed_blocks": 132, "times_split": false, "items_per_token": 0, "items_per_block": 0}, "dynamic_shared_bytes": 0, "cooperative": true, "pdl": true,
// MANIFEST-NEXT: ]

// PTX: .entry mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_one(
// PTX-NOT: ld.global
// PTX: griddepcontrol.wait;
// PTX: griddepcontrol.launch_dependents;
// PTX: atom.acq_rel.gpu.global.add.u32
// PTX: red.release.gpu.global.add.u32
// PTX: atom.acq_rel.gpu.global.add.u32
// PTX-NOT: .entry
// PTX-NOT: atom.global.add.f32

// The grid barriers order the blocks' writes by their release and acquire
// operations alone: no fence instruction in the kernel.
// NOFENCE: .entry
// NOFENCE-NOT: fence.

// The pre step: x read (not computed), 64 blocks for C = 64 (a channel each).
// PRE: gpu.func @mhc_pre_fwd_n2_{{[0-9a-f]+}}_one(%{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xbf16>, %{{[^:]*}}: memref<?xbf16>, {{.*}}, %{{[^:]*}}: i64, %{{[^:]*}}: memref<?xi32>)
// PRE-NOT: griddepcontrol
// PRE-COUNT-2: atom.acq_rel.gpu.global.add.u32
// PRE-NOT: griddepcontrol
// PRE-NOT: gpu.func
// PREMANIFEST: "fixed_blocks": 64, {{.*}} "cooperative": true,
// PREMANIFEST-NOT: "pdl"
// PREMANIFEST-NOT: "entry"

// BWD: coop is only a field of the forward of pre and post_pre, not of post_pre.bwd
