// Kernels of mhc.expand_combine: 16-byte accesses; the backward reduces gpost
// and gP per token in the block and, with a bias, sums gbias over tokens by
// per-block partials added in a fixed order. No atomics anywhere.
// RUN: mhc-compile --spec 'expand_combine.fwd;n=4;act=bf16;layout=nc;C=7168;bias=0;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=FWD
// RUN: rm -rf %t.f && mhc-compile --spec 'expand_combine.fwd;n=4;act=bf16;layout=cn;C=7168;bias=0;arch=sm_90a' -o %t.f && FileCheck %s --check-prefix=FJSON < %t.f/mhc_expand_combine_fwd_n4_60552d2ca59a70bd.json
// RUN: rm -rf %t.s && mhc-compile --spec 'expand_combine.fwd;n=4;act=bf16;layout=cn;C=4096;bias=0;arch=sm_90a' -o %t.s && cat %t.s/*.json %t.s/*.ptx | FileCheck %s --check-prefix=WIDE
// RUN: mhc-compile --spec 'expand_combine.bwd;n=4;act=bf16;param=f32;layout=cn;C=2048;bias=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=BWD
// RUN: rm -rf %t && mhc-compile --spec 'expand_combine.bwd;n=4;act=bf16;param=f32;layout=cn;C=2048;bias=1;arch=sm_90a' -o %t && FileCheck %s --check-prefix=JSON < %t/mhc_expand_combine_bwd_n4_d19c414558f73456.json
// RUN: rm -rf %t.e && mhc-compile --spec 'expand_combine.bwd;n=8;act=bf16;layout=cn;C=7168;bias=0;arch=sm_90a' -o %t.e && cat %t.e/*.ptx | FileCheck %s --check-prefix=BWD8
// RUN: rm -rf %t.r && mhc-compile --spec 'expand_combine.bwd;n=8;act=bf16;layout=cn;C=7168;bias=0;arch=sm_90a' -o %t.r && FileCheck %s --check-prefix=RJSON < %t.r/mhc_expand_combine_bwd_n8_adc9bbf26fa8fab5.json
// RUN: rm -rf %t.w && mhc-compile --spec 'expand_combine.fwd;n=8;act=bf16;layout=cn;C=7168;bias=0;arch=sm_90a' -o %t.w && cat %t.w/*.ptx | FileCheck %s --check-prefix=FWD8
// RUN: rm -rf %t.q && mhc-compile --spec 'expand_combine.bwd;n=4;act=bf16;layout=cn;C=7168;bias=0;arch=sm_90a' -o %t.q && FileCheck %s --check-prefix=R4JSON < %t.q/mhc_expand_combine_bwd_n4_cb77a96e0a7f2bc9.json
// RUN: rm -rf %t.n && mhc-compile --spec 'expand_combine.bwd;n=8;act=bf16;layout=nc;C=7168;bias=0;arch=sm_90a' -o %t.n && cat %t.n/*.ptx | FileCheck %s --check-prefix=NC8
// RUN: rm -rf %t.b && mhc-compile --spec 'expand_combine.bwd;n=8;act=bf16;param=f32;layout=cn;C=1056;bias=1;arch=sm_90a' -o %t.b && cat %t.b/*.ptx | FileCheck %s --check-prefix=BIAS8

// FWD: gpu.func @mhc_expand_combine_fwd_n4_{{.*}}_main(%{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xbf16>, %{{.*}}: i64)
// FWD-DAG: arith.constant 28672 : index
// FWD-DAG: arith.constant 7168 : index
// FWD: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// FWD-COUNT-4: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// FWD-NOT: atomic

// (C, n) layout, the bench's shape: an item is 2 channels x 4 streams (one
// 16-byte piece), 3584 per token, 4 per thread, 1024 per block; no spills.
// FJSON: "grid": {"tokens_per_block": 0, "fixed_blocks": 0, "times_split": false, "items_per_token": 3584, "items_per_block": 1024}
// FJSON-SAME: "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0

// C % 2048 == 0 (whole tokens per 1024 items): 512 threads x 2 items,
// evict-first 16-byte stores.
// WIDE: "block": [512, 1, 1], "grid": {"tokens_per_block": 0, "fixed_blocks": 0, "times_split": false, "items_per_token": 2048, "items_per_block": 1024}
// WIDE-SAME: "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0
// WIDE: .maxntid 512, 1, 1
// WIDE-COUNT-2: st.global.cs.v4.b32
// WIDE-NOT: st.global.v4

// BWD: gpu.func @mhc_expand_combine_bwd_n4_d19c414558f73456_main(
// BWD: gpu.barrier
// BWD: gpu.func @mhc_expand_combine_bwd_n4_d19c414558f73456_gf32_colsum(
// BWD: scf.for
// BWD: gpu.func @mhc_expand_combine_bwd_n4_d19c414558f73456_gf32_partials_final(
// BWD: arith.constant 264 : index
// BWD-NOT: atomic

// JSON: "spec": "expand_combine.bwd;n=4;act=bf16;param=f32;layout=cn;C=2048;bias=1;arch=sm_90a"
// JSON: {"name": "gbias", "dtype": "f32", "role": "output", "elems": {"per_token": 0, "fixed": 2048, "per_token_split": 0}}
// JSON: {"name": "gf32", "dtype": "f32", "role": "workspace", "elems": {"per_token": 2048, "fixed": 0, "per_token_split": 0}}
// JSON: {"name": "gf32_partials", "dtype": "f32", "role": "workspace", "elems": {"per_token": 0, "fixed": 540672, "per_token_split": 0}}
// JSON: "entry": "mhc_expand_combine_bwd_n4_d19c414558f73456_main", "params": ["gout", "f", "post", "x", "P", "bias", "gf", "gpost", "gx", "gP", "gf32", "M"], "ptx_params": 56, "block": [256, 1, 1], "grid": {"tokens_per_block": 1, "fixed_blocks": 0, "times_split": false, "items_per_token": 0, "items_per_block": 0}
// JSON-SAME: "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0
// JSON: "entry": "mhc_expand_combine_bwd_n4_d19c414558f73456_gf32_colsum", "params": ["gf32", "gf32_partials", "M"], "ptx_params": 11, "block": [256, 1, 1], "grid": {"tokens_per_block": 0, "fixed_blocks": 264, "times_split": false, "items_per_token": 0, "items_per_block": 0}
// JSON: "entry": "mhc_expand_combine_bwd_n4_d19c414558f73456_gf32_partials_final", "params": ["gf32_partials", "gbias"]

// n = 8, 2-byte activations, (C, n) on sm_90a: a block of eight warps per
// token, each warp's ring of three 128-channel stages filled by lane 0's
// bulk copies (gout, x, f) that complete on the stage's mbarrier; the
// lanes read a channel's eight streams as one 16-byte shared load and
// store gx as one 16-byte global store; a proxy fence before a stage is
// refilled; the 72 sums reduced over the block by butterflies. No atomics.
// BWD8: .entry mhc_expand_combine_bwd_n8_{{.*}}_main(
// BWD8: .maxntid 256, 1, 1
// BWD8: .minnctapersm 1
// BWD8: mbarrier.init.shared.b64
// BWD8: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// BWD8: mbarrier.try_wait.parity.shared.b64
// BWD8: ld.shared.v4.b32
// BWD8: ld.shared.b16
// BWD8: st.global.v4.b32
// BWD8: fence.proxy.async.shared::cta
// BWD8: bar.warp.sync
// BWD8: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// BWD8: shfl.sync.bfly.b32
// BWD8: bar.sync
// BWD8-NOT: atom
// BWD8-NOT: ld.local

// Three 4352-byte stages per warp (gout and x 2048 bytes each, f 256) and the
// blockSum scratch; no spills at one block per SM.
// RJSON: "block": [256, 1, 1], "grid": {"tokens_per_block": 1,
// RJSON-SAME: "dynamic_shared_bytes": 106944
// RJSON-SAME: "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0

// n = 4 takes the same kernel with 256-channel pieces (4608-byte stages).
// R4JSON: "block": [256, 1, 1], "grid": {"tokens_per_block": 1,
// R4JSON-SAME: "dynamic_shared_bytes": 111424
// R4JSON-SAME: "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0

// The (n, C) layout keeps the register-fed kernel: P in shared memory, read
// back per chunk by volatile broadcast loads; 128-thread blocks, three per SM.
// NC8: .entry mhc_expand_combine_bwd_n8_{{.*}}_main(
// NC8: .maxntid 128, 1, 1
// NC8: .minnctapersm 3
// NC8: st.shared.{{[bf]}}32
// NC8: bar.sync
// NC8: ld.volatile.shared.v4.b32
// NC8-NOT: cp.async.bulk

// C = 1056 (33 x 32): 32-channel pieces in twelve stages per warp; with a
// bias, f + bias per channel, gf also kept in f32 for gbias's column sum.
// BIAS8: .entry mhc_expand_combine_bwd_n8_{{.*}}_main(
// BIAS8: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// BIAS8: st.global.b32
// BIAS8: .entry mhc_expand_combine_bwd_n8_{{.*}}_gf32_colsum(
// BIAS8: .entry mhc_expand_combine_bwd_n8_{{.*}}_gf32_partials_final(

// n = 8's forward on the same rings (f and x per piece): out as one 16-byte
// store per channel; no block barrier after the set-up.
// FWD8: .entry mhc_expand_combine_fwd_n8_{{.*}}_main(
// FWD8: .maxntid 256, 1, 1
// FWD8: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// FWD8: mbarrier.try_wait.parity.shared.b64
// FWD8: ld.shared.v4.b32
// FWD8: st.global.v4.b32
// FWD8: fence.proxy.async.shared::cta
// FWD8-NOT: bar.sync
