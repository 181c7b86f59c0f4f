// RUN: mhc-opt %s -split-input-file -verify-diagnostics -mhc-specialize

// Layers must be expanded before kernels are specialised.
func.func @layer(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) -> tensor<?x4x64xbf16> {
  // expected-error @+1 {{mhc-specialize needs mhc.layer expanded first (run mhc-expand-layers)}}
  %x1 = mhc.layer nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> tensor<?x4x64xbf16> {
  ^bb0(%y: tensor<?x64xbf16>):
    mhc.yield %y : tensor<?x64xbf16>
  }
  return %x1 : tensor<?x4x64xbf16>
}
