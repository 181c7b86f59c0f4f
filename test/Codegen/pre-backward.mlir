// Kernels of the pre step's backward (pre.bwd, codegen/kernels/PreBackward.cpp;
// docs/design/seam.md, "The pre step's backward"): on the flagship (n = 4,
// bf16, f32 parameters, (C, n), sm_90a) the token pass is aggregate's gpre
// alone and the projection backward's main launch forms aggregate's x
// gradient from gy and pre (no g1 written or read), with no acc, acc=1 or
// TE's f32 buffer (acc=f32: acc loaded as f32 vectors); where the plan's
// lanes do not hold whole channels (K % 8 != 0) the four ops' kernels run
// in turn, aggregate's gx (g1) read back as project's acc; other specs have
// no pre.bwd (the four torch ops run).
// (The inputs are kernel specs; this file has no IR of its own.)
// RUN: rm -rf %t && mhc-compile --spec 'pre.bwd;n=4;act=bf16;param=f32;layout=cn;C=4096;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;arch=sm_90a' -o %t && FileCheck %s --check-prefix=FUSED < %t/mhc_pre_bwd_n4_fad7a1cfaf1e513a.json
// RUN: rm -rf %t && mhc-compile --spec 'pre.bwd;n=4;act=bf16;param=f32;layout=cn;C=4096;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;acc=1;arch=sm_90a' -o %t && FileCheck %s --check-prefix=ACT < %t/mhc_pre_bwd_n4_898658ff21db286a.json
// RUN: rm -rf %t && mhc-compile --spec 'pre.bwd;n=4;act=bf16;param=f32;layout=cn;C=4096;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;acc=f32;arch=sm_90a' -o %t && FileCheck %s --check-prefix=F32 < %t/mhc_pre_bwd_n4_96e7154a70eaa03e.json
// RUN: mhc-compile --spec 'pre.bwd;n=4;act=bf16;param=f32;layout=cn;C=4096;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;acc=f32;arch=sm_90a' --print-ir | FileCheck %s --check-prefix=F32IR
// RUN: rm -rf %t && mhc-compile --spec 'pre.bwd;n=4;act=bf16;param=f32;layout=cn;C=5129;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;arch=sm_90a' -o %t && FileCheck %s --check-prefix=COMPOSED < %t/mhc_pre_bwd_n4_2aa7b059ce9da62a.json
// RUN: not mhc-compile --spec 'pre.bwd;n=4;act=bf16;param=f32;layout=nc;C=4096;tf32=1;weight=0;norm_eps=1.1920929e-07;pre_eps=0;post_mult=2;mode=log;iters=20;arch=sm_90a' -o %t 2>&1 | FileCheck %s --check-prefix=NC

// The contract (operands, then results), then the stages' workspaces: no g1.
// FUSED: "buffers": [
// FUSED-NEXT: {"name": "gy", "dtype": "bf16", "role": "input", "elems": {"per_token": 4096,
// FUSED-NEXT: {"name": "gpost", "dtype": "f32", "role": "input", "elems": {"per_token": 4,
// FUSED-NEXT: {"name": "gP", "dtype": "f32", "role": "input", "elems": {"per_token": 16,
// FUSED-NEXT: {"name": "x", "dtype": "bf16", "role": "input", "elems": {"per_token": 16384,
// FUSED-NEXT: {"name": "h", "dtype": "f32", "role": "input", "elems": {"per_token": 24,
// FUSED-NEXT: {"name": "ms", "dtype": "f32", "role": "input",
// FUSED-NEXT: {"name": "pre", "dtype": "f32", "role": "input",
// FUSED-NEXT: {"name": "logits", "dtype": "f32", "role": "input",
// FUSED-NEXT: {"name": "phi", "dtype": "f32", "role": "input",
// FUSED-NEXT: {"name": "alpha", "dtype": "f32", "role": "input",
// FUSED-NEXT: {"name": "beta", "dtype": "f32", "role": "input",
// FUSED-NEXT: {"name": "gx", "dtype": "bf16", "role": "output", "elems": {"per_token": 16384,
// FUSED-NEXT: {"name": "gphi", "dtype": "f32", "role": "output",
// FUSED-NEXT: {"name": "galpha", "dtype": "f32", "role": "output",
// FUSED-NEXT: {"name": "gbeta", "dtype": "f32", "role": "output",
// FUSED-NOT: "g1"
// FUSED: "entry": "mhc_pre_bwd_n4_fad7a1cfaf1e513a_aggregate_main", "params": ["gy", "x", "gpre", "M"]
// FUSED: "entry": "mhc_pre_bwd_n4_fad7a1cfaf1e513a_sinkhorn_main", "params": ["gP", "logits", "glogits", "M"]
// FUSED: "entry": "mhc_pre_bwd_n4_fad7a1cfaf1e513a_scale_main", "params": ["gpre", "gpost", "glogits", "h", "ms", "alpha", "beta", "gh", "gms", "scale_contrib", "M"]
// FUSED: "entry": "mhc_pre_bwd_n4_fad7a1cfaf1e513a_project_main", "params": ["gh", "gms", "x", "phi", "gy", "pre", "gx", "project_partials", "project_progress", "M"]
// FUSED: "entry": "mhc_pre_bwd_n4_fad7a1cfaf1e513a_project_partials_final", "params": ["project_partials", "gphi"]

// acc=1: acc in x's dtype, read by the projection's main launch only.
// ACT: {"name": "acc", "dtype": "bf16", "role": "input", "elems": {"per_token": 16384,
// ACT: "entry": "mhc_pre_bwd_n4_898658ff21db286a_aggregate_main", "params": ["gy", "x", "gpre", "M"]
// ACT: "entry": "mhc_pre_bwd_n4_898658ff21db286a_project_main", "params": ["gh", "gms", "x", "phi", "acc", "gy", "pre", "gx", "project_partials", "project_progress", "M"]

// acc=f32: TE's buffer, an f32 input (read, never written), gx in bf16.
// F32: {"name": "acc", "dtype": "f32", "role": "input", "elems": {"per_token": 16384,
// F32-NEXT: {"name": "gx", "dtype": "bf16", "role": "output",
// F32: "entry": "mhc_pre_bwd_n4_96e7154a70eaa03e_aggregate_main", "params": ["gy", "x", "gpre", "M"]
// F32: "entry": "mhc_pre_bwd_n4_96e7154a70eaa03e_project_main", "params": ["gh", "gms", "x", "phi", "acc", "gy", "pre", "gx", "project_partials", "project_progress", "M"]

// The main launch loads the f32 acc as f32 vectors and gy as bf16.
// F32IR: gpu.func @mhc_pre_bwd_n4_96e7154a70eaa03e_project_main(%{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: memref<?xbf16>, %{{[a-z0-9]+}}: memref<?xf32>, %[[BUF:[a-z0-9]+]]: memref<?xf32>, %[[GY:[a-z0-9]+]]: memref<?xbf16>, %[[PRE:[a-z0-9]+]]: memref<?xf32>, %[[GX:[a-z0-9]+]]: memref<?xbf16>,
// F32IR: vector.load %[[BUF]][%{{.*}}] {{.*}} : memref<?xf32>, vector<4xf32>
// F32IR: vector.store %{{.*}}, %[[GX]]
// F32IR: gpu.func @mhc_pre_bwd_n4_96e7154a70eaa03e_project_partials_final(

// K % 8 != 0: the parts' own kernels, aggregate's gx (g1) is project's acc.
// COMPOSED: {"name": "g1", "dtype": "bf16", "role": "workspace", "elems": {"per_token": 20516,
// COMPOSED: "entry": "mhc_pre_bwd_n4_2aa7b059ce9da62a_aggregate_main", "params": ["gy", "x", "pre", "g1", "gpre", "M"]
// COMPOSED: "entry": "mhc_pre_bwd_n4_2aa7b059ce9da62a_project_main", "params": ["gh", "gms", "x", "phi", "g1", "gx", "project_partials", "project_progress", "M"]

// NC: the pre step's backward kernel is the flagship's (n = 4, bf16 activations, f32 parameters, sm_90a, layout cn)
