// One case per verifier rule; each diagnostic names the operand (or result,
// or attribute) and what was expected.
// RUN: mhc-opt %s -split-input-file -verify-diagnostics

//===--- mhc.project -------------------------------------------------------===//

func.func @x_rank(%x: tensor<?x256xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{operand 'x' must have shape [M, n, C] = [M, 4, C] (n = 4), got 'tensor<?x256xbf16>'}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x256xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @x_streams_nc(%x: tensor<?x3x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{operand 'x' must have shape [M, n, C] = [M, 4, C] (n = 4), got 'tensor<?x3x64xbf16>': dimension 1 must be n = 4}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x3x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @x_streams_cn(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{operand 'x' must have shape [M, C, n] = [M, C, 4] (n = 4), got 'tensor<?x4x64xbf16>': dimension 2 must be n = 4}}
  %h, %ms = mhc.project cn %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @x_dtype(%x: tensor<?x4x64xi32>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{operand 'x' must have element type bf16, f16 or f32 (activation), got 'tensor<?x4x64xi32>'}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xi32>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @phi_rows(%x: tensor<?x4x64xbf16>, %phi: tensor<20x256xf32>) {
  // expected-error @+1 {{operand 'phi' must have shape [N, K] = [24, 256] (n = 4), got 'tensor<20x256xf32>': dimension 0 must be N = 24}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<20x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @phi_cols(%x: tensor<?x4x64xbf16>, %phi: tensor<24x128xf32>) {
  // expected-error @+1 {{operand 'phi' must have shape [N, K] = [24, 256] (n = 4), got 'tensor<24x128xf32>': dimension 1 must be K = n*C = 256 (C = 64 from 'x')}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x128xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @phi_cols_not_multiple_of_n(%x: tensor<?x4x?xbf16>, %phi: tensor<24x130xf32>) {
  // expected-error @+1 {{operand 'phi' must have shape [N, K] = [24, K] (n = 4), got 'tensor<24x130xf32>': dimension 1 must be K = n*C, a multiple of n = 4}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x?xbf16>, tensor<24x130xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @phi_dtype(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf16>) {
  // expected-error @+1 {{operand 'phi' must have element type f32 or bf16 (parameter), got 'tensor<24x256xf16>'}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf16>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @weight_shape(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{operand 'weight' must have shape [K] = [256] (n = 4), got 'tensor<64xf32>': dimension 0 must be K = n*C = 256 (C = 64 from 'x')}}
  %h, %ms = mhc.project nc %x, %phi weight %w {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<64xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @h_shape(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{result 'h' must have shape [M, N] = [M, 24] (n = 4), got 'tensor<?x25xf32>': dimension 1 must be N = 24}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x25xf32>, tensor<?xf32>)
  return
}

// -----

func.func @h_dtype(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{result 'h' must have element type f32 (mixing tensor), got 'tensor<?x24xbf16>'}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xbf16>, tensor<?xf32>)
  return
}

// -----

func.func @ms_rank(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{result 'ms' must have shape [M] (n = 4), got 'tensor<?x1xf32>'}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?x1xf32>)
  return
}

// -----

func.func @token_mismatch(%x: tensor<8x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{result 'h' must have shape [M, N] = [8, 24] (n = 4), got 'tensor<16x24xf32>': its token count 16 differs from M = 8 of 'x'}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<8x4x64xbf16>, tensor<24x256xf32>) -> (tensor<16x24xf32>, tensor<16xf32>)
  return
}

// -----

func.func @n_zero(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{attribute 'n' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %h, %ms = mhc.project nc %x, %phi {n = 0 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @n_huge(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{attribute 'n' must be at most 1024, got 5000}}
  %h, %ms = mhc.project nc %x, %phi {n = 5000 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

// C above the hard limit: n*C would wrap to 0 and match this phi.
func.func @channels_huge(%x: tensor<?x4x4611686018427387904xbf16>, %phi: tensor<24x0xf32>) {
  // expected-error @+1 {{operand 'x' must have shape [M, n, C] = [M, 4, C] (n = 4), got 'tensor<?x4x4611686018427387904xbf16>': its channel count 4611686018427387904 exceeds the largest supported C = 1048576}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x4611686018427387904xbf16>, tensor<24x0xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

// The same limit where only K = n*C is static.
func.func @k_huge(%x: tensor<?x4x?xbf16>, %phi: tensor<24x9223372036854775804xf32>) {
  // expected-error @+1 {{operand 'phi' must have shape [N, K] = [24, K] (n = 4), got 'tensor<24x9223372036854775804xf32>': dimension 1 is K = n*C with C = 2305843009213693951, above the largest supported C = 1048576}}
  %h, %ms = mhc.project nc %x, %phi {n = 4 : i64} : (tensor<?x4x?xbf16>, tensor<24x9223372036854775804xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @missing_n(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{requires attribute 'n'}}
  %h, %ms = mhc.project nc %x, %phi : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

// -----

func.func @bad_layout(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{expected layout 'nc' or 'cn', got 'nhc'}}
  %h, %ms = mhc.project nhc %x, %phi {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x24xf32>, tensor<?xf32>)
  return
}

//===--- mhc.scale ---------------------------------------------------------===//

// -----

func.func @scale_h(%h: tensor<?x20xf32>, %ms: tensor<?xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{operand 'h' must have shape [M, N] = [M, 24] (n = 4), got 'tensor<?x20xf32>': dimension 1 must be N = 24}}
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x20xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  return
}

// -----

func.func @scale_ms_tokens(%h: tensor<8x24xf32>, %ms: tensor<9xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{operand 'ms' must have shape [M] = [8] (n = 4), got 'tensor<9xf32>': its token count 9 differs from M = 8 of 'h'}}
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<8x24xf32>, tensor<9xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4x4xf32>)
  return
}

// -----

func.func @scale_alpha(%h: tensor<?x24xf32>, %ms: tensor<?xf32>, %a: tensor<4xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{operand 'alpha' must have shape [3] (n = 4), got 'tensor<4xf32>': dimension 0 must be 3}}
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<4xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  return
}

// -----

func.func @scale_beta(%h: tensor<?x24xf32>, %ms: tensor<?xf32>, %a: tensor<3xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{operand 'beta' must have shape [N] = [24] (n = 4), got 'tensor<16xf32>': dimension 0 must be N = 24}}
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<16xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  return
}

// -----

func.func @scale_mixing_dtype(%h: tensor<?x24xbf16>, %ms: tensor<?xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{operand 'h' must have element type f32 (mixing tensor), got 'tensor<?x24xbf16>'}}
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xbf16>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  return
}

// -----

func.func @scale_norm_eps(%h: tensor<?x24xf32>, %ms: tensor<?xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'norm_eps' must be finite and >= 0, got -1.000000e-06}}
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64, norm_eps = -1.0e-6 : f32} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  return
}

// -----

func.func @scale_pre_eps(%h: tensor<?x24xf32>, %ms: tensor<?xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'pre_eps' must be finite and >= 0, got INF}}
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64, pre_eps = 0x7F800000 : f32} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  return
}

// -----

func.func @scale_post_mult(%h: tensor<?x24xf32>, %ms: tensor<?xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'post_mult' must be finite and > 0, got 0.000000e+00}}
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64, post_mult = 0.0 : f32} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>)
  return
}

// -----

func.func @scale_logits_result(%h: tensor<?x24xf32>, %ms: tensor<?xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{result 'logits' must have shape [M, n, n] = [M, 4, 4] (n = 4), got 'tensor<?x16xf32>'}}
  %pre, %post, %l = mhc.scale %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x16xf32>)
  return
}

//===--- mhc.sinkhorn ------------------------------------------------------===//

// -----

func.func @sinkhorn_iters(%l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{attribute 'iters' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %p = mhc.sinkhorn log %l {n = 4 : i64, iters = 0 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

func.func @sinkhorn_iters_huge(%l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{attribute 'iters' must be at most 65536, got 576460752303423488}}
  %p = mhc.sinkhorn log %l {n = 4 : i64, iters = 576460752303423488 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

func.func @sinkhorn_eps_in_log_mode(%l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{attribute 'eps' is only meaningful in softmax_eps mode; log mode has no eps}}
  %p = mhc.sinkhorn log %l {n = 4 : i64, eps = 1.0e-6 : f32} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

func.func @sinkhorn_eps_negative(%l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{attribute 'eps' must be finite and >= 0, got -1.000000e+00}}
  %p = mhc.sinkhorn softmax_eps %l {n = 4 : i64, eps = -1.0 : f32} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

func.func @sinkhorn_not_square(%l: tensor<?x4x3xf32>) {
  // expected-error @+1 {{operand 'logits' must have shape [M, n, n] = [M, 4, 4] (n = 4), got 'tensor<?x4x3xf32>': dimension 2 must be n = 4}}
  %p = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x3xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

func.func @sinkhorn_result(%l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{result 'P' must have element type f32 (mixing tensor), got 'tensor<?x4x4xf16>'}}
  %p = mhc.sinkhorn log %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf16>
  return
}

// -----

func.func @sinkhorn_mode(%l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{expected sinkhorn mode 'log' or 'softmax_eps', got 'exact'}}
  %p = mhc.sinkhorn exact %l {n = 4 : i64} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

//===--- mhc.aggregate -----------------------------------------------------===//

// -----

func.func @aggregate_pre(%x: tensor<?x4x64xbf16>, %pre: tensor<?x3xf32>) {
  // expected-error @+1 {{operand 'pre' must have shape [M, n] = [M, 4] (n = 4), got 'tensor<?x3xf32>': dimension 1 must be n = 4}}
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x3xf32>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @aggregate_y_channels(%x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>) {
  // expected-error @+1 {{result 'y' must have shape [M, C] = [M, 64] (n = 4), got 'tensor<?x32xbf16>': its channel count 32 differs from C = 64 of 'x'}}
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x32xbf16>
  return
}

// -----

func.func @aggregate_y_dtype(%x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>) {
  // expected-error @+1 {{result 'y' must have the element type of 'x' ('bf16'), got 'f32'}}
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xf32>
  return
}

//===--- mhc.expand_combine ------------------------------------------------===//

// -----

func.func @combine_f_dtype(%f: tensor<?x64xf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>) {
  // expected-error @+1 {{operand 'f' must have the element type of 'x' ('bf16'), got 'f16'}}
  %o = mhc.expand_combine nc %f, %post, %x, %p {n = 4 : i64} : (tensor<?x64xf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> tensor<?x4x64xbf16>
  return
}

// -----

func.func @combine_f_channels(%f: tensor<?x65xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>) {
  // expected-error @+1 {{operand 'f' must have shape [M, C] = [M, 64] (n = 4), got 'tensor<?x65xbf16>': its channel count 65 differs from C = 64 of 'x'}}
  %o = mhc.expand_combine nc %f, %post, %x, %p {n = 4 : i64} : (tensor<?x65xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> tensor<?x4x64xbf16>
  return
}

// -----

func.func @combine_P(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x16xf32>) {
  // expected-error @+1 {{operand 'P' must have shape [M, n, n] = [M, 4, 4] (n = 4), got 'tensor<?x16xf32>'}}
  %o = mhc.expand_combine nc %f, %post, %x, %p {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x16xf32>) -> tensor<?x4x64xbf16>
  return
}

// -----

func.func @combine_bias(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>, %b: tensor<256xf32>) {
  // expected-error @+1 {{operand 'bias' must have shape [C] = [64] (n = 4), got 'tensor<256xf32>': its channel count 256 differs from C = 64 of 'x'}}
  %o = mhc.expand_combine nc %f, %post, %x, %p bias %b {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<256xf32>) -> tensor<?x4x64xbf16>
  return
}

// -----

func.func @combine_out_layout(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>) {
  // expected-error @+1 {{result 'out' must have shape [M, n, C] = [M, 4, 64] (n = 4), got 'tensor<?x64x4xbf16>': dimension 1 must be n = 4}}
  %o = mhc.expand_combine nc %f, %post, %x, %p {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> tensor<?x64x4xbf16>
  return
}

//===--- mhc.pre -----------------------------------------------------------===//

// -----

func.func @pre_x_rank(%x: tensor<?x256xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{operand 'x' must have shape [M, n, C] = [M, 4, C] (n = 4), got 'tensor<?x256xbf16>'}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x256xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

// One parameter dtype per kernel: alpha, beta and weight follow phi.
func.func @pre_beta_dtype(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xbf16>) {
  // expected-error @+1 {{operand 'beta' must have the element type of 'phi' ('f32'), got 'bf16'}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xbf16>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @pre_alpha_dtype(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xbf16>, %a: tensor<3xf32>, %b: tensor<24xbf16>) {
  // expected-error @+1 {{operand 'alpha' must have the element type of 'phi' ('bf16'), got 'f32'}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xbf16>, tensor<3xf32>, tensor<24xbf16>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @pre_weight_dtype(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>, %w: tensor<256xbf16>) {
  // expected-error @+1 {{operand 'weight' must have the element type of 'phi' ('f32'), got 'bf16'}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b weight %w sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xbf16>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @pre_phi_cols(%x: tensor<?x4x64xbf16>, %phi: tensor<24x128xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{operand 'phi' must have shape [N, K] = [24, 256] (n = 4), got 'tensor<24x128xf32>': dimension 1 must be K = n*C = 256 (C = 64 from 'x')}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x128xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @pre_norm_eps(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'norm_eps' must be finite and >= 0, got -1.000000e-06}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64, norm_eps = -1.0e-6 : f32} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @pre_eps_in_log_mode(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'eps' is only meaningful in softmax_eps mode; log mode has no eps}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64, eps = 1.0e-6 : f32} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @pre_P_result(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{result 'P' must have shape [M, n, n] = [M, 4, 4] (n = 4), got 'tensor<?x16xf32>'}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x16xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @pre_y_dtype(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{result 'y' must have the element type of 'x' ('bf16'), got 'f32'}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xf32>)
  return
}

// -----

func.func @pre_token_mismatch(%x: tensor<8x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{result 'logits' must have shape [M, n, n] = [8, 4, 4] (n = 4), got 'tensor<16x4x4xf32>': its token count 16 differs from M = 8 of 'x'}}
  %0:7 = mhc.pre nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<8x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<8x24xf32>, tensor<8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<16x4x4xf32>, tensor<8x4x4xf32>, tensor<8x64xbf16>)
  return
}

//===--- gradient ops ------------------------------------------------------===//

// -----

func.func @project_grad_gweight_without_weight(%gh: tensor<?x24xf32>, %gms: tensor<?xf32>, %x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{must have a 'gweight' result exactly when it has a 'weight' operand}}
  %gx, %gphi, %gw = mhc.project_grad nc %gh, %gms, %x, %phi {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<256xf32>)
  return
}

// -----

func.func @project_grad_weight_without_gweight(%gh: tensor<?x24xf32>, %gms: tensor<?xf32>, %x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %w: tensor<256xf32>) {
  // expected-error @+1 {{must have a 'gweight' result exactly when it has a 'weight' operand}}
  %gx, %gphi = mhc.project_grad nc %gh, %gms, %x, %phi weight %w {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<256xf32>) -> (tensor<?x4x64xbf16>, tensor<24x256xf32>)
  return
}

// -----

func.func @project_grad_gphi_dtype(%gh: tensor<?x24xf32>, %gms: tensor<?xf32>, %x: tensor<?x4x64xbf16>, %phi: tensor<24x256xbf16>) {
  // expected-error @+1 {{result 'gphi' must have the element type of 'phi' ('bf16'), got 'f32'}}
  %gx, %gphi = mhc.project_grad nc %gh, %gms, %x, %phi {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xbf16>) -> (tensor<?x4x64xbf16>, tensor<24x256xf32>)
  return
}

// -----

func.func @project_grad_gx(%gh: tensor<?x24xf32>, %gms: tensor<?xf32>, %x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>) {
  // expected-error @+1 {{result 'gx' must have the element type of 'x' ('bf16'), got 'f32'}}
  %gx, %gphi = mhc.project_grad nc %gh, %gms, %x, %phi {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>) -> (tensor<?x4x64xf32>, tensor<24x256xf32>)
  return
}

// -----

func.func @scale_grad_galpha(%gpre: tensor<?x4xf32>, %gpost: tensor<?x4xf32>, %gl: tensor<?x4x4xf32>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %a: tensor<3xbf16>, %b: tensor<24xf32>) {
  // expected-error @+1 {{result 'galpha' must have the element type of 'alpha' ('bf16'), got 'f32'}}
  %gh, %gms, %ga, %gb = mhc.scale_grad %gpre, %gpost, %gl, %h, %ms, %a, %b {n = 4 : i64} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xbf16>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @scale_grad_attrs(%gpre: tensor<?x4xf32>, %gpost: tensor<?x4xf32>, %gl: tensor<?x4x4xf32>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'post_mult' must be finite and > 0, got -2.000000e+00}}
  %gh, %gms, %ga, %gb = mhc.scale_grad %gpre, %gpost, %gl, %h, %ms, %a, %b {n = 4 : i64, post_mult = -2.0 : f32} : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>) -> (tensor<?x24xf32>, tensor<?xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @sinkhorn_grad_eps(%gp: tensor<?x4x4xf32>, %l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{attribute 'eps' is only meaningful in softmax_eps mode; log mode has no eps}}
  %gl = mhc.sinkhorn_grad log %gp, %l {n = 4 : i64, eps = 0.0 : f32} : (tensor<?x4x4xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

func.func @sinkhorn_grad_iters_huge(%gp: tensor<?x8x8xf32>, %l: tensor<?x8x8xf32>) {
  // expected-error @+1 {{attribute 'iters' must be at most 65536, got 576460752303423488}}
  %gl = mhc.sinkhorn_grad log %gp, %l {n = 8 : i64, iters = 576460752303423488 : i64} : (tensor<?x8x8xf32>, tensor<?x8x8xf32>) -> tensor<?x8x8xf32>
  return
}

// -----

func.func @sinkhorn_grad_gP(%gp: tensor<?x3x3xf32>, %l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{operand 'gP' must have shape [M, n, n] = [M, 4, 4] (n = 4), got 'tensor<?x3x3xf32>': dimension 1 must be n = 4}}
  %gl = mhc.sinkhorn_grad log %gp, %l {n = 4 : i64} : (tensor<?x3x3xf32>, tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

func.func @aggregate_grad_gy(%gy: tensor<?x64xf32>, %x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>) {
  // expected-error @+1 {{operand 'gy' must have the element type of 'x' ('bf16'), got 'f32'}}
  %gx, %gpre = mhc.aggregate_grad nc %gy, %x, %pre {n = 4 : i64} : (tensor<?x64xf32>, tensor<?x4x64xbf16>, tensor<?x4xf32>) -> (tensor<?x4x64xbf16>, tensor<?x4xf32>)
  return
}

// -----

func.func @combine_grad_gbias_without_bias(%g: tensor<?x4x64xbf16>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>) {
  // expected-error @+1 {{must have a 'gbias' result exactly when it has a 'bias' operand}}
  %gf, %gpost, %gx, %gp, %gb = mhc.expand_combine_grad nc %g, %f, %post, %x, %p {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<64xf32>)
  return
}

// -----

func.func @combine_grad_gout(%g: tensor<?x4x32xbf16>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>) {
  // expected-error @+1 {{operand 'gout' must have shape [M, n, C] = [M, 4, 64] (n = 4), got 'tensor<?x4x32xbf16>': its channel count 32 differs from C = 64 of 'x'}}
  %gf, %gpost, %gx, %gp = mhc.expand_combine_grad nc %g, %f, %post, %x, %p {n = 4 : i64} : (tensor<?x4x32xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>) -> (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>)
  return
}

//===--- the layer seam: mhc.post_pre, mhc.post_pre_grad -------------------===//

// -----

func.func @post_pre_f_dtype(%f: tensor<?x64xf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'f' must have the element type of 'x' ('bf16'), got 'f16'}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64xf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @post_pre_P(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x16xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'P' must have shape [M, n, n] = [M, 4, 4] (n = 4), got 'tensor<?x16xf32>'}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x16xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

// One parameter dtype per kernel: layer l's bias follows layer l+1's phi.
func.func @post_pre_bias_dtype(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %bias: tensor<64xbf16>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'bias' must have the element type of 'phi' ('f32'), got 'bf16'}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P bias %bias next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @post_pre_beta_dtype(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xbf16>) {
  // expected-error @+1 {{operand 'beta' must have the element type of 'phi' ('f32'), got 'bf16'}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xbf16>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @post_pre_weight_shape(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>, %weight: tensor<64xf32>) {
  // expected-error @+1 {{operand 'weight' must have shape [K] = [256] (n = 4), got 'tensor<64xf32>': dimension 0 must be K = n*C = 256 (C = 64 from 'x')}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta weight %weight sinkhorn log {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<64xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @post_pre_phi_cols(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x128xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'phi' must have shape [N, K] = [24, 256] (n = 4), got 'tensor<24x128xf32>': dimension 1 must be K = n*C = 256 (C = 64 from 'x')}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x128xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @post_pre_tokens(%f: tensor<16x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<8x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'f' must have shape [M, C] = [8, 64] (n = 4), got 'tensor<16x64xbf16>': its token count 16 differs from M = 8 of 'x'}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<16x64xbf16>, tensor<?x4xf32>, tensor<8x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @post_pre_x_next(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{result 'x_next' must have the element type of 'x' ('bf16'), got 'f32'}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xf32>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @post_pre_P_next(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{result 'P_next' must have shape [M, n, n] = [M, 4, 4] (n = 4), got 'tensor<?x4x3xf32>': dimension 2 must be n = 4}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x3xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @post_pre_y(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{result 'y' must have shape [M, C] = [M, 64] (n = 4), got 'tensor<?x32xbf16>': its channel count 32 differs from C = 64 of 'x'}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x32xbf16>)
  return
}

// -----

func.func @post_pre_eps(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'eps' is only meaningful in softmax_eps mode; log mode has no eps}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn log {n = 4 : i64, eps = 0.0 : f32}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

func.func @post_pre_post_mult(%f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'post_mult' must be finite and > 0, got 0.000000e+00}}
  %0:8 = mhc.post_pre nc %f, %post, %x, %P next %phi, %alpha, %beta sinkhorn softmax_eps {n = 4 : i64, post_mult = 0.0 : f32}
      : (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>)
  return
}

// -----

// x_next's incoming gradient has x's shape in the op's layout.
func.func @post_pre_grad_gx_next(%gx_next: tensor<?x64x4xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'gx_next' must have shape [M, n, C] = [M, 4, 64] (n = 4), got 'tensor<?x64x4xbf16>': dimension 1 must be n = 4}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x64x4xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_gx_next_dtype(%gx_next: tensor<?x4x64xf32>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'gx_next' must have the element type of 'x' ('bf16'), got 'f32'}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_gy(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xf32>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'gy' must have the element type of 'x' ('bf16'), got 'f32'}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_gpost_next(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x3xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'gpost_next' must have shape [M, n] = [M, 4] (n = 4), got 'tensor<?x3xf32>': dimension 1 must be n = 4}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x3xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_gP_next(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xbf16>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'gP_next' must have element type f32 (mixing tensor), got 'tensor<?x4x4xbf16>'}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_x_next(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'x_next' must have the element type of 'x' ('bf16'), got 'f16'}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_h(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x20xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'h' must have shape [M, N] = [M, 24] (n = 4), got 'tensor<?x20xf32>': dimension 1 must be N = 24}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x20xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_logits(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x16xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'logits' must have shape [M, n, n] = [M, 4, 4] (n = 4), got 'tensor<?x16xf32>'}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x16xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_alpha_dtype(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xbf16>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{operand 'alpha' must have the element type of 'phi' ('f32'), got 'bf16'}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xbf16>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_gf(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{result 'gf' must have the element type of 'x' ('bf16'), got 'f32'}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_gbias(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %bias: tensor<64xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{result 'gbias' must have shape [C] = [64] (n = 4), got 'tensor<32xf32>': its channel count 32 differs from C = 64 of 'x'}}
  %0:8 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P bias %bias next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<64xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<32xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_gweight(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>, %weight: tensor<256xf32>) {
  // expected-error @+1 {{result 'gweight' must have the element type of 'weight' ('f32'), got 'bf16'}}
  %0:8 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta weight %weight sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>, tensor<256xbf16>)
  return
}

// -----

func.func @post_pre_grad_galpha(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{result 'galpha' must have shape [3] (n = 4), got 'tensor<4xf32>': dimension 0 must be 3}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<4xf32>, tensor<24xf32>)
  return
}

// -----

func.func @post_pre_grad_iters(%gx_next: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost_next: tensor<?x4xf32>, %gP_next: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %P: tensor<?x4x4xf32>, %x_next: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %logits: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'iters' must be at most 65536, got 100000}}
  %0:7 = mhc.post_pre_grad nc %gx_next, %gy, %gpost_next, %gP_next, %f, %post, %x, %P next %x_next, %h, %ms, %pre, %logits, %phi, %alpha, %beta sinkhorn log {n = 4 : i64, iters = 100000 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

// The custom form derives gbias and gweight from bias and weight, so a
// result list of the wrong length is a parse error ...
func.func @post_pre_grad_result_count(%gx1: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost1: tensor<?x4xf32>, %gp1: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>, %bias: tensor<64xf32>, %x1: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %l: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  %0:7 = mhc.post_pre_grad nc %gx1, %gy, %gpost1, %gp1, %f, %post, %x, %p bias %bias
      next %x1, %h, %ms, %pre, %l, %phi, %alpha, %beta sinkhorn log {n = 4 : i64}
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>, tensor<64xf32>,
         tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      // expected-error @+1 {{expected 8 result types (gx, gf, gpost, gP, gbias, gphi, galpha, gbeta), got 7}}
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

// -----

// ... and the generic form can write a gbias without a bias: the verifier
// rejects it.
func.func @post_pre_grad_gbias_without_bias(%gx1: tensor<?x4x64xbf16>, %gy: tensor<?x64xbf16>, %gpost1: tensor<?x4xf32>, %gp1: tensor<?x4x4xf32>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x4x64xbf16>, %p: tensor<?x4x4xf32>, %x1: tensor<?x4x64xbf16>, %h: tensor<?x24xf32>, %ms: tensor<?xf32>, %pre: tensor<?x4xf32>, %l: tensor<?x4x4xf32>, %phi: tensor<24x256xf32>, %alpha: tensor<3xf32>, %beta: tensor<24xf32>) {
  // expected-error @+1 {{must have a 'gbias' result exactly when it has a 'bias' operand}}
  %0:8 = "mhc.post_pre_grad"(%gx1, %gy, %gpost1, %gp1, %f, %post, %x, %p, %x1, %h, %ms, %pre, %l, %phi, %alpha, %beta)
      <{layout = #mhc<layout nc>, mode = #mhc<sinkhorn_mode log>, n = 4 : i64,
        operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0>,
        resultSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1, 0>}>
      : (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x64xbf16>, tensor<?x4x4xf32>,
         tensor<?x4x64xbf16>, tensor<?x24xf32>, tensor<?xf32>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
      -> (tensor<?x4x64xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x4x4xf32>, tensor<64xf32>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>)
  return
}

//===--- acc: x's gradient from other users, summed in ---------------------===//

// -----

func.func @aggregate_grad_acc_shape(%gy: tensor<?x64xbf16>, %x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>, %acc: tensor<?x4x32xbf16>) {
  // expected-error @+1 {{operand 'acc' must have shape [M, n, C] = [M, 4, 64] (n = 4), got 'tensor<?x4x32xbf16>': its channel count 32 differs from C = 64 of 'x'}}
  %gx, %gpre = mhc.aggregate_grad nc %gy, %x, %pre acc %acc {n = 4 : i64} : (tensor<?x64xbf16>, tensor<?x4x64xbf16>, tensor<?x4xf32>, tensor<?x4x32xbf16>) -> (tensor<?x4x64xbf16>, tensor<?x4xf32>)
  return
}

// -----

func.func @project_grad_acc_dtype(%gh: tensor<?x24xf32>, %gms: tensor<?xf32>, %x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %acc: tensor<?x4x64xf32>) {
  // expected-error @+1 {{operand 'acc' must have the element type of 'x' ('bf16'), got 'f32'}}
  %gx, %gphi = mhc.project_grad nc %gh, %gms, %x, %phi acc %acc {n = 4 : i64} : (tensor<?x24xf32>, tensor<?xf32>, tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<?x4x64xf32>) -> (tensor<?x4x64xbf16>, tensor<24x256xf32>)
  return
}

// -----

func.func @combine_grad_acc_layout(%g: tensor<?x64x4xbf16>, %f: tensor<?x64xbf16>, %post: tensor<?x4xf32>, %x: tensor<?x64x4xbf16>, %p: tensor<?x4x4xf32>, %acc: tensor<?x4x64xbf16>) {
  // expected-error @+1 {{operand 'acc' must have shape [M, C, n] = [M, 64, 4] (n = 4), got 'tensor<?x4x64xbf16>': its channel count 4 differs from C = 64 of 'x'}}
  %gf, %gpost, %gx, %gp = mhc.expand_combine_grad cn %g, %f, %post, %x, %p acc %acc {n = 4 : i64} : (tensor<?x64x4xbf16>, tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x64x4xbf16>, tensor<?x4x4xf32>, tensor<?x4x64xbf16>) -> (tensor<?x64xbf16>, tensor<?x4xf32>, tensor<?x64x4xbf16>, tensor<?x4x4xf32>)
  return
}

//===--- mhc.layer / mhc.yield ---------------------------------------------===//

// -----

func.func @layer_two_args(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{body must take exactly one argument (the block input y), got 2}}
  %x1 = mhc.layer nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> tensor<?x4x64xbf16> {
  ^bb0(%y: tensor<?x64xbf16>, %z: tensor<?x64xbf16>):
    mhc.yield %y : tensor<?x64xbf16>
  }
  return
}

// -----

func.func @layer_arg_type(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{body argument 'y' must have shape [M, C] = [M, 64] (n = 4), got 'tensor<?x256xbf16>': its channel count 256 differs from C = 64 of 'x'}}
  %x1 = mhc.layer nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> tensor<?x4x64xbf16> {
  ^bb0(%y: tensor<?x256xbf16>):
    mhc.yield %y : tensor<?x256xbf16>
  }
  return
}

// -----

func.func @layer_yield_dtype(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>, %g: tensor<?x64xf32>) {
  // expected-error @+1 {{yielded value 'f' must have the element type of 'x' ('bf16'), got 'f32'}}
  %x1 = mhc.layer nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> tensor<?x4x64xbf16> {
  ^bb0(%y: tensor<?x64xbf16>):
    mhc.yield %g : tensor<?x64xf32>
  }
  return
}

// -----

func.func @layer_result(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{result 'x_next' must have the element type of 'x' ('bf16'), got 'f32'}}
  %x1 = mhc.layer nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> tensor<?x4x64xf32> {
  ^bb0(%y: tensor<?x64xbf16>):
    mhc.yield %y : tensor<?x64xbf16>
  }
  return
}

// -----

func.func @layer_attrs(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  // expected-error @+1 {{attribute 'eps' is only meaningful in softmax_eps mode; log mode has no eps}}
  %x1 = mhc.layer nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64, eps = 1.0e-6 : f32} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> tensor<?x4x64xbf16> {
  ^bb0(%y: tensor<?x64xbf16>):
    mhc.yield %y : tensor<?x64xbf16>
  }
  return
}

// -----

func.func private @block(tensor<?x64xbf16>) -> tensor<?x64xbf16>
func.func @layer_without_yield(%x: tensor<?x4x64xbf16>, %phi: tensor<24x256xf32>, %a: tensor<3xf32>, %b: tensor<24xf32>) {
  %x1 = mhc.layer nc %x, %phi, %a, %b sinkhorn log {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<24x256xf32>, tensor<3xf32>, tensor<24xf32>) -> tensor<?x4x64xbf16> {
  ^bb0(%y: tensor<?x64xbf16>):
    // expected-error @+1 {{block with no terminator}}
    %f = func.call @block(%y) : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
  }
  return
}

// -----

func.func @yield_outside_layer(%y: tensor<?x64xbf16>) {
  // expected-error @+1 {{expects parent op 'mhc.layer'}}
  mhc.yield %y : tensor<?x64xbf16>
}

//===--- #mhc.spec ---------------------------------------------------------===//

// -----

func.func @spec_unknown_op(%l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{invalid kernel spec "softmax.fwd;n=4": unknown op 'softmax'}}
  %p = mhc.sinkhorn log %l {n = 4 : i64, mhc.spec = #mhc.spec<"softmax.fwd;n=4">} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

func.func @spec_not_canonical(%l: tensor<?x4x4xf32>) {
  // expected-error @+1 {{invalid kernel spec "sinkhorn.fwd;iters=20;n=4;mode=log;arch=sm_90a": not in canonical form; expected 'sinkhorn.fwd;n=4;mode=log;iters=20;arch=sm_90a'}}
  %p = mhc.sinkhorn log %l {n = 4 : i64, mhc.spec = #mhc.spec<"sinkhorn.fwd;iters=20;n=4;mode=log;arch=sm_90a">} : (tensor<?x4x4xf32>) -> tensor<?x4x4xf32>
  return
}

// -----

func.func @spec_iters_huge(%gp: tensor<?x8x8xf32>, %l: tensor<?x8x8xf32>) {
  // expected-error @+1 {{invalid kernel spec "sinkhorn.bwd;n=8;mode=log;iters=576460752303423488;arch=sm_90a": iters = 576460752303423488 is outside the valid range 1..65536}}
  %gl = mhc.sinkhorn_grad log %gp, %l {n = 8 : i64, mhc.spec = #mhc.spec<"sinkhorn.bwd;n=8;mode=log;iters=576460752303423488;arch=sm_90a">} : (tensor<?x8x8xf32>, tensor<?x8x8xf32>) -> tensor<?x8x8xf32>
  return
}

// -----

func.func @spec_channels_huge(%x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>) {
  // expected-error @+1 {{invalid kernel spec "aggregate.fwd;n=4;act=bf16;layout=nc;C=2305843009213693953;arch=sm_90a": C = 2305843009213693953 is outside the valid range 0..1048576}}
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64, mhc.spec = #mhc.spec<"aggregate.fwd;n=4;act=bf16;layout=nc;C=2305843009213693953;arch=sm_90a">} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return
}
