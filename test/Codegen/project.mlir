// Kernels of mhc.project. The forward for f16/f32 activations (and for any
// activations on sm_80) runs on the tensor cores as mma.sync m16n8k8 tf32,
// with split-K partials reduced in order by a last launch; without the tf32
// flag each k-step takes two mma's (phi split into a tf32 high part and the
// rest), with it one. For bf16 activations on sm_90a a pack launch splits
// phi w into bf16 parts (2 with the tf32 flag, 3 without) in fragment order,
// and the partial launch multiplies bf16 x by them (mma.sync m16n8k16 bf16)
// with each chunk's parts brought into a shared ring by one bulk copy: per
// 32-column pair, 2 k-steps x 3 n-tiles x parts mma's. The backward is one fused pass over
// x on the tensor cores too: per 8-token step and 16-column k-tile, D^T =
// phi^T gh^T and gphi^T += x^T gh; without the tf32 flag 3 + 2 mma's per
// (k-tile, 8 rows of N): n = 4 takes 2 k-tiles x 3 -> 30 mma.sync per step.
// gphi and gw leave through fixed-order partials. No atomics.
// RUN: mhc-compile --spec 'project.fwd;n=4;act=f16;param=f32;layout=nc;C=7168;tf32=0;weight=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=FWD
// RUN: mhc-compile --spec 'project.fwd;n=4;act=f16;param=f32;layout=nc;C=7168;tf32=1;weight=0;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=TF32
// RUN: mhc-compile --spec 'project.fwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=1;weight=0;arch=sm_80' --print-ir | FileCheck %s --check-prefix=SM80
// RUN: mhc-compile --spec 'project.fwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=1;weight=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=STAGED
// RUN: mhc-compile --spec 'project.fwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=0;weight=0;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=STAGED3
// RUN: rm -rf %t.s && mhc-compile --spec 'project.fwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=1;weight=0;arch=sm_90a' -o %t.s && cat %t.s/*.ptx | FileCheck %s --check-prefix=STAGEDPTX
// RUN: mhc-compile --spec 'project.bwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=0;weight=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=BWD
// RUN: rm -rf %t.b && mhc-compile --spec 'project.bwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=0;weight=1;arch=sm_90a' -o %t.b && cat %t.b/*.ptx | FileCheck %s --check-prefix=BWDPTX
// RUN: rm -rf %t.p && mhc-compile --spec 'project.bwd;n=4;act=bf16;param=f32;layout=nc;C=4096;tf32=1;weight=0;arch=sm_90a' -o %t.p && cat %t.p/*.ptx | FileCheck %s --check-prefix=BWDPACE
// RUN: cat %t.p/*.json | FileCheck %s --check-prefix=BWDPACEJSON
// RUN: rm -rf %t.c && mhc-compile --spec 'project.bwd;n=4;act=f32;param=f32;layout=nc;C=7168;tf32=1;weight=0;arch=sm_90a' -o %t.c && cat %t.c/*.ptx | FileCheck %s --check-prefix=BWDRING
// RUN: rm -rf %t.e && mhc-compile --spec 'project.bwd;n=8;act=bf16;param=f32;layout=cn;C=9216;tf32=1;weight=0;arch=sm_90a' -o %t.e && cat %t.e/*.ptx | FileCheck %s --check-prefix=BWD8
// RUN: cat %t.e/*.json | FileCheck %s --check-prefix=BWD8JSON
// RUN: rm -rf %t.v && mhc-compile --spec 'project.bwd;n=8;act=bf16;param=f32;layout=cn;C=7168;tf32=1;weight=0;arch=sm_90a' -o %t.v && cat %t.v/*.ptx | FileCheck %s --check-prefix=WIDE8
// RUN: cat %t.v/*.json | FileCheck %s --check-prefix=WIDE8JSON
// RUN: rm -rf %t.s && mhc-compile --spec 'project.bwd;n=6;act=bf16;param=f32;layout=nc;C=4096;tf32=1;weight=0;arch=sm_90a' -o %t.s && cat %t.s/*.ptx | FileCheck %s --check-prefix=BWD6
// RUN: rm -rf %t.w && mhc-compile --spec 'project.bwd;n=8;act=bf16;param=f32;layout=cn;C=7168;tf32=1;weight=1;arch=sm_90a' -o %t.w && cat %t.w/*.ptx | FileCheck %s --check-prefix=BWD8W
// RUN: mhc-compile --spec 'project.fwd;n=8;act=bf16;param=f32;layout=cn;C=7168;tf32=1;weight=0;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=FWD8
// RUN: mhc-compile --spec 'project.fwd;n=8;act=bf16;param=f32;layout=cn;C=7168;tf32=1;weight=0;arch=sm_100a' --print-ir | FileCheck %s --check-prefix=FWD8B
// RUN: rm -rf %t.w8 && mhc-compile --spec 'project.fwd;n=8;act=bf16;param=f32;layout=cn;C=7168;tf32=1;weight=0;arch=sm_90a' -o %t.w8 && cat %t.w8/*.ptx | FileCheck %s --check-prefix=FWD8PTX
// RUN: rm -rf %t.f8 && mhc-compile --spec 'project.fwd;n=8;act=bf16;param=f32;layout=cn;C=7168;tf32=1;weight=0;arch=sm_90a' -o %t.f8 && cat %t.f8/*.json | FileCheck %s --check-prefix=FWD8SPLIT
// RUN: rm -rf %t.f4 && mhc-compile --spec 'project.fwd;n=4;act=bf16;param=f32;layout=cn;C=7168;tf32=1;weight=0;arch=sm_90a' -o %t.f4 && cat %t.f4/*.json | FileCheck %s --check-prefix=FWD4SPLIT
// RUN: rm -rf %t && mhc-compile --spec 'project.fwd;n=4;act=f16;param=f32;layout=nc;C=7168;tf32=0;weight=1;arch=sm_90a' -o %t && cat %t/*.ptx | FileCheck %s --check-prefix=PTX

// FWD: gpu.func @mhc_project_fwd_n4_{{[0-9a-f]+}}_partial(%{{.*}}: memref<?xf16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// FWD-DAG: arith.constant 28672 : index
// FWD: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xf16>, vector<8xf16>
// FWD-COUNT-2: nvgpu.mma.sync(%{{.*}}, %{{.*}}, %{{.*}}) {mmaShape = [16, 8, 8], tf32Enabled} : (vector<4x1xf32>, vector<2x1xf32>, vector<2x2xf32>) -> vector<2x2xf32>
// FWD: gpu.func @mhc_project_fwd_n4_{{[0-9a-f]+}}_reduce(
// FWD-NOT: atomic

// TF32: nvgpu.mma.sync
// TF32-NOT: arith.andi
// TF32: gpu.func

// SM80: gpu.func @mhc_project_fwd_n4_{{.*}}_partial(
// SM80: nvgpu.mma.sync({{.*}}) {mmaShape = [16, 8, 8], tf32Enabled}
// SM80-NOT: nvvm.cp.async.bulk

// STAGED: gpu.func @mhc_project_fwd_n4_{{.*}}_pack(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xbf16>)
// STAGED: arith.truncf {{.*}} : f32 to bf16
// STAGED: gpu.func @mhc_project_fwd_n4_{{.*}}_partial(%arg0: memref<?xbf16>, %arg1: memref<?xbf16>, %arg2: memref<?xf32>, %arg3: memref<?xf32>, %arg4: memref<?xf32>, %arg5: i64, %arg6: i64) workgroup(%{{.*}} : memref<9216xf32, #gpu.address_space<workgroup>> {llvm.align = 128 : i64}, %{{.*}} : memref<6xi64, #gpu.address_space<workgroup>> {llvm.align = 8 : i64}) kernel attributes {known_block_size = array<i32: 256, 1, 1>, nvvm.minctasm = 2 : i32}
// STAGED-COUNT-3: nvvm.mbarrier.init
// STAGED: nvvm.cp.async.bulk.shared.cluster.global
// STAGED: scf.for
// With one token block (M <= 128) the block splits phi w (x, packed, phi,
// weight, partials) into the ring itself; else it waits for the copies.
// STAGED: arith.truncf {{.*}} : f32 to bf16
// STAGED: llvm.store {{.*}} : vector<4xi32>, !llvm.ptr<3>
// STAGED: gpu.barrier
// STAGED: nvvm.mbarrier.try_wait.parity
// STAGED-COUNT-24: nvvm.mma.sync
// STAGED: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// STAGED: nvvm.mbarrier.arrive
// STAGED: gpu.func @mhc_project_fwd_n4_{{.*}}_reduce(

// n = 8 with tf32 on sm_90a: one block of two warpgroups per SM, each
// multiplying two 64-token m-tiles with wgmma (A: x as loaded, in
// registers; B: the ring, through a descriptor with LBO 128 and SBO 256
// bytes). x is loaded a 128-column chunk ahead (sixteen 16-byte loads
// before the loop, carried in its 100 values: 80 accumulators, 4 sums of
// squares, 16 x vectors); per chunk, 8 k-steps x 2 parts x 2 m-tiles
// products in one group, waited for before the buffer is released.
// FWD8: gpu.func @mhc_project_fwd_n8_{{.*}}_partial({{.*}}nvvm.minctasm = 1
// FWD8-COUNT-16: vector.load {{.*}} : memref<?xbf16>, vector<8xbf16>
// FWD8: %{{.*}}:100 = scf.for
// FWD8: nvvm.mbarrier.try_wait.parity
// FWD8: nvvm.wgmma.fence.aligned
// FWD8-NOT: nvvm.mma.sync
// FWD8-COUNT-32: wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {{.*}}, $44, p, 1, 1, 0;{{.*}}"=f,{{.*}},r,r,r,r,l,r,0,1,2,
// FWD8-NOT: nvvm.mma.sync
// FWD8: nvvm.wgmma.commit.group.sync.aligned
// FWD8-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// FWD8: nvvm.fence.proxy
// FWD8: nvvm.mbarrier.arrive
// FWD8: gpu.func @mhc_project_fwd_n8_{{.*}}_reduce(

// The same spec for sm_100a (no wgmma) keeps mma.sync: two m-tiles per
// warp, each 8-byte B read from the ring feeding both m-tiles' mma's. The
// chunk loop carries 80 accumulators, 4 sums of squares and the next
// chunk's x (8); the one-token-block fill loads its phi pieces itself.
// FWD8B: gpu.func @mhc_project_fwd_n8_{{.*}}_partial({{.*}}nvvm.minctasm = 1
// FWD8B: %{{.*}}:92 = scf.for
// FWD8B-NOT: wgmma
// FWD8B: llvm.load {{.*}} : !llvm.ptr<3> -> vector<2xi32>
// FWD8B: nvvm.mma.sync A[{{.*}}]  B{{\[}}[[B0:%[0-9]+, %[0-9]+]]]
// FWD8B-NOT: nvvm.mma.sync
// FWD8B: nvvm.mma.sync A[{{.*}}]  B{{\[}}[[B0]]]
// FWD8B-COUNT-158: nvvm.mma.sync
// FWD8B-NOT: nvvm.mma.sync
// Then its copy for M <= 128 (one token block, at least half of its warps
// without a token below M): the same products under the warp's branch.
// FWD8B: gpu.func @mhc_project_fwd_n8_{{.*}}_partial_few({{.*}}nvvm.minctasm = 1
// FWD8B: scf.for
// FWD8B: scf.if
// FWD8B-COUNT-160: nvvm.mma.sync
// FWD8B-NOT: nvvm.mma.sync
// FWD8B: gpu.func @mhc_project_fwd_n8_{{.*}}_reduce(

// The pack writes wgmma's layout: per (chunk, pair, row of phi) one thread
// reads 32 columns and stores 2 k-steps x 2 core-matrix halves x 2 parts.
// FWD8PTX: .entry mhc_project_fwd_n8_{{.*}}_pack(
// FWD8PTX-COUNT-8: st.global.v4.b32
// FWD8PTX: .entry mhc_project_fwd_n8_{{.*}}_partial(
// FWD8PTX: wgmma.fence.sync.aligned;
// The descriptor: bits 0-13 the shared address / 16, LBO = 128 bytes
// (8 << 16) and SBO = 256 bytes (16 << 32), no swizzle: 0x1000080000.
// FWD8PTX: bfe.u64 %rd{{[0-9]+}}, %rd{{[0-9]+}}, 4, 14;
// FWD8PTX-NEXT: or.b64 %[[DESC:rd[0-9]+]], %rd{{[0-9]+}}, 68720001024;
// FWD8PTX: wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {{.*}}, %[[DESC]], p, 1, 1, 0;
// FWD8PTX: wgmma.commit_group.sync.aligned;
// FWD8PTX: wgmma.wait_group.sync.aligned 0;

// The split fills the waves of H100's 132 SMs: 132 slots with one block
// per SM (256 tokens per block), 264 with two (128 tokens per block); one
// token block splits over the SMs once (single_block).
// FWD8SPLIT: "split": {"tokens_per_block": 256, "target_blocks": 264, "max": 64, "wave_slots": 132, "single_block": 132}
// FWD4SPLIT: "split": {"tokens_per_block": 128, "target_blocks": 264, "max": 64, "wave_slots": 264, "single_block": 132}
// The pack launch runs only past one token block (the partial splits phi
// itself below that); wgmma's pack always runs.
// FWD4SPLIT: "entry": "mhc_project_fwd_n4_{{[0-9a-f]+}}_pack"{{.*}}"items_per_block": 0, "min_tokens": 129}
// The mma.sync partial in two copies, exactly one launched for any M: the
// plain one past 64 tokens, "partial_few" up to 64 (half a token block).
// FWD4SPLIT: "entry": "mhc_project_fwd_n4_{{[0-9a-f]+}}_partial", "params": ["x", "packed", "phi", "partials", "M", "S"]{{.*}}"times_split": true{{.*}}"min_tokens": 65}
// FWD4SPLIT: "entry": "mhc_project_fwd_n4_{{[0-9a-f]+}}_partial_few", "params": ["x", "packed", "phi", "partials", "M", "S"]{{.*}}"times_split": true{{.*}}"max_tokens": 64}
// FWD8SPLIT-NOT: min_tokens
// FWD8SPLIT-NOT: _partial_few

// Three parts of 128-column chunks: a 54 KB ring, past the 48 KB of static
// shared memory, so a view of the dynamic allocation.
// STAGED3: gpu.func @mhc_project_fwd_n4_{{.*}}_partial(
// STAGED3: gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// STAGED3: memref.view {{.*}} to memref<13824xf32, #gpu.address_space<workgroup>>
// STAGED3: scf.for
// STAGED3-COUNT-18: nvvm.mma.sync

// STAGEDPTX: .entry mhc_project_fwd_n4_{{.*}}_partial(
// STAGEDPTX: .minnctapersm 2
// STAGEDPTX: .shared .align 128 .b8 {{.*}}[36864];
// STAGEDPTX: mbarrier.init.shared.b64
// STAGEDPTX: fence.mbarrier_init.release.cluster;
// STAGEDPTX: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// STAGEDPTX: ld.global.nc.v4.b32
// STAGEDPTX: mbarrier.try_wait.parity.shared.b64
// STAGEDPTX: ld.shared.v4.b32
// STAGEDPTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// STAGEDPTX: fence.proxy.async.shared::cta;
// STAGEDPTX: mbarrier.arrive.shared.b64
// STAGEDPTX-NOT: atom.

// BWD: gpu.func @mhc_project_bwd_n4_{{.*}}_main(
// BWD: scf.for
// BWD: scf.for
// BWD-COUNT-30: nvgpu.mma.sync
// BWD: gpu.func @mhc_project_bwd_n4_{{.*}}_partials_final(
// BWD-NOT: atomic

// PTX-DAG: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// PTX-DAG: ld.global.nc.v4.b32
// PTX-NOT: atom.

// bf16 x on sm_90: the block's ring of 4 stages, filled by thread 0 with
// bulk copies (8 rows of x, then gh) that complete on a full mbarrier per
// stage; each warp reads its columns (8 bytes per token and lane at T = 2),
// fences the async proxy and releases the stage on its empty mbarrier.
// BWDPTX: .entry mhc_project_bwd_n4_{{.*}}_main(
// BWDPTX: .maxntid 128, 1, 1
// BWDPTX: .minnctapersm 3
// BWDPTX: .shared .align 128 .b8 {{.*}}[{{[0-9]+}}];
// BWDPTX: .shared .align 8 .b8 {{.*}}[64];
// BWDPTX: st.shared.v4.b32
// BWDPTX: mbarrier.init.shared.b64
// BWDPTX: fence.mbarrier_init.release.cluster;
// BWDPTX: mbarrier.arrive.expect_tx.shared.b64
// BWDPTX-COUNT-9: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// BWDPTX: mbarrier.try_wait.parity.shared.b64
// BWDPTX: ld.shared.v4.b16
// BWDPTX: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// BWDPTX: fence.proxy.async.shared::cta;
// BWDPTX-NEXT: mbarrier.arrive.shared.b64
// BWDPTX: .entry mhc_project_bwd_n4_{{.*}}_partials_final(
// BWDPTX-NOT: atom.

// The n = 4 staged backward without a weight on sm_90a (paced): launch
// "zero" clears the wave counters (from M = 1152 on), a producer warp (160
// threads) waits on its wave's counter with a bounded poll of the global
// timer and adds to it with integer reductions; the results still leave
// through ordered partials, with no atomics and no float reductions.
// BWDPACE: .entry mhc_project_bwd_n4_{{.*}}_zero(
// BWDPACE: st.global.{{[fub]}}32
// BWDPACE: .entry mhc_project_bwd_n4_{{.*}}_main(
// BWDPACE: .maxntid 160, 1, 1
// BWDPACE: .minnctapersm 3
// BWDPACE: .shared .align 8 .b8 {{.*}}[72];
// BWDPACE: mbarrier.init.shared.b64
// BWDPACE-DAG: mbarrier.arrive.expect_tx.shared.b64
// BWDPACE-DAG: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// BWDPACE-DAG: mov.u64 t0, %globaltimer;
// BWDPACE-DAG: ld.relaxed.gpu.global.u32
// BWDPACE-DAG: nanosleep.u32
// BWDPACE-DAG: red.relaxed.gpu.global.add.u32
// BWDPACE-DAG: mbarrier.try_wait.parity.shared.b64
// BWDPACE-DAG: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// BWDPACE-DAG: mbarrier.arrive.shared.b64
// BWDPACE-NOT: red.global.add.f32
// BWDPACE: .entry mhc_project_bwd_n4_{{.*}}_partials_final(
// BWDPACE-NOT: atom.
// BWDPACE-NOT: .local
// BWDPACEJSON: "entry": "mhc_project_bwd_n4_{{.*}}_zero", {{.*}} "block": [32, 1, 1], "grid": {"tokens_per_block": 0, "fixed_blocks": 1, {{.*}} "min_tokens": 1152
// BWDPACEJSON: "entry": "mhc_project_bwd_n4_{{.*}}_main", {{.*}} "block": [160, 1, 1], "grid": {"tokens_per_block": 0, "fixed_blocks": 384, {{.*}} "spill_stores": 0, "spill_loads": 0,

// Other activations (f32 here): a ring per warp, filled by cp.async (32
// bytes of x per token and lane, gh and gms in 16-byte pieces), waited for
// by group; 68 KB of stages is dynamic shared memory (.extern, sized at
// launch).
// n = 8 with tf32 where the wgmma kernel does not apply (here: a norm
// weight): two k-tiles per warp in blocks of four warps, three per SM; a
// stage takes the 8 x rows and then gh row by row (rows padded to 84 floats
// against bank conflicts): 16 bulk copies at each of the two places that
// fill a stage (n = 4: 9).
// BWD8W: .entry mhc_project_bwd_n8_{{.*}}_main(
// BWD8W: .maxntid 128, 1, 1
// BWD8W: .minnctapersm 3
// BWD8W-COUNT-32: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// BWD8W: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// BWD8W-NOT: cp.async.bulk
// BWD8W-NOT: atom.

// n = 8, tf32, bf16 x, no weight on sm_90a, where the columns do not fit
// one wave of at most 8 boxes per block (C = 9216: 1152 boxes of 64
// columns for 132 SMs): the warp-specialised wgmma kernel
// (codegen/kernels/project/BackwardWgmma.cpp). A pad launch; then two tensor maps by
// value (grid constants, read in parameter space), one block of three
// warpgroups per SM: the producer gives registers up and issues TMA tile
// loads and the gh image's bulk copy; each consumer takes every other step
// and reads every operand from shared memory: D in three bf16 passes of
// m64n128k16 (5 k-steps each), then gphi^T in m64n80k16 (A = x M-major, B =
// gh N-major: both transposes; 4 token steps x 2 column tiles x 2 parts),
// gx by two TMA tile stores after a warpgroup barrier, the stage released
// once gphi's products are done. Each consumer writes its gphi^T to
// partials of its own (no hand-off between the warpgroups). The producer
// paces its steps by its wave's progress counter (zeroed by the pad
// launch): a bounded wait on the global timer before a step's copies, an
// integer reduction after them; no atom., no float reductions.
// BWD8: .entry mhc_project_bwd_n8_{{.*}}_pad(
// BWD8: st.global.{{[fub]}}32
// BWD8: .entry mhc_project_bwd_n8_{{.*}}_main(
// BWD8-NEXT: .param .align 64 .b8 mhc_project_bwd_n8_{{.*}}_main_param_0[128],
// BWD8-NEXT: .param .align 64 .b8 mhc_project_bwd_n8_{{.*}}_main_param_1[128],
// BWD8: .maxntid 384, 1, 1
// BWD8: .minnctapersm 1
// BWD8: cvta.param.u64
// BWD8: setmaxnreg.inc.sync.aligned.u32 232
// BWD8: setmaxnreg.dec.sync.aligned.u32 40
// BWD8: mbarrier.try_wait.parity.shared.b64
// BWD8: wgmma.fence.sync.aligned;
// BWD8-COUNT-15: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 0, 0;
// BWD8: wgmma.commit_group.sync.aligned;
// BWD8-COUNT-16: wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1, 1;
// BWD8-NOT: wgmma.mma_async
// BWD8: wgmma.commit_group.sync.aligned;
// BWD8: wgmma.wait_group.sync.aligned 1;
// BWD8: cp.async.bulk.wait_group.read 0;
// BWD8: bar.sync {{%r[0-9]+}}, 128;
// BWD8-COUNT-2: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
// BWD8: wgmma.wait_group.sync.aligned 0;
// BWD8: mbarrier.arrive.shared.b64
// BWD8: mbarrier.arrive.expect_tx.shared.b64
// BWD8-COUNT-2: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// BWD8: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// BWD8: red.relaxed.gpu.global.add.u32
// BWD8: mov.u64 t0, %globaltimer;
// BWD8: ld.relaxed.gpu.global.u32
// BWD8: nanosleep.u32
// BWD8-NOT: red.global.add.f32
// BWD8: .entry mhc_project_bwd_n8_{{.*}}_partials_final(
// BWD8-NOT: atom.
// BWD8-NOT: .local
// 576 column slices x 2 token shares (the fewest whose last wave leaves at
// most 5% of 132 SMs idle), one block per SM.
// BWD8JSON: "entry": "mhc_project_bwd_n8_{{.*}}_main", {{.*}} "block": [384, 1, 1], "grid": {"tokens_per_block": 0, "fixed_blocks": 1152, {{.*}} "dynamic_shared_bytes": 226376, "resources": {"registers": {{[0-9]+}}, "spill_stores": 0, "spill_loads": 0,

// The same specs whose columns fit one wave (codegen/kernels/project/BackwardWide.cpp; n = 8,
// C = 7168: 128 blocks of 7 boxes of 64 columns). The pad launch writes a
// 16-token image per step (gh as f16 scaled per token, its bf16 hi and lo
// parts, gms, the scale back) and zeroes the pacing counter. The main
// launch takes two 16-row tensor maps ("tmap16:"); its producer gives
// registers up and issues per step 7 TMA box loads and two bulk copies
// (the image's f16 plane into a ring of its own, the rest into the stage);
// the two consumers (4 + 3 boxes) take every step in pairs: D^T = phi^T gh^T
// as one f16 m64n32k16 pass per box (5 k-steps), gphi^T in m64n80k16 (both
// transposes: 7 boxes x 2 steps x 2 parts), gx over the box in place by
// ldmatrix / stmatrix .trans, then 14 TMA box stores; the previous pair's
// stages are released once its stores have read them. gphi goes straight
// to its output: no partials, no partials_final launch. No local memory.
// WIDE8: .entry mhc_project_bwd_n8_{{.*}}_pad(
// WIDE8: st.global.b32 [{{%rd[0-9]+}}], 0;
// WIDE8: bar.sync 0;
// WIDE8: .entry mhc_project_bwd_n8_{{.*}}_main(
// WIDE8-NEXT: .param .align 64 .b8 mhc_project_bwd_n8_{{.*}}_main_param_0[128],
// WIDE8-NEXT: .param .align 64 .b8 mhc_project_bwd_n8_{{.*}}_main_param_1[128],
// WIDE8: .maxntid 384, 1, 1
// WIDE8: .minnctapersm 1
// WIDE8-DAG: setmaxnreg.inc.sync.aligned.u32 240
// WIDE8-DAG: setmaxnreg.dec.sync.aligned.u32 24
// WIDE8-DAG: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// WIDE8-DAG: stmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// WIDE8-DAG: wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {{.*}}, p, 1, 1, 0, 0;
// WIDE8-DAG: wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1, 1;
// WIDE8-DAG: cp.async.bulk.wait_group.read 0;
// WIDE8-DAG: bar.sync 1, 128;
// WIDE8-DAG: bar.sync 2, 128;
// WIDE8-DAG: red.relaxed.gpu.global.add.u32
// WIDE8-DAG: mov.u64 t0, %globaltimer;
// WIDE8-DAG: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// WIDE8-NOT: .local
// WIDE8-NOT: atom.
// WIDE8-NOT: red.global.add.f32
// WIDE8-NOT: partials_final
// WIDE8JSON: "name": "gphi", "dtype": "f32", "role": "output"
// WIDE8JSON-NOT: "name": "partials"
// WIDE8JSON: "entry": "mhc_project_bwd_n8_{{.*}}_pad", "params": ["gh", "gms", "ghp", "progress", "M"], {{.*}} "grid": {"tokens_per_block": 32,
// WIDE8JSON: "entry": "mhc_project_bwd_n8_{{.*}}_main", "params": ["tmap16:x", "tmap16:gx", "ghp", "phi", "gphi", "progress", "M"], {{.*}} "block": [384, 1, 1], "grid": {"tokens_per_block": 0, "fixed_blocks": 128, {{.*}} "resources": {"registers": {{[0-9]+}}, "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0,
// WIDE8JSON-NOT: "entry"

// n = 6 (N = 48, C = 4096: 128 blocks of 3 boxes) takes the same kernel:
// D^T in three k-steps per box, gphi^T in m64n48k16.
// BWD6: .entry mhc_project_bwd_n6_{{.*}}_pad(
// BWD6: .entry mhc_project_bwd_n6_{{.*}}_main(
// BWD6-NEXT: .param .align 64 .b8 mhc_project_bwd_n6_{{.*}}_main_param_0[128],
// BWD6-COUNT-9: wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16
// BWD6-NOT: wgmma.mma_async.sync.aligned.m64n32k16
// BWD6-NOT: .entry

// BWDRING: .extern .shared .align 16 .b8 __dynamic_shmem__0[];
// BWDRING: .entry mhc_project_bwd_n4_{{.*}}_main(
// BWDRING: cp.async.cg.shared.global [{{.*}}], [{{.*}}], 16;
// BWDRING: cp.async.commit_group;
// BWDRING: cp.async.wait_group {{[1-9]}};
// BWDRING: bar.warp.sync
// BWDRING: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// BWDRING-NOT: atom.
