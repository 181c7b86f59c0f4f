// The backward kernels with acc=1 (docs/MATH.md, "acc"): a buffer "acc" of
// x's shape and dtype right after the op's inputs, loaded where gx is
// computed and added to it before the store (the projection's one-wave and
// wgmma kernels: in a launch after them). For 2-byte activations the
// kernel's own gx is rounded to the activation dtype first (truncf, extf),
// then one f32 add (add.rn in PTX: never contracted with the product before
// it), then the store rounds: the bits of the unfused own.add(acc). For f32
// the add alone. (The inputs are kernel specs; this file has no IR of its
// own. ptxas accepts every acc spec of test/Codegen/spec_matrix.py.)
// RUN: mhc-compile --spec 'aggregate.bwd;n=4;act=bf16;layout=nc;C=2048;acc=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=AGG
// RUN: mhc-compile --spec 'aggregate.bwd;n=4;act=f32;layout=cn;C=1000;acc=1;arch=sm_80' --print-ir | FileCheck %s --check-prefix=AGG32
// RUN: rm -rf %t.r && mhc-compile --spec 'aggregate.bwd;n=8;act=bf16;layout=cn;C=7168;acc=1;arch=sm_90a' -o %t.r && cat %t.r/*.json %t.r/*.ptx | FileCheck %s --check-prefix=RING
// RUN: mhc-compile --spec 'expand_combine.bwd;n=2;act=bf16;layout=nc;C=2048;bias=0;acc=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=EC
// RUN: rm -rf %t.e && mhc-compile --spec 'expand_combine.bwd;n=8;act=bf16;layout=cn;C=7168;bias=0;acc=1;arch=sm_90a' -o %t.e && cat %t.e/*.json %t.e/*.ptx | FileCheck %s --check-prefix=ECRING
// RUN: mhc-compile --spec 'project.bwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=1;weight=0;acc=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=MMA
// RUN: rm -rf %t.w && mhc-compile --spec 'project.bwd;n=8;act=bf16;param=f32;layout=nc;C=2048;tf32=1;weight=0;acc=1;arch=sm_90a' -o %t.w && cat %t.w/*.json %t.w/*.ptx | FileCheck %s --check-prefix=WIDE
// RUN: rm -rf %t.g && mhc-compile --spec 'project.bwd;n=8;act=bf16;param=f32;layout=nc;C=9216;tf32=1;weight=0;acc=1;arch=sm_90a' -o %t.g && cat %t.g/*.json | FileCheck %s --check-prefix=WGMMA

// aggregate, per-token blocks: gy, x, pre, acc, gx, gpre. gx[i] = pre_i gy,
// rounded to bf16 and back, plus acc's value of the same element.
// AGG: gpu.func @mhc_aggregate_bwd_n4_{{.*}}_main(%arg0: memref<?xbf16>, %arg1: memref<?xbf16>, %arg2: memref<?xf32>, %arg3: memref<?xbf16>, %arg4: memref<?xbf16>, %arg5: memref<?xf32>, %arg6: i64)
// AGG: %[[ACCV:.*]] = vector.load %arg3[%[[AT:.*]]] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// AGG-NEXT: %[[ACCF:.*]] = arith.extf %[[ACCV]] : vector<8xbf16> to vector<8xf32>
// AGG-NEXT: %[[ACC0:.*]] = vector.extract %[[ACCF]][0] : f32 from vector<8xf32>
// AGG: %[[OWN:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// AGG-NEXT: %[[RND:.*]] = arith.truncf %[[OWN]] : f32 to bf16
// AGG-NEXT: %[[BACK:.*]] = arith.extf %[[RND]] : bf16 to f32
// AGG-NEXT: %[[SUM:.*]] = arith.addf %[[BACK]], %[[ACC0]] : f32
// AGG: %[[GX:.*]] = vector.from_elements %[[SUM]], %{{.*}} : vector<8xf32>
// AGG-NEXT: %[[GXB:.*]] = arith.truncf %[[GX]] : vector<8xf32> to vector<8xbf16>
// AGG-NEXT: vector.store %[[GXB]], %arg4[%[[AT]]] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>

// f32 activations: the add alone, nothing rounded before it.
// AGG32: gpu.func @mhc_aggregate_bwd_n4_{{.*}}_main(%arg0: memref<?xf32>, %arg1: memref<?xf32>, %arg2: memref<?xf32>, %arg3: memref<?xf32>, %arg4: memref<?xf32>, %arg5: memref<?xf32>, %arg6: i64)
// AGG32: %[[ACCV:.*]] = vector.load %arg3[%[[AT:.*]]] {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// AGG32-NEXT: %[[ACC0:.*]] = vector.extract %[[ACCV]][0] : f32 from vector<4xf32>
// AGG32: %[[OWN:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// AGG32-NEXT: %[[SUM:.*]] = arith.addf %[[OWN]], %[[ACC0]] : f32
// AGG32-NOT: arith.truncf
// AGG32: %[[GX:.*]] = vector.from_elements %[[SUM]], %{{.*}} : vector<4xf32>
// AGG32-NEXT: vector.store %[[GX]], %arg4[%[[AT]]] {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>

// The token ring: acc is a third source of each stage (a piece's n values
// per channel by one more bulk copy), read back from shared memory beside x.
// RING: "name": "pre", "dtype": "f32", "role": "input"
// RING-NEXT: "name": "acc", "dtype": "bf16", "role": "input", "elems": {"per_token": 57344,
// RING-NEXT: "name": "gx", "dtype": "bf16", "role": "output"
// RING: "params": ["gy", "x", "pre", "acc", "gx", "gpre", "M"]
// RING: .entry mhc_aggregate_bwd_n8_{{.*}}_main(
// RING-COUNT-3: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%rd{{[0-9]+}}], [%rd{{[0-9]+}}], %r{{[0-9]+}}, [%rd[[BAR:[0-9]+]]+104704];
// RING-NOT: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes {{.*}}+104704];
// RING: mbarrier.try_wait.parity.shared.b64
// RING: cvt.rn.bf16.f32 [[RND:%rs[0-9]+]], %r{{[0-9]+}};
// RING-NEXT: cvt.f32.bf16 [[BACK:%r[0-9]+]], [[RND]];
// RING-NEXT: add.rn.f32 %r{{[0-9]+}}, %r{{[0-9]+}}, [[BACK]];
// RING: st.global.v4.b32
// RING-NOT: atom.

// expand_combine, per-token blocks: gout, f, post, x, P, acc, gf, gpost, gx,
// gP; gx_i = sum_j P_ij g_j (fma chain), rounded, plus acc, stored to gx.
// EC: gpu.func @mhc_expand_combine_bwd_n2_{{.*}}_main(%arg0: memref<?xbf16>, %arg1: memref<?xbf16>, %arg2: memref<?xf32>, %arg3: memref<?xbf16>, %arg4: memref<?xf32>, %arg5: memref<?xbf16>, %arg6: memref<?xbf16>, %arg7: memref<?xf32>, %arg8: memref<?xbf16>, %arg9: memref<?xf32>, %arg10: i64)
// EC: %[[ACCV:.*]] = vector.load %arg5[%[[AT:.*]]] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// EC-NEXT: %[[ACCF:.*]] = arith.extf %[[ACCV]] : vector<8xbf16> to vector<8xf32>
// EC-NEXT: %[[ACC0:.*]] = vector.extract %[[ACCF]][0] : f32 from vector<8xf32>
// EC: %[[RND:.*]] = arith.truncf %{{.*}} : f32 to bf16
// EC-NEXT: %[[BACK:.*]] = arith.extf %[[RND]] : bf16 to f32
// EC-NEXT: %[[SUM:.*]] = arith.addf %[[BACK]], %[[ACC0]] : f32
// EC: vector.store %{{.*}}, %arg6[
// EC: %[[GX:.*]] = vector.from_elements %[[SUM]], %{{.*}} : vector<8xf32>
// EC-NEXT: %[[GXB:.*]] = arith.truncf %[[GX]] : vector<8xf32> to vector<8xbf16>
// EC-NEXT: vector.store %[[GXB]], %arg8[%[[AT]]] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>

// ECRING: "name": "P", "dtype": "f32", "role": "input"
// ECRING-NEXT: "name": "acc", "dtype": "bf16", "role": "input"
// ECRING-NEXT: "name": "gf", "dtype": "bf16", "role": "output"
// ECRING: "params": ["gout", "f", "post", "x", "P", "acc", "gf", "gpost", "gx", "gP", "M"]
// ECRING: .entry mhc_expand_combine_bwd_n8_{{.*}}_main(
// ECRING-COUNT-4: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes {{.*}}, [%rd[[BAR:[0-9]+]]+{{[0-9]+}}];
// ECRING: mbarrier.try_wait.parity.shared.b64
// ECRING: cvt.rn.bf16.f32 [[RND:%rs[0-9]+]], %r{{[0-9]+}};
// ECRING-NEXT: cvt.f32.bf16 [[BACK:%r[0-9]+]], [[RND]];
// ECRING-NEXT: add.rn.f32 %r{{[0-9]+}}, %r{{[0-9]+}}, [[BACK]];
// ECRING-NOT: atom.

// The projection's mma.sync kernel: gh, gms, x, phi, acc, gx, partials,
// progress. acc's two token rows (clamped to M - 1) load before the step's
// products; gx = D + (2/K) gms x, rounded, plus acc, stored under the
// token's guard.
// MMA: gpu.func @mhc_project_bwd_n4_{{.*}}_main(%arg0: memref<?xf32>, %arg1: memref<?xf32>, %arg2: memref<?xbf16>, %arg3: memref<?xf32>, %arg4: memref<?xbf16>, %arg5: memref<?xbf16>, %arg6: memref<?xf32>, %arg7: memref<?xf32>, %arg8: i64)
// MMA: %[[ACCV:.*]] = vector.load %arg4[%{{.*}}] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// MMA-NEXT: %[[ACCF:.*]] = arith.extf %[[ACCV]] : vector<8xbf16> to vector<8xf32>
// MMA-NEXT: %[[ACC0:.*]] = vector.extract %[[ACCF]][0] : f32 from vector<8xf32>
// MMA: nvgpu.mma.sync
// MMA: %[[OWN:.*]] = math.fma %{{.*}}, %{{.*}}, %{{.*}} : f32
// MMA-NEXT: %[[RND:.*]] = arith.truncf %[[OWN]] : f32 to bf16
// MMA-NEXT: %[[BACK:.*]] = arith.extf %[[RND]] : bf16 to f32
// MMA-NEXT: %[[SUM:.*]] = arith.addf %[[BACK]], %[[ACC0]] : f32
// MMA: scf.if
// MMA: %[[GX:.*]] = vector.from_elements %[[SUM]], %{{.*}} : vector<8xf32>
// MMA-NEXT: %[[GXB:.*]] = arith.truncf %[[GX]] : vector<8xf32> to vector<8xbf16>
// MMA-NEXT: vector.store %[[GXB]], %arg5[%{{.*}}] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>

// The one-wave and wgmma kernels (n = 6, 8, bf16, tf32, no weight, sm_90a)
// store gx from shared memory by TMA; launch "acc" follows them: gx += acc
// in place (gx read back coherently, acc through the non-coherent cache),
// one add.rn per element (docs/design/project.md, "acc").
// WIDE: "name": "phi", "dtype": "f32", "role": "input"
// WIDE-NEXT: "name": "acc", "dtype": "bf16", "role": "input", "elems": {"per_token": 16384,
// WIDE-NEXT: "name": "gx", "dtype": "bf16", "role": "output"
// WIDE: "params": ["tmap16:x", "tmap16:gx", "ghp", "phi", "gphi", "progress", "M"]
// WIDE-NEXT: "entry": "mhc_project_bwd_n8_[[H:[0-9a-f]+]]_acc", "params": ["acc", "gx", "M"], {{.*}} "block": [256, 1, 1], "grid": {"tokens_per_block": 1,
// WIDE: .entry mhc_project_bwd_n8_[[H]]_acc(
// WIDE: ld.global.v4.b32
// WIDE: ld.global.nc.v4.b32
// WIDE-COUNT-8: add.rn.f32
// WIDE: st.global.v4.b32
// WIDE-NOT: atom.
// WGMMA: "params": ["tmap:x", "tmap:gx", "ghp", "phi", "partials", "progress", "M"]
// WGMMA: "entry": "mhc_project_bwd_n8_{{[0-9a-f]+}}_acc", "params": ["acc", "gx", "M"]
