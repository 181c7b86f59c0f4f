// RUN: mhc-opt %s -split-input-file -verify-diagnostics -canonicalize -mhc-generate-kernels

// mhc-specialize stamped weight=1, then -canonicalize dropped the all-ones
// weight: codegen rebuilds each op's spec and refuses the stale one instead
// of binding the op to a kernel that reads a weight it no longer has.
func.func @stale_after_canonicalize(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>) {
  %w = arith.constant dense<1.0> : tensor<256xf32>
  // expected-error @+1 {{stale mhc.spec "project.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=1;arch=sm_90a": the op now needs "project.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=0;arch=sm_90a" (run mhc-specialize after rewriting the IR)}}
  %h, %ms = mhc.project nc %x, %phi weight %w {n = 4 : i64, mhc.spec = #mhc.spec<"project.fwd;n=4;act=bf16;param=f32;layout=nc;C=64;tf32=0;weight=1;arch=sm_90a">} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return %h, %ms : tensor<?x24xf32>, tensor<?xf32>
}

// -----

// A spec of another op is never built for this one.
func.func @spec_of_another_op(%x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>) -> tensor<?x64xbf16> {
  // expected-error @+1 {{stale mhc.spec "sinkhorn.bwd;n=8;mode=log;iters=20;arch=sm_90a": the op now needs "aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a"}}
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64, mhc.spec = #mhc.spec<"sinkhorn.bwd;n=8;mode=log;iters=20;arch=sm_90a">} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// The kernel's name is taken by a symbol that is not a kernel module.
// expected-error @+1 {{symbol @mhc_aggregate_fwd_n4_165c3b3248bba433 is not a kernel module but names the kernel of aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a}}
func.func private @mhc_aggregate_fwd_n4_165c3b3248bba433()
func.func @name_taken(%x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>) -> tensor<?x64xbf16> {
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64, mhc.spec = #mhc.spec<"aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a">} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
