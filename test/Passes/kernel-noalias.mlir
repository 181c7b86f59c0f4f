// RUN: mhc-opt %s -split-input-file -pass-pipeline='builtin.module(gpu.module(mhc-kernel-noalias))' | FileCheck %s

// A kernel module made by mhc-generate-kernels (it has mhc.manifest): the
// aligned pointer of each memref (the second of its five parameters) gets
// llvm.noalias; allocated pointers, sizes and M do not.
// CHECK-LABEL: gpu.module @mhc_kernel
// CHECK: llvm.func @k(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr {llvm.noalias}, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// Device functions that are not kernels are left alone.
// CHECK: llvm.func @helper(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
gpu.module @mhc_kernel attributes {mhc.manifest = "{}"} {
  llvm.func @k(%a0: !llvm.ptr, %a1: !llvm.ptr, %a2: i64, %a3: i64, %a4: i64,
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
