// The projection at K = n*C not a multiple of 8 (issue 35, "Any C"): x's
// rows are then only 8-, 4- or 2-byte aligned, so the variants that copy
// them by TMA / bulk copies (16-byte strides) step aside and the generic
// ones run with accesses as wide as the rows' alignment allows and a tail
// masked at K. Forward: at K % 8 == 4 (bf16 x, sm_90+) the staged variant
// (pack + bulk-copy ring), x read in 8-byte pieces and its last chunk
// masked at K; at K % 8 == 2, 6 the same in 4-byte pieces, at n <= 3 as
// aligned 16-byte granules shifted by words, on wgmma by the rows' parity
// (8-byte loads, or 4, 8, 4); at odd K as five aligned 4-byte words
// funnel-shifted by a half-word (by the rows' parity: at the odd tokens
// only); at K % 8 == 0 its widest chunk, masked at K where it does not
// divide K (the seam's fused expand too); f16 and
// f32 x take the tf32 variant (no pack launch), x read element by element
// at odd K. Backward: n = 6 in bf16
// with tf32 and no weight on sm_90a the one-wave kernel with x by phase
// maps (every P-th token) and gx in pieces; else the block ring at K % 8 ==
// 4 on sm_90 (bulk copies from the 16-byte boundary below each row), else
// the per-warp cp.async ring in pieces of the rows' alignment (odd K: the
// aligned 4-byte words that hold a lane's columns, funnel-shifted on
// read), each lane its own slots; gx stored as wide as the rows allow.
// RUN: rm -rf %t.f4 && mhc-compile --spec 'project.fwd;n=4;act=bf16;param=f32;layout=cn;C=5129;tf32=1;weight=0;arch=sm_90a' -o %t.f4 && cat %t.f4/*.json | FileCheck %s --check-prefix=FWD4JSON
// RUN: cat %t.f4/*.ptx | FileCheck %s --check-prefix=FWD4PTX
// RUN: rm -rf %t.f6 && mhc-compile --spec 'project.fwd;n=6;act=bf16;param=bf16;layout=cn;C=5126;tf32=1;weight=1;arch=sm_90a' -o %t.f6 && cat %t.f6/mhc*.json %t.f6/*.ptx | FileCheck %s --check-prefix=FWD6
// RUN: rm -rf %t.f2 && mhc-compile --spec 'project.fwd;n=2;act=bf16;param=f32;layout=cn;C=5121;tf32=1;weight=0;arch=sm_90a' -o %t.f2 && cat %t.f2/*.ptx | FileCheck %s --check-prefix=FWD2
// RUN: rm -rf %t.f6p && mhc-compile --spec 'project.fwd;n=6;act=bf16;param=f32;layout=cn;C=5127;tf32=1;weight=0;arch=sm_90a' -o %t.f6p && cat %t.f6p/*.ptx | FileCheck %s --check-prefix=FWD6P
// RUN: rm -rf %t.f32 && mhc-compile --spec 'project.fwd;n=6;act=bf16;param=f32;layout=cn;C=5124;tf32=1;weight=0;arch=sm_90a' -o %t.f32 && cat %t.f32/mhc*.json %t.f32/*.ptx | FileCheck %s --check-prefix=FWD6K32
// RUN: rm -rf %t.f3 && mhc-compile --spec 'project.fwd;n=3;act=bf16;param=f32;layout=cn;C=5127;tf32=1;weight=1;arch=sm_90a' -o %t.f3 && cat %t.f3/*.ptx | FileCheck %s --check-prefix=FWDODD
// RUN: cat %t.f3/mhc*.json | FileCheck %s --check-prefix=FWDODDJSON
// RUN: rm -rf %t.f7 && mhc-compile --spec 'project.fwd;n=7;act=bf16;param=f32;layout=cn;C=5121;tf32=1;weight=0;arch=sm_90a' -o %t.f7 && cat %t.f7/*.ptx | FileCheck %s --check-prefix=FWDODD7
// RUN: rm -rf %t.f3h && mhc-compile --spec 'project.fwd;n=3;act=f16;param=f32;layout=cn;C=5127;tf32=1;weight=1;arch=sm_90a' -o %t.f3h && cat %t.f3h/*.ptx | FileCheck %s --check-prefix=FWDODDF16
// RUN: cat %t.f3h/mhc*.json | FileCheck %s --check-prefix=FWDODDF16JSON
// RUN: rm -rf %t.b4 && mhc-compile --spec 'project.bwd;n=4;act=bf16;param=f32;layout=cn;C=5129;tf32=1;weight=0;arch=sm_90a' -o %t.b4 && cat %t.b4/*.ptx | FileCheck %s --check-prefix=BWD4
// RUN: cat %t.b4/*.ptx | FileCheck %s --check-prefix=SLICES
// RUN: rm -rf %t.b21 && mhc-compile --spec 'project.bwd;n=2;act=bf16;param=f32;layout=cn;C=5121;tf32=1;weight=0;arch=sm_90a' -o %t.b21 && cat %t.b21/*.ptx | FileCheck %s --check-prefix=ONELOOP
// RUN: rm -rf %t.b2 && mhc-compile --spec 'project.bwd;n=2;act=f16;param=f32;layout=cn;C=4098;tf32=1;weight=1;arch=sm_90a' -o %t.b2 && cat %t.b2/*.ptx | FileCheck %s --check-prefix=BWD4
// RUN: rm -rf %t.b6 && mhc-compile --spec 'project.bwd;n=6;act=bf16;param=f32;layout=cn;C=4098;tf32=1;weight=1;arch=sm_90a' -o %t.b6 && cat %t.b6/*.ptx | FileCheck %s --check-prefix=BWD4
// RUN: rm -rf %t.w6 && mhc-compile --spec 'project.bwd;n=6;act=bf16;param=f32;layout=cn;C=5124;tf32=1;weight=0;arch=sm_90a' -o %t.w6 && cat %t.w6/mhc*.json | FileCheck %s --check-prefix=WIDE6JSON
// RUN: cat %t.w6/*.ptx | FileCheck %s --check-prefix=WIDE6
// RUN: rm -rf %t.p8 && mhc-compile --spec 'project.bwd;n=6;act=bf16;param=f32;layout=cn;C=5126;tf32=1;weight=0;acc=f32;arch=sm_90a' -o %t.p8 && cat %t.p8/mhc*.json | FileCheck %s --check-prefix=PIECES8JSON
// RUN: cat %t.p8/*.ptx | FileCheck %s --check-prefix=PIECES8
// RUN: rm -rf %t.p4 && mhc-compile --spec 'project.bwd;n=6;act=bf16;param=f32;layout=nc;C=5127;tf32=1;weight=0;arch=sm_90a' -o %t.p4 && cat %t.p4/mhc*.json | FileCheck %s --check-prefix=PIECES4JSON
// RUN: cat %t.p4/*.ptx | FileCheck %s --check-prefix=PIECES4
// RUN: rm -rf %t.b80 && mhc-compile --spec 'project.bwd;n=4;act=bf16;param=f32;layout=cn;C=5129;tf32=1;weight=0;arch=sm_80' -o %t.b80 && cat %t.b80/*.ptx | FileCheck %s --check-prefix=BWD80
// RUN: rm -rf %t.b3 && mhc-compile --spec 'project.bwd;n=3;act=bf16;param=f32;layout=cn;C=5127;tf32=0;weight=1;arch=sm_90a' -o %t.b3 && cat %t.b3/*.ptx | FileCheck %s --check-prefix=BWDODD
// RUN: rm -rf %t.rw && mhc-compile --spec 'project.bwd;n=1;act=bf16;param=f32;layout=cn;C=5122;tf32=1;weight=0;arch=sm_90a' -o %t.rw && cat %t.rw/*.ptx | FileCheck %s --check-prefix=ROWWORDS
// RUN: rm -rf %t.gg && mhc-compile --spec 'project.bwd;n=1;act=bf16;param=f32;layout=cn;C=5121;tf32=1;weight=0;arch=sm_90a' -o %t.gg && cat %t.gg/*.ptx | FileCheck %s --check-prefix=GXSTAGED
// RUN: cat %t.gg/*.ptx | FileCheck %s --check-prefix=NOSHFL
// RUN: rm -rf %t.gp && mhc-compile --spec 'project.bwd;n=1;act=bf16;param=f32;layout=cn;C=5121;tf32=0;weight=0;arch=sm_90a' -o %t.gp && cat %t.gp/*.ptx | FileCheck %s --check-prefix=GXSTAGED
// RUN: cat %t.rw/*.ptx | FileCheck %s --check-prefix=GXGRANULES
// RUN: cat %t.b3/*.ptx | FileCheck %s --check-prefix=NOSHFL
// RUN: rm -rf %t.bf && mhc-compile --spec 'project.bwd;n=3;act=f32;param=f32;layout=cn;C=5127;tf32=1;weight=0;arch=sm_90a' -o %t.bf && cat %t.bf/*.ptx | FileCheck %s --check-prefix=BWDF32
// RUN: rm -rf %t.f8w && mhc-compile --spec 'project.fwd;n=8;act=bf16;param=f32;layout=cn;C=5124;tf32=1;weight=0;arch=sm_90a' -o %t.f8w && cat %t.f8w/*.ptx | FileCheck %s --check-prefix=FWD8W
// RUN: rm -rf %t.sw && mhc-compile --spec 'post_pre.fwd;n=4;act=bf16;param=f32;layout=cn;C=4104;tf32=1;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=1;arch=sm_90a' -o %t.sw && cat %t.sw/*.json %t.sw/*.ptx | FileCheck %s --check-prefix=SEAMW
// RUN: rm -rf %t.s && mhc-compile --spec 'post_pre.fwd;n=4;act=bf16;param=f32;layout=cn;C=5129;tf32=1;weight=0;norm_eps=9.99999997e-07;pre_eps=9.99999997e-07;post_mult=2;mode=log;iters=20;bias=1;arch=sm_90a' -o %t.s && cat %t.s/*.json | FileCheck %s --check-prefix=SEAM

// K % 8 == 4: the staged variant's pack, partial and reduce, its
// 128-column chunks (K = 20516 = 160 * 128 + 36: 161 chunks, the last one
// padded with zeros by the pack and masked at K by the partial) split up
// to 64 ways. The pack reads phi masked at K (f32 rows 16-byte aligned);
// the partial streams the packed chunks by bulk copies and reads x in
// 8-byte pieces, the last chunk's masked (a select to 0 after each load).
// FWD4JSON: "split": {"tokens_per_block": 128, "target_blocks": {{[0-9]+}}, "max": 64,
// FWD4JSON: "entry": "mhc_project_fwd_n4_{{[0-9a-f]+}}_pack"
// FWD4JSON: "entry": "mhc_project_fwd_n4_{{[0-9a-f]+}}_partial"
// FWD4JSON: "entry": "mhc_project_fwd_n4_{{[0-9a-f]+}}_reduce"
// FWD4PTX-LABEL: .entry mhc_project_fwd_n4_{{[0-9a-f]+}}_pack(
// FWD4PTX: setp.lt.u64 [[OK:%p[0-9]+]], %rd{{[0-9]+}}, 20516;
// FWD4PTX: ld.global.nc.v4.b32
// FWD4PTX-NEXT: selp.f32 %r{{[0-9]+}}, %r{{[0-9]+}}, 0f00000000, [[OK]];
// FWD4PTX-LABEL: .entry mhc_project_fwd_n4_{{[0-9a-f]+}}_partial(
// FWD4PTX: cp.async.bulk.shared::cluster.global
// FWD4PTX: ld.global.nc.v2.b32 {[[W0:%r[0-9]+]], [[W1:%r[0-9]+]]}
// FWD4PTX-NEXT: selp.b32 %r{{[0-9]+}}, [[W1]], 0, %p{{[0-9]+}};
// FWD4PTX: ld.global.nc.v2.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[XROW:%rd[0-9]+]]+64{{\]}};
// FWD4PTX-NEXT: ld.global.nc.v2.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[XROW]]+72{{\]}};
// FWD4PTX-LABEL: .entry mhc_project_fwd_n4_{{[0-9a-f]+}}_reduce(

// K % 8 == 4 at n = 6 (tf32, sm_90a): the staged variant on wgmma, its
// pack reading bf16 phi and weight in 8-byte pieces (rows 8-byte aligned);
// the partial's rows by parity: the even tokens' (16-byte aligned) in one
// 16-byte load per lane and pair, the odd tokens' in two 8-byte loads.
// FWD6: "entry": "mhc_project_fwd_n6_{{[0-9a-f]+}}_pack"
// FWD6: "entry": "mhc_project_fwd_n6_{{[0-9a-f]+}}_partial"
// FWD6-LABEL: .entry mhc_project_fwd_n6_{{[0-9a-f]+}}_pack(
// FWD6-NOT: ld.global.nc.v4.b32
// FWD6: ld.global.nc.v4.b16
// FWD6-NOT: ld.global.nc.v4.b32
// FWD6-LABEL: .entry mhc_project_fwd_n6_{{[0-9a-f]+}}_partial(
// FWD6: ld.global.nc.v4.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[EVEN:%rd[0-9]+]]{{\]}};
// FWD6-NEXT: ld.global.nc.v4.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[EVEN]]+64{{\]}};
// FWD6: ld.global.nc.v2.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[ODD:%rd[0-9]+]]{{\]}};
// FWD6-NEXT: ld.global.nc.v2.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[ODD]]+8{{\]}};
// FWD6: wgmma.mma_async

// K % 8 == 2 at n = 2 (rows 4-byte aligned): the partial reads each lane's
// 16 bytes as the two aligned 16-byte granules that hold them (the second
// 0 or 16 bytes on) and shifts them by the row's offset in words, two
// selects deep (realignX); its masked last chunk in 4-byte pieces.
// FWD2-LABEL: .entry mhc_project_fwd_n2_{{[0-9a-f]+}}_partial(
// FWD2: ld.global.nc.b32 [[P:%r[0-9]+]]
// FWD2-NEXT: selp.b32 %r{{[0-9]+}}, [[P]], 0, %p{{[0-9]+}};
// FWD2: ld.global.nc.v4.b32 {[[A0:%r[0-9]+]], [[A1:%r[0-9]+]], [[A2:%r[0-9]+]], %r{{[0-9]+}}}, {{\[}}[[FIRST:%rd[0-9]+]]{{\]}};
// FWD2: ld.global.nc.v4.b32 {[[B0:%r[0-9]+]], %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[SECOND:%rd[0-9]+]]{{\]}};
// FWD2: ld.global.nc.v4.b32 {{.*}}{{\[}}[[FIRST]]+64{{\]}};
// FWD2: selp.b32 [[U0:%r[0-9]+]], [[A2]], [[A0]], [[BIT1:%p[0-9]+]];
// FWD2: selp.b32 [[U1:%r[0-9]+]], %r{{[0-9]+}}, [[A1]], [[BIT1]];
// FWD2: selp.b32 %r{{[0-9]+}}, [[U1]], [[U0]], [[BIT0:%p[0-9]+]];
// FWD2: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// FWD2-LABEL: .entry mhc_project_fwd_n2_{{[0-9a-f]+}}_partial_few(
// FWD2-NOT: ld.global.nc.v4.b32 {{.*}}+64]

// K % 8 == 2 at n = 6 (tf32 on wgmma): rows g of an m-tile are its even
// tokens, read in two 8-byte loads, rows g + 8 its odd ones, in 4, 8 and 4
// bytes (parityRows); the masked last chunk in 4-byte pieces.
// FWD6P-LABEL: .entry mhc_project_fwd_n6_{{[0-9a-f]+}}_partial(
// FWD6P: ld.global.nc.b32
// FWD6P: ld.global.nc.v2.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[EVEN:%rd[0-9]+]]{{\]}};
// FWD6P-NEXT: ld.global.nc.v2.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[EVEN]]+8{{\]}};
// FWD6P: ld.global.nc.b32 %r{{[0-9]+}}, {{\[}}[[ODD:%rd[0-9]+]]{{\]}};
// FWD6P-NEXT: ld.global.nc.v2.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}}, {{\[}}[[ODD]]+4{{\]}};
// FWD6P-NEXT: ld.global.nc.b32 %r{{[0-9]+}}, {{\[}}[[ODD]]+12{{\]}};
// FWD6P: wgmma.mma_async

// K % 8 == 0 with no 32-column chunk dividing K (n = 6, C = 5124): the
// staged variant too, its last chunk's x masked per word in 16-byte pieces.
// FWD6K32: "entry": "mhc_project_fwd_n6_{{[0-9a-f]+}}_pack"
// FWD6K32: "entry": "mhc_project_fwd_n6_{{[0-9a-f]+}}_partial"
// FWD6K32-LABEL: .entry mhc_project_fwd_n6_{{[0-9a-f]+}}_partial(
// FWD6K32: ld.global.nc.v4.b32 {{{%r[0-9]+, %r[0-9]+, %r[0-9]+}}, [[W3:%r[0-9]+]]}
// FWD6K32-NEXT: selp.b32 %r{{[0-9]+}}, [[W3]], 0, %p{{[0-9]+}};
// FWD6K32: wgmma.mma_async

// Odd K in bf16: the staged variant too (pack, partial); at n <= 3 a
// lane's 16 bytes of a row come as the two aligned 16-byte granules that
// hold them, shifted by words and then by the row's half-word (a funnel
// shift by a register); the masked last chunk reads element by element;
// no vector load of a 2-byte element run.
// FWDODDJSON: "entry": "mhc_project_fwd_n3_{{[0-9a-f]+}}_pack"
// FWDODDJSON: "entry": "mhc_project_fwd_n3_{{[0-9a-f]+}}_partial"
// FWDODD-LABEL: .entry mhc_project_fwd_n3_{{[0-9a-f]+}}_partial(
// FWDODD-NOT: ld.global.nc.v{{[248]}}.b16
// FWDODD: ld.global.nc.b16
// FWDODD: ld.global.nc.v4.b32
// FWDODD: shf.r.wrap.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}};
// FWDODD: mma.sync.aligned
// FWDODD-NOT: ld.global.nc.v{{[248]}}.b16
// On wgmma (n = 7) by the rows' parity: the even tokens' rows start 4-byte
// aligned, the odd ones' a half-word past: a constant shift of 16 bits.
// FWDODD7-LABEL: .entry mhc_project_fwd_n7_{{[0-9a-f]+}}_partial(
// FWDODD7-NOT: shf.r.wrap.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}};
// FWDODD7: shf.{{[lr]}}.wrap.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, 16;
// FWDODD7: wgmma.mma_async
// Odd K in f16: the tf32 variant (no pack), x element by element.
// FWDODDF16JSON: "entry": "mhc_project_fwd_n3_{{[0-9a-f]+}}_partial"
// FWDODDF16JSON-NOT: _pack"
// FWDODDF16JSON: "entry": "mhc_project_fwd_n3_{{[0-9a-f]+}}_reduce"
// FWDODDF16-NOT: ld.global.nc.v{{[248]}}.b16
// FWDODDF16-NOT: ld.global.nc.v{{[24]}}.u16
// FWDODDF16: ld.global.nc.b16
// FWDODDF16-NOT: ld.global.nc.v{{[248]}}.b16

// K % 8 == 4 on sm_90a (n = 4 at odd C; n = 2 at C = 2 mod 4; n = 6 there
// with a weight or f16 x): the
// block ring, each row bulk-copied from the 16-byte boundary below it (no
// cp.async pieces) and read back in 8-byte pieces; gx by 8-byte stores.
// On sm_80: the per-warp ring's 8-byte cp.async pieces, no bulk copies.
// BWD4-NOT: cp.async.ca
// BWD4: cp.async.bulk.shared::cluster.global
// BWD4: ld.shared.v4.b16
// BWD4: st.global.v2.b32
// BWD4-NOT: cp.async.ca

// The block ring at 8-byte rows runs its step loop without the column masks
// in the slices inside K and with them in the last: the loop twice, 24
// mma.sync each at n = 4 (tf32: 3 row steps x 4 k-tiles x D and gphi). At
// 4-byte rows (n = 2, C = 5121) one loop of 8.
// SLICES-COUNT-48: mma.sync.aligned
// SLICES-NOT: mma.sync.aligned
// ONELOOP-COUNT-8: mma.sync.aligned
// ONELOOP-NOT: mma.sync.aligned
// BWD80-NOT: cp.async.bulk
// BWD80: cp.async.ca.shared.global [%rd{{[0-9]+}}{{(\+[0-9]+)?}}], [%rd{{[0-9]+}}{{(\+[0-9]+)?}}], 8, %r{{[0-9]+}};
// BWD80-NOT: cp.async.bulk
// BWD80: st.global.v2.b32
// BWD80-NOT: cp.async.bulk

// K % 64 != 0 with 16-byte rows (n = 6, C = 5124: K = 30744 = 480 * 64 +
// 24; bf16, tf32, no weight, sm_90a): the one-wave kernel, 121 blocks of 4
// boxes (the last block's one box of 24 columns and three past K, which
// the tensor maps zero on load and drop on store). phi is read masked at K
// (the index clamped to K - 1, then a select to 0), gphi stored below K.
// (At K % 8 = 4 no tensor map describes x: an odd token's row starts 8
// bytes past a 16-byte boundary, and a TMA box must start on one.)
// WIDE6JSON: "entry": "mhc_project_bwd_n6_{{[0-9a-f]+}}_pad"
// WIDE6JSON: "entry": "mhc_project_bwd_n6_{{[0-9a-f]+}}_main", "params": ["tmap16:x", "tmap16:gx", "ghp", "phi", "gphi", "progress", "M"], {{.*}} "fixed_blocks": 121, {{.*}} "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0,
// WIDE6-LABEL: .entry mhc_project_bwd_n6_{{[0-9a-f]+}}_main(
// WIDE6: min.u64 %rd{{[0-9]+}}, %rd{{[0-9]+}}, 30743;
// WIDE6: setp.lt.u64 %p{{[0-9]+}}, %rd{{[0-9]+}}, 30744;
// WIDE6: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
// WIDE6: setp.gt.u64 %p{{[0-9]+}}, %rd{{[0-9]+}}, 30743;
// WIDE6: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes

// The one-wave kernel where x's rows are 8- or 4-byte aligned (n = 6 at C %
// 4 != 0; bf16, tf32, no weight, sm_90a): x by P = 2 or 4 phase maps over
// every P-th token (map 0 swizzled, straight into the boxes' first rows;
// the others unswizzled, 320 columns in granules of 64 (one 3-D copy per
// map and step) from the 16-byte boundary below their tokens, into staging
// slots that the producer warpgroup copies into the boxes; the step that
// holds the last token through 2-D edge maps of one row and granule), no
// per-thread cp.async; gx out by st.global pieces (16 bytes for map 0's
// rows, the alignment for the others) with acc added there (no launch
// "acc").
// PIECES8JSON: "entry": "mhc_project_bwd_n6_{{[0-9a-f]+}}_main", "params": ["tmap8,2,0:x", "tmap8,2,1,320,64:x", "tmap1,2,1,64:x", "gx", "acc", "ghp", "phi", "gphi", "progress", "M"], {{.*}} "fixed_blocks": 121,
// PIECES8JSON-NOT: _acc"
// PIECES8-LABEL: .entry mhc_project_bwd_n6_{{[0-9a-f]+}}_main(
// PIECES8-NOT: cp.async.ca
// PIECES8-DAG: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PIECES8-DAG: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PIECES8-DAG: ld.shared.v2.b32
// PIECES8-DAG: st.shared.v4.b32
// PIECES8-DAG: ld.global.nc.v4.b32
// PIECES8-DAG: st.global.v4.b32
// PIECES8-DAG: st.global.v2.b32
// PIECES8-NOT: cp.async.ca
// PIECES4JSON: "entry": "mhc_project_bwd_n6_{{[0-9a-f]+}}_main", "params": ["tmap4,4,0:x", "tmap4,4,1,320,64:x", "tmap4,4,2,320,64:x", "tmap4,4,3,320,64:x", "tmap1,4,1,64:x", "tmap1,4,2,64:x", "tmap1,4,3,64:x", "gx", "ghp", "phi", "gphi", "progress", "M"], {{.*}} "fixed_blocks": 121,
// PIECES4-LABEL: .entry mhc_project_bwd_n6_{{[0-9a-f]+}}_main(
// PIECES4-NOT: cp.async.ca
// PIECES4-DAG: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PIECES4-DAG: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PIECES4-DAG: ld.shared.b32
// PIECES4-DAG: st.shared.v4.b32
// PIECES4-DAG: st.global.v4.b32
// PIECES4-DAG: st.global.b32
// PIECES4-NOT: cp.async.ca

// Odd K with 2-byte x: x as the aligned 4-byte words that hold a lane's
// columns (cp.async has no 2-byte copy), read back as whole words and
// funnel-shifted by the row's half-word; gx in aligned words where the
// lane's columns lie inside K, the odd rows' two ends and the lane that
// crosses K by element.
// BWDODD-NOT: cp.async.bulk
// BWDODD-NOT: ld.global.nc.b16
// BWDODD-NOT: st.shared.b16
// BWDODD: cp.async.ca.shared.global [%rd{{[0-9]+}}{{(\+[0-9]+)?}}], [%rd{{[0-9]+}}{{(\+[0-9]+)?}}], 4, %r{{[0-9]+}};
// The lane slots word-major: a word's copies 32 words (128 bytes) apart.
// BWDODD: cp.async.ca.shared.global [%rd{{[0-9]+}}+256], [%rd{{[0-9]+}}], 4, %r{{[0-9]+}};
// BWDODD: shf.r.wrap.b32
// BWDODD-DAG: st.global.b32
// BWDODD-DAG: st.global.b16

// n = 1 at 4-byte rows (K = 5122): the warp copies each of the step's 8
// rows as words, lane j word j, the rows 33 words (132 bytes) apart.
// ROWWORDS-NOT: cp.async.bulk
// ROWWORDS: cp.async.ca.shared.global [%rd[[D:[0-9]+]]+132], [%rd{{[0-9]+}}], 4, %r{{[0-9]+}};
// ROWWORDS: cp.async.ca.shared.global [%rd[[D]]+264], [%rd{{[0-9]+}}], 4, %r{{[0-9]+}};
// ROWWORDS: cp.async.ca.shared.global [%rd[[D]]+924], [%rd{{[0-9]+}}], 4, %r{{[0-9]+}};
// ROWWORDS-NOT: shf.r.wrap

// gx at 4-byte rows with laneCols 8 (n = 1 tf32, K = 5122): each lane's
// 16 bytes as the aligned granule that holds its first column, the head
// from the lane before (a shuffle up by 4 lanes: g - 1).
// GXGRANULES: shfl.sync.up.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 4, 0, -1;
// GXGRANULES: st.global.v4.b32 [%rd{{[0-9]+}}], {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}};

// At 2-byte rows (n = 1 tf32, K = 5121) the lanes trade gx through the
// step's stage instead: each writes its 16 bytes, and after a warp sync reads
// back its granule's, funnel-shifted by the row's half-word (the odd rows
// u = 1 by 16 bits: a constant); a second sync before the stage is
// refilled; in precise mode too (n = 1, K = 5121, no weight or acc). No
// shuffles (NOSHFL), nor at laneCols 4 (n = 3 precise), which stores pairs.
// GXSTAGED: mma.sync
// GXSTAGED: st.shared.v4.b32
// GXSTAGED: bar.warp.sync
// GXSTAGED: ld.shared.b32
// GXSTAGED: bar.warp.sync
// GXSTAGED: st.global.v4.b32 [%rd{{[0-9]+}}], {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}};
// GXSTAGED: shf.{{[lr]}}.wrap.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, 16;
// NOSHFL-NOT: shfl.sync.up

// f32 x at odd K: 4-byte cp.async pieces.
// BWDF32: cp.async.ca.shared.global [%rd{{[0-9]+}}{{(\+[0-9]+)?}}], [%rd{{[0-9]+}}{{(\+[0-9]+)?}}], 4, %r{{[0-9]+}};
// BWDF32-NOT: st.global.v{{[24]}}.f32

// The seam at K % 8 != 0 composes its parts (no fused expand + partials):
// expand_combine, then the pre step's staged pack, partial and tail.
// SEAM-NOT: _expand_partial"
// SEAM: "entry": "mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_post_main"
// SEAM-NOT: _expand_partial"
// SEAM: "entry": "mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_pre_pack"
// SEAM: "entry": "mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_pre_partial"
// SEAM: "entry": "mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_pre_tail"

// K % 8 == 0 with the widest chunk not dividing K (n = 8, C = 5124: K % 128
// = 32): that chunk, its last one masked at K (16-byte loads zeroed past
// it), not a narrower one that divides K.
// FWD8W-LABEL: .entry mhc_project_fwd_n8_{{[0-9a-f]+}}_partial(
// FWD8W: wgmma.mma_async
// FWD8W: ld.global.nc.v4.b32 {{{%r[0-9]+, %r[0-9]+, %r[0-9]+, %r[0-9]+}}}, [%rd{{[0-9]+}}];
// FWD8W-NEXT: selp.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 0, %p{{[0-9]+}};

// The seam there (n = 4, C = 4104: K % 128 = 32) still fuses the expand
// into the projection's partial, at the chunking the parts' projection
// runs: x_next past K is zero for the products and not stored.
// SEAMW: "entry": "mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_expand_pack"
// SEAMW: "entry": "mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_expand_partial"
// SEAMW-NOT: _post_main"
// SEAMW-LABEL: .entry mhc_post_pre_fwd_n4_{{[0-9a-f]+}}_expand_partial(
// SEAMW: selp.f32 %r{{[0-9]+}}, %r{{[0-9]+}}, 0f00000000, %p{{[0-9]+}};
// SEAMW: st.global.v4.b32
