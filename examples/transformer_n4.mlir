// A model graph: two transformer blocks (attention, then MLP) whose residual
// streams are mixed by mHC, n = 4 streams of C = 2048 channels, bf16
// activations, DeepSeek's recipe (RMSNorm weight, TF32 projection,
// softmax_eps Sinkhorn with 20 iterations). The attention and MLP bodies are
// opaque to mhc: external functions called from each layer's region.
//
// Lower it with the README's main command, or by hand:
//   mhc-opt examples/transformer_n4.mlir --mhc-expand-layers --canonicalize \
//       --cse --mhc-fuse-pre --mhc-fuse-layers --mhc-specialize=arch=sm_90a \
//       --mhc-report-kernels
// The four layers become the first layer's pre step (mhc.pre), three layer
// seams (mhc.post_pre: a layer's post step and the next layer's pre step)
// and the last layer's post step (mhc.expand_combine).

func.func private @attention(%y: tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
func.func private @mlp(%y: tensor<?x2048xbf16>) -> tensor<?x2048xbf16>

func.func @forward(%x0: tensor<?x4x2048xbf16>,
                    %phi0: tensor<24x8192xf32>,
                    %alpha0: tensor<3xf32>,
                    %beta0: tensor<24xf32>,
                    %norm0: tensor<8192xf32>,
                    %phi1: tensor<24x8192xf32>,
                    %alpha1: tensor<3xf32>,
                    %beta1: tensor<24xf32>,
                    %norm1: tensor<8192xf32>,
                    %phi2: tensor<24x8192xf32>,
                    %alpha2: tensor<3xf32>,
                    %beta2: tensor<24xf32>,
                    %norm2: tensor<8192xf32>,
                    %phi3: tensor<24x8192xf32>,
                    %alpha3: tensor<3xf32>,
                    %beta3: tensor<24xf32>,
                    %norm3: tensor<8192xf32>) -> tensor<?x4x2048xbf16> {
  // Block 0, attention.
  %x1 = mhc.layer nc %x0, %phi0, %alpha0, %beta0 weight %norm0 sinkhorn softmax_eps {n = 4 : i64, tf32}
      : (tensor<?x4x2048xbf16>, tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>, tensor<8192xf32>) -> tensor<?x4x2048xbf16> {
  ^bb0(%y: tensor<?x2048xbf16>):
    %f = func.call @attention(%y) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
    mhc.yield %f : tensor<?x2048xbf16>
  }
  // Block 0, mlp.
  %x2 = mhc.layer nc %x1, %phi1, %alpha1, %beta1 weight %norm1 sinkhorn softmax_eps {n = 4 : i64, tf32}
      : (tensor<?x4x2048xbf16>, tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>, tensor<8192xf32>) -> tensor<?x4x2048xbf16> {
  ^bb0(%y: tensor<?x2048xbf16>):
    %f = func.call @mlp(%y) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
    mhc.yield %f : tensor<?x2048xbf16>
  }
  // Block 1, attention.
  %x3 = mhc.layer nc %x2, %phi2, %alpha2, %beta2 weight %norm2 sinkhorn softmax_eps {n = 4 : i64, tf32}
      : (tensor<?x4x2048xbf16>, tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>, tensor<8192xf32>) -> tensor<?x4x2048xbf16> {
  ^bb0(%y: tensor<?x2048xbf16>):
    %f = func.call @attention(%y) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
    mhc.yield %f : tensor<?x2048xbf16>
  }
  // Block 1, mlp.
  %x4 = mhc.layer nc %x3, %phi3, %alpha3, %beta3 weight %norm3 sinkhorn softmax_eps {n = 4 : i64, tf32}
      : (tensor<?x4x2048xbf16>, tensor<24x8192xf32>, tensor<3xf32>, tensor<24xf32>, tensor<8192xf32>) -> tensor<?x4x2048xbf16> {
  ^bb0(%y: tensor<?x2048xbf16>):
    %f = func.call @mlp(%y) : (tensor<?x2048xbf16>) -> tensor<?x2048xbf16>
    mhc.yield %f : tensor<?x2048xbf16>
  }
  return %x4 : tensor<?x4x2048xbf16>
}
