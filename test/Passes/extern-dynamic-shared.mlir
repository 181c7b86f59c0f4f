// RUN: mhc-opt %s -split-input-file -pass-pipeline='builtin.module(gpu.module(mhc-extern-dynamic-shared))' | FileCheck %s

// GPU-to-NVVM's symbol for gpu.dynamic_shared_memory becomes an external
// declaration (PTX: .extern .shared .b8 __dynamic_shmem__0[]).
// CHECK-LABEL: gpu.module @kernels
// CHECK: llvm.mlir.global external @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>
gpu.module @kernels {
  llvm.mlir.global internal @__dynamic_shmem__0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>
  llvm.func @k() attributes {nvvm.kernel} {
    %0 = llvm.mlir.addressof @__dynamic_shmem__0 : !llvm.ptr<3>
    llvm.return
  }
}

// -----

// Sized shared globals (static buffers) and other address spaces stay.
// CHECK-LABEL: gpu.module @static_buffers
// CHECK: llvm.mlir.global internal @tile() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<64 x f32>
// CHECK: llvm.mlir.global internal @empty_global() {addr_space = 1 : i32} : !llvm.array<0 x i8>
gpu.module @static_buffers {
  llvm.mlir.global internal @tile() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<64 x f32>
  llvm.mlir.global internal @empty_global() {addr_space = 1 : i32} : !llvm.array<0 x i8>
}
