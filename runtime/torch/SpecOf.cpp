//===- SpecOf.cpp - the kernel specs a torch op call requests on CUDA -----===//
//
// mhc._C.requested_specs(op, args, arch): the canonical specs that the CUDA
// entry of torch.ops.mhc.<op>, called with `args` on a GPU of `arch`, passes
// to select() (KernelPath.cpp), in order. It builds them with the same
// Specs.cpp builders and takes the same decisions as the CUDA entries
// (PreOps.cpp, SeamOps.cpp: one parameter dtype, mhc::preStepFuses, a fused
// spec codegen cannot build runs the separate ops), so that a CPU run can
// list the kernels the model would use on a GPU (python/mhc/export.py's
// record_specs). test/gpu/test_export_gpu.py checks it against a GPU run.
//
//===----------------------------------------------------------------------===//

#include "SpecOf.h"
#include "Specs.h"

#include "mhc/Support/OpContract.h"

#include <functional>
#include <map>

namespace mhc::ops {

namespace {

namespace py = pybind11;
using mhc::Direction;

/// The call's arguments in the op's schema order.
struct CallArgs {
  py::tuple values;
  Tensor tensor(size_t i) const { return values[i].cast<Tensor>(); }
  /// An optional tensor; absent also past the end (a trailing `Tensor? acc`
  /// of the backward ops that a caller may leave out).
  OptTensor optional(size_t i) const {
    return i >= values.size() || values[i].is_none() ? OptTensor() : OptTensor(tensor(i));
  }
  int64_t integer(size_t i) const { return values[i].cast<int64_t>(); }
  double real(size_t i) const { return values[i].cast<double>(); }
  bool flag(size_t i) const { return values[i].cast<bool>(); }
  std::string text(size_t i) const { return values[i].cast<std::string>(); }
  /// The pre step's attributes at `i` (n, layout, tf32, norm_eps, pre_eps,
  /// post_mult, mode, iters, eps), as pre and post_pre take them; the
  /// strings live in `keep`, which PreAttrs views.
  PreAttrs preAttrs(size_t i, std::string (&keep)[2]) const {
    keep[0] = text(i + 1);
    keep[1] = text(i + 6);
    return {integer(i), keep[0], flag(i + 2), real(i + 3), real(i + 4),
            real(i + 5), keep[1], integer(i + 7), real(i + 8)};
  }
};

int64_t channelsOf(const Tensor &x, Str layout) {
  return layout == "nc" ? x.size(-1) : x.size(-2);
}

/// The specs requested, with the arch select() would stamp.
struct Requests {
  std::string arch;
  std::vector<std::string> specs;

  mhc::KernelSpec stamped(mhc::KernelSpec spec) const {
    spec.arch = arch;
    return spec;
  }
  void add(const mhc::KernelSpec &spec) {
    specs.push_back(stamped(spec).canonical());
  }
  bool generated(const mhc::KernelSpec &spec) const {
    return mhc::unsupportedReason(stamped(spec)).empty();
  }
};

/// PreOps.cpp's preCuda: the fused spec where it applies (phi, beta and
/// weight of one dtype, preStepFuses); the four ops where it does not, or
/// where select() finds no kernel for it.
void preStep(Requests &r, const Tensor &x, const Tensor &phi,
             const Tensor &beta, const OptTensor &weight, const PreAttrs &a) {
  int64_t C = channelsOf(x, a.layout);
  bool oneParamType = phi.scalar_type() == beta.scalar_type() &&
                      (!weight || weight->scalar_type() == phi.scalar_type());
  if (oneParamType && mhc::preStepFuses(a.n, x.size(0))) {
    auto spec = forTokens(preSpec(a.n, x, a.layout, C, phi, weight, a.tf32,
                                  a.normEps, a.preEps, a.postMult, a.mode,
                                  a.iters, a.eps),
                          x.size(0));
    r.add(spec);
    if (r.generated(spec))
      return;
  }
  r.add(projectSpec(Direction::Forward, a.n, x, a.layout, C, phi, weight, a.tf32));
  r.add(scaleSpec(Direction::Forward, a.n, beta, a.normEps, a.preEps, a.postMult));
  r.add(sinkhornSpec(Direction::Forward, a.n, a.mode, a.iters, a.eps));
  r.add(aggregateSpec(Direction::Forward, a.n, x, a.layout, C));
}

/// SeamOps.cpp's seamKernel: the seam's own spec where bias, phi, alpha
/// and weight share a dtype, the pre step fuses and codegen builds it.
bool seamRuns(Requests &r, Direction dir, const PreAttrs &a, const Tensor &x,
              const Tensor &phi, const Tensor &alpha, const OptTensor &weight,
              const OptTensor &bias) {
  at::ScalarType t = phi.scalar_type();
  bool oneParamType = alpha.scalar_type() == t &&
                      (!weight || weight->scalar_type() == t) &&
                      (!bias || bias->scalar_type() == t);
  if (!oneParamType || !mhc::preStepFuses(a.n, x.size(0)))
    return false;
  auto spec = forTokens(
      postPreSpec(dir, a, x, channelsOf(x, a.layout), phi, weight, bias),
      x.size(0));
  if (!r.generated(spec))
    return false;
  r.add(spec);
  return true;
}

/// post_pre / post_pre_saved (f, post, x, P, bias, phi, alpha, beta, weight,
/// attrs): the seam, else expand_combine then the pre step of x_next.
void seamForward(Requests &r, const CallArgs &c) {
  std::string keep[2];
  PreAttrs a = c.preAttrs(9, keep);
  Tensor x = c.tensor(2), phi = c.tensor(5), alpha = c.tensor(6), beta = c.tensor(7);
  OptTensor bias = c.optional(4), weight = c.optional(8);
  if (seamRuns(r, Direction::Forward, a, x, phi, alpha, weight, bias))
    return;
  r.add(combineSpec(Direction::Forward, a.n, x, a.layout, channelsOf(x, a.layout), bias));
  preStep(r, x, phi, beta, weight, a); // x_next has x's shape and dtype
}

/// post_pre_backward (gx_next, gy, gpost_next, gP_next, f, post, x, P, bias,
/// x_next, h, ms, pre, logits, phi, alpha, beta, weight, attrs): the seam's
/// gradient, else the five gradient ops it replaces, in their order, as
/// SeamOps.cpp's seamGradSteps calls them (keep the two in step).
void seamBackward(Requests &r, const CallArgs &c) {
  std::string keep[2];
  PreAttrs a = c.preAttrs(18, keep);
  Tensor x = c.tensor(6), xNext = c.tensor(9), phi = c.tensor(14),
         alpha = c.tensor(15), beta = c.tensor(16);
  OptTensor bias = c.optional(8), weight = c.optional(17);
  if (seamRuns(r, Direction::Backward, a, x, phi, alpha, weight, bias))
    return;
  int64_t C = channelsOf(x, a.layout);
  // x_next's gradients summed through acc: aggregate's takes gx_next,
  // project's aggregate's result.
  mhc::KernelSpec aggregate = aggregateSpec(Direction::Backward, a.n, xNext, a.layout, C);
  mhc::KernelSpec project =
      projectSpec(Direction::Backward, a.n, xNext, a.layout, C, phi, weight, a.tf32);
  aggregate.acc = project.acc = true;
  r.add(aggregate);
  r.add(sinkhornSpec(Direction::Backward, a.n, a.mode, a.iters, a.eps));
  r.add(scaleSpec(Direction::Backward, a.n, beta, a.normEps, a.preEps, a.postMult));
  r.add(project);
  r.add(combineSpec(Direction::Backward, a.n, x, a.layout, C, bias));
}

/// pre_backward (gy, gpost, gP, x, h, ms, pre, logits, phi, alpha, beta,
/// weight, acc, attrs): pre.bwd where PreBackwardOps.cpp runs it (phi,
/// alpha and weight of one dtype, a spec codegen has), else the four
/// gradient ops in its preGradSteps's order (keep the two in step).
void preBackward(Requests &r, const CallArgs &c) {
  std::string keep[2];
  PreAttrs a = c.preAttrs(13, keep);
  Tensor x = c.tensor(3), phi = c.tensor(8), alpha = c.tensor(9), beta = c.tensor(10);
  OptTensor weight = c.optional(11), acc = c.optional(12);
  int64_t C = channelsOf(x, a.layout);
  bool oneParamType = phi.scalar_type() == alpha.scalar_type() &&
                      (!weight || weight->scalar_type() == phi.scalar_type());
  mhc::KernelSpec spec = preSpec(a.n, x, a.layout, C, phi, weight, a.tf32, a.normEps,
                                 a.preEps, a.postMult, a.mode, a.iters, a.eps);
  spec.dir = Direction::Backward;
  spec = withAcc(spec, acc);
  if (oneParamType && r.generated(spec))
    return r.add(spec);
  // aggregate's gx (acc plus its own, f32 with the buffer) is project's acc.
  mhc::KernelSpec aggregate =
      withAcc(aggregateSpec(Direction::Backward, a.n, x, a.layout, C), acc);
  mhc::KernelSpec project =
      projectSpec(Direction::Backward, a.n, x, a.layout, C, phi, weight, a.tf32);
  project.accF32 = aggregate.accF32;
  project.acc = !aggregate.accF32;
  r.add(aggregate);
  r.add(sinkhornSpec(Direction::Backward, a.n, a.mode, a.iters, a.eps));
  r.add(scaleSpec(Direction::Backward, a.n, beta, a.normEps, a.preEps, a.postMult));
  r.add(project);
}

using Handler = std::function<void(Requests &, const CallArgs &)>;

/// Each op's handler; the token count is the first tensor's dim 0 for
/// every op (x, h, logits, f, gh, ...), which is how select() skips M = 0.
const std::map<std::string, Handler> &handlers() {
  static const std::map<std::string, Handler> table = {
      {"project", [](Requests &r, const CallArgs &c) {
         Tensor x = c.tensor(0);
         std::string layout = c.text(4);
         r.add(projectSpec(Direction::Forward, c.integer(3), x, layout,
                           channelsOf(x, layout), c.tensor(1), c.optional(2), c.flag(5)));
       }},
      {"project_backward", [](Requests &r, const CallArgs &c) {
         Tensor x = c.tensor(2);
         std::string layout = c.text(6);
         r.add(withAcc(projectSpec(Direction::Backward, c.integer(5), x, layout,
                                   channelsOf(x, layout), c.tensor(3), c.optional(4), c.flag(7)),
                       c.optional(8)));
       }},
      {"scale", [](Requests &r, const CallArgs &c) {
         r.add(scaleSpec(Direction::Forward, c.integer(4), c.tensor(3), c.real(5),
                         c.real(6), c.real(7)));
       }},
      {"scale_backward", [](Requests &r, const CallArgs &c) {
         r.add(scaleSpec(Direction::Backward, c.integer(7), c.tensor(6), c.real(8),
                         c.real(9), c.real(10)));
       }},
      {"sinkhorn", [](Requests &r, const CallArgs &c) {
         r.add(sinkhornSpec(Direction::Forward, c.integer(1), c.text(2), c.integer(3),
                            c.real(4)));
       }},
      {"sinkhorn_backward", [](Requests &r, const CallArgs &c) {
         r.add(sinkhornSpec(Direction::Backward, c.integer(2), c.text(3), c.integer(4),
                            c.real(5)));
       }},
      {"aggregate", [](Requests &r, const CallArgs &c) {
         Tensor x = c.tensor(0);
         std::string layout = c.text(3);
         r.add(aggregateSpec(Direction::Forward, c.integer(2), x, layout, channelsOf(x, layout)));
       }},
      {"aggregate_backward", [](Requests &r, const CallArgs &c) {
         Tensor x = c.tensor(1);
         std::string layout = c.text(4);
         r.add(withAcc(aggregateSpec(Direction::Backward, c.integer(3), x, layout, channelsOf(x, layout)),
                       c.optional(5)));
       }},
      {"expand_combine", [](Requests &r, const CallArgs &c) {
         Tensor x = c.tensor(2);
         std::string layout = c.text(6);
         r.add(combineSpec(Direction::Forward, c.integer(5), x, layout,
                           channelsOf(x, layout), c.optional(4)));
       }},
      {"expand_combine_backward", [](Requests &r, const CallArgs &c) {
         Tensor x = c.tensor(3);
         std::string layout = c.text(7);
         r.add(withAcc(combineSpec(Direction::Backward, c.integer(6), x, layout,
                                   channelsOf(x, layout), c.optional(5)),
                       c.optional(8)));
       }},
      // TE's f32 buffer (acc=f32 for 2-byte x): the same arguments as the
      // ops above, the buffer last.
      {"aggregate_backward_into", [](Requests &r, const CallArgs &c) {
         Tensor x = c.tensor(1);
         std::string layout = c.text(4);
         r.add(withBuffer(aggregateSpec(Direction::Backward, c.integer(3), x, layout,
                                        channelsOf(x, layout))));
       }},
      {"expand_combine_backward_into", [](Requests &r, const CallArgs &c) {
         Tensor x = c.tensor(3);
         std::string layout = c.text(7);
         r.add(withBuffer(combineSpec(Direction::Backward, c.integer(6), x, layout,
                                      channelsOf(x, layout), c.optional(5))));
       }},
      {"pre", [](Requests &r, const CallArgs &c) {
         std::string keep[2];
         preStep(r, c.tensor(0), c.tensor(1), c.tensor(3), c.optional(4), c.preAttrs(5, keep));
       }},
      {"pre_backward", preBackward},
      {"post_pre", seamForward},
      {"post_pre_backward", seamBackward},
  };
  return table;
}

} // namespace

std::vector<std::string> requestedSpecs(const std::string &op,
                                        const pybind11::tuple &args,
                                        const std::string &arch) {
  if (!mhc::isSupportedArch(arch))
    throw std::invalid_argument("requested_specs: unknown arch '" + arch + "'");
  // pre_saved and post_pre_saved request what pre and post_pre do, and the
  // inference ops (<op>_out: the same inputs first, then the out= tensors)
  // what their training op does.
  std::string name = op;
  if (name == "pre_saved" || name == "post_pre_saved")
    name.resize(name.size() - 6);
  if (name == "pre_out" || name == "post_pre_out" || name == "expand_combine_out")
    name.resize(name.size() - 4);
  auto it = handlers().find(name);
  if (it == handlers().end())
    throw std::invalid_argument("requested_specs: not an mhc op with kernels: '" + op + "'");
  CallArgs call{args};
  Requests r{arch, {}};
  if (call.tensor(0).size(0) == 0)
    return {}; // M = 0: select() returns before asking for a kernel
  it->second(r, call);
  return r.specs;
}

} // namespace mhc::ops
