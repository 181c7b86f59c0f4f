// Kernels of mhc.project: the forward runs on the tensor cores (mma.sync
// m16n8k8 tf32), with split-K partials reduced in order by a second launch;
// without the tf32 flag each k-step takes two mma's (phi split into a tf32
// high part and the rest), with it one. The backward is one fused pass over
// x on the tensor cores too: per 8-token step and 16-column k-tile, D^T =
// phi^T gh^T and gphi^T += x^T gh; without the tf32 flag 3 + 2 mma's per
// (k-tile, 8 rows of N): n = 4 takes 2 k-tiles x 3 -> 30 mma.sync per step.
// gphi and gw leave through fixed-order partials. No atomics.
// RUN: mhc-compile --spec 'project.fwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=0;weight=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=FWD
// RUN: mhc-compile --spec 'project.fwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=1;weight=0;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=TF32
// RUN: mhc-compile --spec 'project.bwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=0;weight=1;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=BWD
// RUN: rm -rf %t.b && mhc-compile --spec 'project.bwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=0;weight=1;arch=sm_90a' -o %t.b && cat %t.b/*.ptx | FileCheck %s --check-prefix=BWDPTX
// RUN: rm -rf %t && mhc-compile --spec 'project.fwd;n=4;act=bf16;param=f32;layout=nc;C=7168;tf32=0;weight=1;arch=sm_90a' -o %t && FileCheck %s --check-prefix=PTX < %t/mhc_project_fwd_n4_03eab2f6f90b18df.ptx

// FWD: gpu.func @mhc_project_fwd_n4_03eab2f6f90b18df_partial(%{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// FWD-DAG: arith.constant 28672 : index
// FWD: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// FWD-COUNT-2: nvgpu.mma.sync(%{{.*}}, %{{.*}}, %{{.*}}) {mmaShape = [16, 8, 8], tf32Enabled} : (vector<4x1xf32>, vector<2x1xf32>, vector<2x2xf32>) -> vector<2x2xf32>
// FWD: gpu.func @mhc_project_fwd_n4_03eab2f6f90b18df_reduce(
// FWD-NOT: atomic

// TF32: nvgpu.mma.sync
// TF32-NOT: arith.andi
// TF32: gpu.func

// BWD: gpu.func @mhc_project_bwd_n4_{{.*}}_main(
// BWD: scf.for
// BWD: scf.for
// BWD-COUNT-30: nvgpu.mma.sync
// BWD: gpu.func @mhc_project_bwd_n4_{{.*}}_partials_final(
// BWD-NOT: atomic

// PTX-DAG: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// PTX-DAG: ld.global.nc.v4.b32
// PTX-NOT: atom.

// BWDPTX: .entry mhc_project_bwd_n4_{{.*}}_main(
// BWDPTX: .maxntid 128, 1, 1
// BWDPTX: .minnctapersm 3
// BWDPTX: .shared .align 4 .b8 {{.*}}[24576];
// BWDPTX: st.shared.v4.b32
// BWDPTX: bar.warp.sync
// BWDPTX: ld.shared.v4.b32
// BWDPTX: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// BWDPTX: .entry mhc_project_bwd_n4_{{.*}}_partials_final(
// BWDPTX-NOT: atom.
