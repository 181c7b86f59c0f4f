//===- Checks.h - argument checks of torch.ops.mhc.* ------------*- C++ -*-===//
//
// Errors name the op, the argument and what was expected. Tensor arguments
// are checked against their op's rules in mhc/Support/OpContract.h; the
// scalar attributes against the dialect's ranges.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_TORCH_CHECKS_H
#define MHC_TORCH_CHECKS_H

#include "OpHandles.h"
#include "mhc/Support/OpContract.h"

#include <ATen/ATen.h>

#include <array>
#include <initializer_list>
#include <optional>
#include <string>

namespace mhc::ops {

/// Numbers for error messages, formatted without std::ostream: on the GPU
/// machine's torch build an integer inserted into an ostream from this
/// extension crashed the process where the error should have been raised.
std::string num(int64_t v);
std::string num(double v);

/// Checks one op call's tensors, learning M and C from the first that fixes
/// them; n is checked against 1..kMaxStreams on construction.
class Checker {
public:
  Checker(const char *op, int64_t n);

  /// Checks `tensors` against this op's rules (OpContract.h) from rule
  /// `first` on, one rule each; nullptr: an absent optional argument.
  void args(std::initializer_list<const Tensor *> tensors, Str layout = "nc",
            size_t first = 0);

  const char *op; // "<op>", as in "mhc.<op>: ..."
  int64_t n;
  int64_t M = -1, C = -1;

private:
  void check(const ArgRule &rule, const Tensor &t, Str layout);
  void tensor(const Tensor &t, const ArgRule &rule, const int64_t *dims,
              size_t rank, Str layout);
  void streams(const Tensor &x, const ArgRule &rule, Str layout);
  const Tensor *named(std::string_view name) const;

  const std::vector<ArgRule> &rules;
  const Tensor *first = nullptr;
  std::string_view firstName;
  // The tensors checked so far, by rule index (for sameTypeAs); no op has
  // more tensor arguments (post_pre_backward has 18).
  std::array<const Tensor *, 18> seen{};
};

void checkLayout(const char *op, Str layout);
/// scale's attributes (norm_eps, pre_eps >= 0; post_mult > 0; finite).
void checkScale(const char *op, double normEps, double preEps, double postMult);
/// sinkhorn's mode, iters >= 1 and eps (finite, >= 0).
void checkSinkhorn(const char *op, Str mode, int64_t iters, double eps);

/// One out= tensor of an inference op: a contiguous tensor of `sizes` and
/// `dtype` on `like`'s device, sharing no memory with `inputs` (nullptr:
/// absent) or with the outputs checked before it (`earlier`). Errors name
/// the op, the argument and what was expected.
struct NamedTensor {
  const char *name;
  const Tensor *tensor;
};
void checkOut(const char *op, NamedTensor out, at::IntArrayRef sizes,
              at::ScalarType dtype, const Tensor &like,
              std::initializer_list<NamedTensor> inputs,
              std::initializer_list<NamedTensor> earlier = {});

/// TE's f32 x-gradient buffer `buf` (fused_grad_x_acc_buffer): a contiguous
/// f32 tensor of x's shape on x's device, apart from `inputs`.
void checkBuffer(const char *op, NamedTensor buf, const Tensor &x,
                 std::initializer_list<NamedTensor> inputs);

/// The rule of argument `name` of torch op `op` (mhc::argRule; it must exist).
const ArgRule &ruleOf(const char *op, std::string_view name);

/// n as `t`'s shape gives it by `rule`: a streams tensor's n by the layout,
/// else the last dim the rule calls n, else N's (numLogits); 0 when the shape
/// gives none (a wrong rank or layout, which the op then rejects, naming the
/// argument). mhc._C's eager entry points read n here, once per call.
int64_t streamsOf(const ArgRule &rule, const Tensor &t, Str layout = "nc");

} // namespace mhc::ops

#endif // MHC_TORCH_CHECKS_H
