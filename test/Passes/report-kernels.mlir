// RUN: mhc-opt %s -mhc-specialize -mhc-report-kernels | FileCheck %s
// RUN: mhc-opt %s -mhc-report-kernels=to-stderr -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNSPEC

// Distinct specs are listed once with their op count; fallbacks carry their
// reason; the IR itself is unchanged.
// CHECK: mhc kernels:
// CHECK-NEXT: mhc_sinkhorn_fwd_n4_{{[0-9a-f]+}} 2 op(s) codegen sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_90a
// CHECK-NEXT: mhc_sinkhorn_fwd_n4_{{[0-9a-f]+}} 1 op(s) codegen sinkhorn.fwd;n=4;mode=log;iters=5;arch=sm_90a
// CHECK-NEXT: mhc_sinkhorn_fwd_n9_{{[0-9a-f]+}} 1 op(s) reference sinkhorn.fwd;n=9;mode=log;iters=20;arch=sm_90a (n = 9 is outside the specialised range 1..8)
// CHECK-NEXT: summary: 3 distinct kernel(s), 2 for codegen, 1 on the reference path, 0 op(s) unspecialised
// CHECK: func.func @f
// CHECK-COUNT-4: mhc.sinkhorn

// Without mhc-specialize nothing has a spec yet.
// UNSPEC: mhc kernels:
// UNSPEC-NEXT: summary: 0 distinct kernel(s), 0 for codegen, 0 on the reference path, 4 op(s) unspecialised

func.func @f(%l: tensor<?x4x4xf32>, %l9: tensor<?x9x9xf32>) {
  %a = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %b = mhc.sinkhorn log %a {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %c = mhc.sinkhorn log %b {n = 4 : i64, iters = 5 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  %d = mhc.sinkhorn log %l9 {n = 9 : i64} : (tensor<?x9x9xf32>) -> tensor<?x9x9xf32>
  return
}
