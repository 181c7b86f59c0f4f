// RUN: mhc-opt %s -mhc-specialize=arch=sm_80 -mhc-generate-kernels | FileCheck %s
// RUN: mhc-opt %s -mhc-specialize -mhc-generate-kernels -mhc-lower-to-nvvm | FileCheck %s --check-prefix=NVVM
// RUN: rm -rf %t && mhc-opt %s -mhc-specialize -mhc-generate-kernels -mhc-write-bundle=dir=%t -o /dev/null && FileCheck %s --check-prefix=INDEX < %t/index.json && ls %t | FileCheck %s --check-prefix=FILES

// One gpu.module per distinct spec, referenced by every op that uses it;
// an op on the reference path gets none.
// CHECK: module attributes {gpu.container_module}
// CHECK: mhc.aggregate nc {{.*}}mhc.kernel = @[[AGG:mhc_aggregate_fwd_n4_[0-9a-f]+]]
// CHECK: mhc.aggregate nc {{.*}}mhc.kernel = @[[AGG]]
// CHECK: mhc.aggregate nc
// CHECK-SAME: mhc.fallback = "n = 9 is outside the specialised range 1..8"
// CHECK-NOT: mhc.kernel
// CHECK: gpu.module @[[AGG]] [#nvvm.target<O = 3, chip = "sm_80", features = "+ptx70">] attributes {mhc.manifest = "{{.*}}\22spec\22: \22aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_80\22
// CHECK: gpu.func @[[AGG]]_main(
// CHECK-NOT: gpu.module

// NVVM: gpu.module @mhc_aggregate_fwd_n4_{{[0-9a-f]+}}
// NVVM: llvm.func @mhc_aggregate_fwd_n4_{{[0-9a-f]+}}_main({{.*}}) attributes {gpu.kernel, gpu.known_block_size = array<i32: 256, 1, 1>, nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>, nvvm.minctasm = 2 : i32}
// NVVM-NOT: gpu.func

// The index lists each kernel with what built it and its files' checksums
// (FNV-1a 64 and size; docs/USAGE.md).
// INDEX: "format": 1,
// INDEX: {"kernel": "mhc_aggregate_fwd_n4_{{[0-9a-f]+}}", "spec": "aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a", "compiler": "mhc {{.*}}, ptxas {{.*}}", "cubin": "{{[0-9a-f]{16} [1-9][0-9]*}}", "json": "{{[0-9a-f]{16} [1-9][0-9]*}}"}
// FILES: index.json
// FILES-NEXT: mhc_aggregate_fwd_n4_{{[0-9a-f]+}}.cubin
// FILES-NEXT: mhc_aggregate_fwd_n4_{{[0-9a-f]+}}.json
// FILES-NEXT: mhc_aggregate_fwd_n4_{{[0-9a-f]+}}.ptx

func.func @f(%x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>, %x9: tensor<?x9x64xbf16>, %pre9: tensor<?x9xf32>) {
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  %y2 = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  %y9 = mhc.aggregate nc %x9, %pre9 {n = 9 : i64} : (tensor<?x9x64xbf16>, tensor<?x9xf32>) -> tensor<?x64xbf16>
  return
}
