// Kernels of mhc.expand_combine: 16-byte accesses; the backward reduces gpost
// and gP per token in the block and, with a bias, sums gbias over tokens by
// per-block partials added in a fixed order. No atomics anywhere.
// RUN: mhc-compile --spec 'expand_combine.fwd;n=4;act=bf16;layout=nc;C=7168;bias=0;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=FWD
// RUN: rm -rf %t.f && mhc-compile --spec 'expand_combine.fwd;n=4;act=bf16;layout=cn;C=7168;bias=0;arch=sm_90a' -o %t.f && FileCheck %s --check-prefix=FJSON < %t.f/mhc_expand_combine_fwd_n4_60552d2ca59a70bd.json
// RUN: mhc-compile --spec 'expand_combine.bwd;n=4;act=bf16;param=f32;layout=cn;C=2048;bias=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=BWD
// RUN: rm -rf %t && mhc-compile --spec 'expand_combine.bwd;n=4;act=bf16;param=f32;layout=cn;C=2048;bias=1;arch=sm_90a' -o %t && FileCheck %s --check-prefix=JSON < %t/mhc_expand_combine_bwd_n4_d19c414558f73456.json
// RUN: rm -rf %t.e && mhc-compile --spec 'expand_combine.bwd;n=8;act=bf16;layout=cn;C=7168;bias=0;arch=sm_90a' -o %t.e && cat %t.e/*.ptx | FileCheck %s --check-prefix=BWD8

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

// n = 8 with 2-byte activations: P in shared memory, read back per chunk by
// volatile broadcast loads; 128-thread blocks, three per SM.
// BWD8: .entry mhc_expand_combine_bwd_n8_{{.*}}_main(
// BWD8: .maxntid 128, 1, 1
// BWD8: .minnctapersm 3
// BWD8: st.shared.{{[bf]}}32
// BWD8: bar.sync
// BWD8: ld.volatile.shared.v4.b32
