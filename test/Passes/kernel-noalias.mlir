// RUN: mhc-opt %s -split-input-file -verify-diagnostics -pass-pipeline='builtin.module(gpu.module(mhc-kernel-noalias))' | FileCheck %s

// A kernel module made by mhc-generate-kernels (its mhc.manifest lists each
// launch's parameters): the aligned pointer of each memref (the second of
// its five parameters) gets llvm.noalias; allocated pointers, sizes and M do
// not. A tensor map ("tmap:a") is one parameter: 128 bytes by value, a grid
// constant.
// CHECK-LABEL: gpu.module @mhc_kernel
// CHECK: llvm.func @k(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// CHECK: llvm.func @t(%{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// Device functions that are not kernels are left alone.
// CHECK: llvm.func @helper(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
gpu.module @mhc_kernel attributes {mhc.manifest = "{\"format\": 2, \"spec\": \"aggregate.fwd;n=4;act=bf16;layout=cn;C=64;arch=sm_90a\", \"hash\": \"0\", \"arch\": \"sm_90a\", \"compiler\": \"\", \"ptxas\": \"\", \"split\": {\"tokens_per_block\": 1, \"target_blocks\": 0, \"max\": 1}, \"buffers\": [{\"name\": \"a\", \"dtype\": \"bf16\", \"role\": \"input\", \"elems\": {\"per_token\": 64, \"fixed\": 0, \"per_token_split\": 0}}, {\"name\": \"b\", \"dtype\": \"bf16\", \"role\": \"output\", \"elems\": {\"per_token\": 64, \"fixed\": 0, \"per_token_split\": 0}}], \"launches\": [{\"entry\": \"k\", \"params\": [\"a\", \"b\", \"M\"], \"block\": [256, 1, 1], \"grid\": {\"tokens_per_block\": 1, \"fixed_blocks\": 0, \"times_split\": false, \"items_per_token\": 0, \"items_per_block\": 0}, \"dynamic_shared_bytes\": 0}, {\"entry\": \"t\", \"params\": [\"tmap:a\", \"b\", \"M\"], \"block\": [384, 1, 1], \"grid\": {\"tokens_per_block\": 64, \"fixed_blocks\": 0, \"times_split\": false, \"items_per_token\": 0, \"items_per_block\": 0}, \"dynamic_shared_bytes\": 0}]}"} {
  llvm.func @k(%a0: !llvm.ptr, %a1: !llvm.ptr, %a2: i64, %a3: i64, %a4: i64,
               %b0: !llvm.ptr, %b1: !llvm.ptr, %b2: i64, %b3: i64, %b4: i64,
               %m: i64) attributes {nvvm.kernel} {
    llvm.return
  }
  llvm.func @t(%map: !llvm.ptr,
               %b0: !llvm.ptr, %b1: !llvm.ptr, %b2: i64, %b3: i64, %b4: i64,
               %m: i64) attributes {nvvm.kernel} {
    llvm.return
  }
  llvm.func @helper(%p: !llvm.ptr, %q: !llvm.ptr) {
    llvm.return
  }
}

// -----

// Any other gpu.module is not mhc's: its buffers may alias.
// CHECK-LABEL: gpu.module @user
// CHECK: llvm.func @k(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: i64)
// CHECK-NOT: llvm.noalias
gpu.module @user {
  llvm.func @k(%a0: !llvm.ptr, %a1: !llvm.ptr, %m: i64) attributes {nvvm.kernel} {
    llvm.return
  }
}

// -----

// A manifest that does not parse is an error, not a silent skip.
// expected-error @below {{invalid mhc.manifest}}
gpu.module @broken attributes {mhc.manifest = "{}"} {
  llvm.func @k(%a0: !llvm.ptr, %a1: !llvm.ptr, %m: i64) attributes {nvvm.kernel} {
    llvm.return
  }
}

// -----

// A manifest listing more parameters than the kernel has (here a second
// tensor map) is an error, never an attribute past the last argument.
gpu.module @too_many attributes {mhc.manifest = "{\"format\": 2, \"spec\": \"aggregate.fwd;n=4;act=bf16;layout=cn;C=64;arch=sm_90a\", \"hash\": \"0\", \"arch\": \"sm_90a\", \"compiler\": \"\", \"ptxas\": \"\", \"split\": {\"tokens_per_block\": 1, \"target_blocks\": 0, \"max\": 1}, \"buffers\": [{\"name\": \"a\", \"dtype\": \"bf16\", \"role\": \"input\", \"elems\": {\"per_token\": 64, \"fixed\": 0, \"per_token_split\": 0}}, {\"name\": \"b\", \"dtype\": \"bf16\", \"role\": \"output\", \"elems\": {\"per_token\": 64, \"fixed\": 0, \"per_token_split\": 0}}], \"launches\": [{\"entry\": \"t\", \"params\": [\"tmap:a\", \"tmap:b\", \"b\", \"M\"], \"block\": [384, 1, 1], \"grid\": {\"tokens_per_block\": 64, \"fixed_blocks\": 0, \"times_split\": false, \"items_per_token\": 0, \"items_per_block\": 0}, \"dynamic_shared_bytes\": 0}]}"} {
  // expected-error @+1 {{kernel has 7 arguments, but its manifest's 4 parameters take 8}}
  llvm.func @t(%map: !llvm.ptr,
               %b0: !llvm.ptr, %b1: !llvm.ptr, %b2: i64, %b3: i64, %b4: i64,
               %m: i64) attributes {nvvm.kernel} {
    llvm.return
  }
}

// -----

// Fewer parameters than arguments would mark the wrong ones: an error too.
gpu.module @too_few attributes {mhc.manifest = "{\"format\": 2, \"spec\": \"aggregate.fwd;n=4;act=bf16;layout=cn;C=64;arch=sm_90a\", \"hash\": \"0\", \"arch\": \"sm_90a\", \"compiler\": \"\", \"ptxas\": \"\", \"split\": {\"tokens_per_block\": 1, \"target_blocks\": 0, \"max\": 1}, \"buffers\": [{\"name\": \"a\", \"dtype\": \"bf16\", \"role\": \"input\", \"elems\": {\"per_token\": 64, \"fixed\": 0, \"per_token_split\": 0}}, {\"name\": \"b\", \"dtype\": \"bf16\", \"role\": \"output\", \"elems\": {\"per_token\": 64, \"fixed\": 0, \"per_token_split\": 0}}], \"launches\": [{\"entry\": \"t\", \"params\": [\"tmap:a\", \"b\"], \"block\": [384, 1, 1], \"grid\": {\"tokens_per_block\": 64, \"fixed_blocks\": 0, \"times_split\": false, \"items_per_token\": 0, \"items_per_block\": 0}, \"dynamic_shared_bytes\": 0}]}"} {
  // expected-error @+1 {{kernel has 7 arguments, but its manifest's 2 parameters take 6}}
  llvm.func @t(%map: !llvm.ptr,
               %b0: !llvm.ptr, %b1: !llvm.ptr, %b2: i64, %b3: i64, %b4: i64,
               %m: i64) attributes {nvvm.kernel} {
    llvm.return
  }
}

// -----

// A tensor map (or a memref's aligned pointer) where the kernel has no
// pointer: llvm.byval / llvm.noalias would be invalid there.
gpu.module @not_pointer attributes {mhc.manifest = "{\"format\": 2, \"spec\": \"aggregate.fwd;n=4;act=bf16;layout=cn;C=64;arch=sm_90a\", \"hash\": \"0\", \"arch\": \"sm_90a\", \"compiler\": \"\", \"ptxas\": \"\", \"split\": {\"tokens_per_block\": 1, \"target_blocks\": 0, \"max\": 1}, \"buffers\": [{\"name\": \"a\", \"dtype\": \"bf16\", \"role\": \"input\", \"elems\": {\"per_token\": 64, \"fixed\": 0, \"per_token_split\": 0}}, {\"name\": \"b\", \"dtype\": \"bf16\", \"role\": \"output\", \"elems\": {\"per_token\": 64, \"fixed\": 0, \"per_token_split\": 0}}], \"launches\": [{\"entry\": \"t\", \"params\": [\"tmap:a\", \"b\", \"M\"], \"block\": [384, 1, 1], \"grid\": {\"tokens_per_block\": 64, \"fixed_blocks\": 0, \"times_split\": false, \"items_per_token\": 0, \"items_per_block\": 0}, \"dynamic_shared_bytes\": 0}]}"} {
  // expected-error @+1 {{argument 0 (manifest parameter 'tmap:a') is 'i64', not a pointer}}
  llvm.func @t(%map: i64,
               %b0: !llvm.ptr, %b1: !llvm.ptr, %b2: i64, %b3: i64, %b4: i64,
               %m: i64) attributes {nvvm.kernel} {
    llvm.return
  }
}
