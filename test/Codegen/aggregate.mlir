// Kernels of mhc.aggregate: 16-byte vector accesses, the spec's constants,
// no atomics. The forward streams (token, chunk) items, here 8-channel
// chunks of the 4 streams, 2 per thread and 512 per block: a full block
// issues every load before its first store,
// the last block clamps its loads and guards its stores. (The inputs are
// kernel specs; this file has no IR of its own.)
// RUN: mhc-compile --spec 'aggregate.fwd;n=4;act=bf16;layout=nc;C=2048;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=FWD
// RUN: mhc-compile --spec 'aggregate.fwd;n=4;act=f32;layout=cn;C=1000;arch=sm_80' --print-ir | FileCheck %s --check-prefix=CN
// RUN: mhc-compile --spec 'aggregate.bwd;n=4;act=bf16;layout=nc;C=2048;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=BWD
// RUN: rm -rf %t.r && mhc-compile --spec 'aggregate.bwd;n=8;act=bf16;layout=cn;C=7168;arch=sm_90a' -o %t.r && cat %t.r/*.ptx | FileCheck %s --check-prefix=RING
// RUN: FileCheck %s --check-prefix=RJSON < %t.r/mhc_aggregate_bwd_n8_9fa215200de11fa9.json
// RUN: rm -rf %t && mhc-compile --spec 'aggregate.fwd;n=4;act=bf16;layout=nc;C=2048;arch=sm_90a' -o %t && FileCheck %s --check-prefix=PTX < %t/mhc_aggregate_fwd_n4_123f3d65709c76af.ptx

// FWD: gpu.module @mhc_aggregate_fwd_n4_123f3d65709c76af [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">]
// FWD: gpu.func @mhc_aggregate_fwd_n4_123f3d65709c76af_main(%{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xbf16>, %{{.*}}: i64) kernel attributes {known_block_size = array<i32: 256, 1, 1>, nvvm.minctasm = 2 : i32}
// FWD-DAG: arith.constant 2048 : index
// FWD-DAG: arith.constant 512 : index
// FWD: scf.if
// FWD-COUNT-8: vector.load %arg0[%{{.*}}] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// FWD-NOT: vector.load %arg0
// FWD: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// FWD: scf.if
// FWD: arith.minui
// FWD: scf.if
// FWD: vector.store
// FWD-NOT: atomic

// Layout cn: a chunk is the channels whose n streams fill one 16-byte access
// (here one f32 channel of 4 streams), so a warp's loads are contiguous; y
// is then one element per chunk.
// CN: gpu.module @mhc_aggregate_fwd_n4_{{.*}} [#nvvm.target<O = 3, chip = "sm_80", features = "+ptx70">]
// CN-DAG: arith.constant 1000 : index
// CN-COUNT-4: vector.load %arg0[%{{.*}}] {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// CN-NOT: vector.load %arg0
// CN: memref.store %{{.*}} : memref<?xf32>

// BWD: gpu.func @mhc_aggregate_bwd_n4_{{.*}}_main(%{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xf32>, %{{.*}}: i64) workgroup(%{{.*}} : memref<32xf32, #gpu.address_space<workgroup>>)
// BWD: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// BWD: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// BWD: gpu.shuffle  xor
// BWD: gpu.barrier
// BWD-NOT: atomic

// PTX: .target sm_90a
// PTX: .entry mhc_aggregate_fwd_n4_123f3d65709c76af_main(
// Inputs are noalias (mhc-kernel-noalias): read through the non-coherent cache.
// PTX: ld.global.nc.v4.b32
// PTX: st.global.v4.b32
// PTX-NOT: atom.

// (C, n) layout, n = 4 or 8, on sm_90a: eight warps per token, each fed by
// its own ring of stages (gy's and x's pieces of 1024 / n channels) filled
// by lane 0's bulk copies on an mbarrier per stage; a channel's n streams as
// one 16-byte shared load, gx as one 16-byte store; a proxy fence before a
// stage is refilled; gpre over the block in a fixed order. No atomics.
// RING: .entry mhc_aggregate_bwd_n8_{{.*}}_main(
// RING: .maxntid 256, 1, 1
// RING: mbarrier.init.shared.b64
// RING: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// RING: mbarrier.try_wait.parity.shared.b64
// RING: ld.shared.v4.b32
// RING: st.global.v4.b32
// RING: fence.proxy.async.shared::cta
// RING: bar.warp.sync
// RING: bar.sync
// RING-NOT: atom
// RJSON: "block": [256, 1, 1], "grid": {"tokens_per_block": 1,
// RJSON-SAME: "dynamic_shared_bytes": 55744
// RJSON-SAME: "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0
