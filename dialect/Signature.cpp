//===- Signature.cpp - shape and dtype rules of mhc ops -------------------===//

#include "Signature.h"

#include "mlir/IR/TypeUtilities.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mhc;

SmallVector<Dim, 3> mlir::mhc::streamDims(int64_t n, Layout layout) {
  if (layout == Layout::nc)
    return {Dim::tokens(), Dim::fixed(n, "n"), Dim::channels()};
  return {Dim::tokens(), Dim::channels(), Dim::fixed(n, "n")};
}

static Dim dimOf(::mhc::Sym sym, int64_t n) {
  switch (sym) {
  case ::mhc::Sym::M:
    return Dim::tokens();
  case ::mhc::Sym::C:
    return Dim::channels();
  case ::mhc::Sym::K:
    return Dim::k();
  case ::mhc::Sym::n:
    return Dim::fixed(n, "n");
  case ::mhc::Sym::N:
    return Dim::fixed(numLogits(n), "N");
  case ::mhc::Sym::Three:
    return Dim::fixed(3, "3");
  }
  llvm_unreachable("unknown dimension symbol");
}

static ElemKind kindOf(::mhc::ElemClass elem) {
  switch (elem) {
  case ::mhc::ElemClass::Activation:
    return ElemKind::Activation;
  case ::mhc::ElemClass::Mixing:
    return ElemKind::Mixing;
  case ::mhc::ElemClass::Param:
    return ElemKind::Param;
  }
  llvm_unreachable("unknown element class");
}

LogicalResult Signature::operand(StringRef contractOp, StringRef name,
                                 Value value, Layout layout) {
  const ::mhc::ArgRule *rule = ::mhc::argRule(contractOp, name);
  assert(rule && "an operand without a rule in OpContract.cpp");
  SmallVector<Dim, 3> dims;
  if (rule->streams)
    dims = streamDims(n, layout);
  else
    for (::mhc::Sym sym : rule->dims)
      dims.push_back(dimOf(sym, n));
  return check("operand", name, value, dims, kindOf(rule->elem));
}

static bool isKind(Type t, ElemKind kind) {
  switch (kind) {
  case ElemKind::Activation:
    return t.isBF16() || t.isF16() || t.isF32();
  case ElemKind::Mixing:
    return t.isF32();
  case ElemKind::Param:
    return t.isF32() || t.isBF16();
  }
  return false;
}

static const char *describe(ElemKind kind) {
  switch (kind) {
  case ElemKind::Activation:
    return "bf16, f16 or f32 (activation)";
  case ElemKind::Mixing:
    return "f32 (mixing tensor)";
  case ElemKind::Param:
    return "f32 or bf16 (parameter)";
  }
  return "";
}

std::optional<int64_t> Signature::knownK() const {
  if (!c)
    return std::nullopt;
  return llvm::checkedMul(n, *c);
}

InFlightDiagnostic Signature::error(StringRef role, StringRef name) {
  return op->emitOpError() << role << " '" << name << "' ";
}

std::string Signature::render(ArrayRef<Dim> dims, bool symbolic) const {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "[";
  llvm::interleaveComma(dims, os, [&](const Dim &d) {
    switch (d.kind) {
    case Dim::Tokens:
      if (!symbolic && m)
        os << *m;
      else
        os << "M";
      break;
    case Dim::Channels:
      if (!symbolic && c)
        os << *c;
      else
        os << "C";
      break;
    case Dim::StreamsTimesChannels:
      if (std::optional<int64_t> k = knownK(); !symbolic && k)
        os << *k;
      else
        os << "K";
      break;
    case Dim::Fixed:
      if (symbolic)
        os << d.symbol;
      else
        os << d.value;
      break;
    }
  });
  os << "]";
  return s;
}

LogicalResult Signature::check(StringRef role, StringRef name, Value value,
                               ArrayRef<Dim> dims, ElemKind kind) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  std::string symbolic = render(dims, /*symbolic=*/true);
  auto shapeError = [&]() {
    std::string concrete = render(dims, /*symbolic=*/false);
    auto diag = error(role, name) << "must have shape " << symbolic;
    if (concrete != symbolic)
      diag << " = " << concrete;
    diag << " (n = " << n << "), got " << value.getType();
    return diag;
  };
  if (!type || type.getRank() != static_cast<int64_t>(dims.size()))
    return shapeError();

  // First pass: compare against what is already known, without learning, so
  // a message always shows the values fixed by earlier operands.
  for (auto [i, d] : llvm::enumerate(dims)) {
    int64_t size = type.getDimSize(i);
    bool isStatic = !ShapedType::isDynamic(size);
    switch (d.kind) {
    case Dim::Fixed:
      if (size != d.value) {
        auto diag = shapeError() << ": dimension " << i << " must be ";
        if (StringRef(d.symbol) != std::to_string(d.value))
          diag << d.symbol << " = ";
        return diag << d.value;
      }
      break;
    case Dim::Tokens:
      if (isStatic && m && *m != size)
        return shapeError() << ": its token count " << size
                            << " differs from M = " << *m << " of " << mFrom;
      break;
    case Dim::Channels:
      if (isStatic && size > ::mhc::kMaxChannels)
        return shapeError() << ": its channel count " << size
                            << " exceeds the largest supported C = "
                            << ::mhc::kMaxChannels;
      if (isStatic && c && *c != size)
        return shapeError() << ": its channel count " << size
                            << " differs from C = " << *c << " of " << cFrom;
      break;
    case Dim::StreamsTimesChannels:
      if (isStatic && size % n != 0)
        return shapeError() << ": dimension " << i << " must be K = n*C, a "
                            << "multiple of n = " << n;
      if (isStatic && size / n > ::mhc::kMaxChannels)
        return shapeError() << ": dimension " << i << " is K = n*C with C = "
                            << size / n << ", above the largest supported C = "
                            << ::mhc::kMaxChannels;
      if (isStatic && c && std::optional<int64_t>(size) != knownK())
        return shapeError() << ": dimension " << i << " must be K = n*C = "
                            << *knownK() << " (C = " << *c << " from " << cFrom
                            << ")";
      break;
    }
  }
  if (!isKind(type.getElementType(), kind))
    return error(role, name) << "must have element type " << describe(kind)
                             << ", got " << value.getType();

  // Learn M and C from this value.
  for (auto [i, d] : llvm::enumerate(dims)) {
    int64_t size = type.getDimSize(i);
    if (ShapedType::isDynamic(size))
      continue;
    if (d.kind == Dim::Tokens && !m) {
      m = size;
      mFrom = ("'" + name + "'").str();
    } else if (d.kind == Dim::Channels && !c) {
      c = size;
      cFrom = ("'" + name + "'").str();
    } else if (d.kind == Dim::StreamsTimesChannels && !c) {
      c = size / n;
      cFrom = ("'" + name + "'").str();
    }
  }
  return success();
}

LogicalResult Signature::checkSameElementType(StringRef role, StringRef name,
                                              Value value, Value like,
                                              StringRef likeName) {
  Type a = getElementTypeOrSelf(value.getType());
  Type b = getElementTypeOrSelf(like.getType());
  if (a == b)
    return success();
  return error(role, name) << "must have the element type of '" << likeName
                           << "' (" << b << "), got " << a;
}

LogicalResult mlir::mhc::checkNonNegative(Operation *op, StringRef name,
                                          APFloat value) {
  if (value.isFinite() && !value.isNegative())
    return success();
  return op->emitOpError() << "attribute '" << name
                           << "' must be finite and >= 0, got "
                           << value.convertToDouble();
}

LogicalResult mlir::mhc::checkPositive(Operation *op, StringRef name,
                                       APFloat value) {
  if (value.isFinite() && !value.isNegative() && !value.isZero())
    return success();
  return op->emitOpError() << "attribute '" << name
                           << "' must be finite and > 0, got "
                           << value.convertToDouble();
}

LogicalResult mlir::mhc::checkSinkhornAttrs(Operation *op, SinkhornMode mode,
                                            int64_t iters,
                                            std::optional<APFloat> eps) {
  if (iters > ::mhc::kMaxSinkhornIters)
    return op->emitOpError() << "attribute 'iters' must be at most "
                             << ::mhc::kMaxSinkhornIters << ", got " << iters;
  if (!eps)
    return success();
  if (mode == SinkhornMode::log)
    return op->emitOpError()
           << "attribute 'eps' is only meaningful in softmax_eps mode; log "
              "mode has no eps";
  return checkNonNegative(op, "eps", *eps);
}

float mlir::mhc::sinkhornEps(SinkhornMode mode, std::optional<APFloat> eps) {
  if (mode == SinkhornMode::log)
    return 0.0f;
  return eps ? eps->convertToFloat() : 1e-6f;
}

std::optional<::mhc::DType> mlir::mhc::toKernelDType(Type t) {
  if (t.isBF16())
    return ::mhc::DType::BF16;
  if (t.isF16())
    return ::mhc::DType::F16;
  if (t.isF32())
    return ::mhc::DType::F32;
  return std::nullopt;
}

int64_t mlir::mhc::inferTokens(ValueRange values) {
  for (Value v : values)
    if (auto t = dyn_cast<RankedTensorType>(v.getType()))
      if (t.getRank() >= 1 && !t.isDynamicDim(0))
        return t.getDimSize(0);
  return ShapedType::kDynamic;
}

int64_t mlir::mhc::channelsOf(Value x, Layout layout) {
  auto t = dyn_cast<RankedTensorType>(x.getType());
  if (!t || t.getRank() != 3)
    return ShapedType::kDynamic;
  return t.getDimSize(layout == Layout::nc ? 2 : 1);
}

RankedTensorType mlir::mhc::tensorOf(ArrayRef<int64_t> shape, Type elementType) {
  return RankedTensorType::get(shape, elementType);
}

Type mlir::mhc::elementTypeOf(Value v) {
  return getElementTypeOrSelf(v.getType());
}

bool mlir::mhc::compatibleTensorTypes(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != actual.size())
    return false;
  for (auto [a, b] : llvm::zip(inferred, actual)) {
    auto ta = dyn_cast<RankedTensorType>(a);
    auto tb = dyn_cast<RankedTensorType>(b);
    if (!ta || !tb || ta.getElementType() != tb.getElementType() ||
        failed(verifyCompatibleShape(ta, tb)))
      return false;
  }
  return true;
}

::mhc::Layout mlir::mhc::toKernelLayout(Layout layout) {
  return layout == Layout::nc ? ::mhc::Layout::NC : ::mhc::Layout::CN;
}

::mhc::SinkhornMode mlir::mhc::toKernelMode(SinkhornMode mode) {
  return mode == SinkhornMode::log ? ::mhc::SinkhornMode::Log
                                   : ::mhc::SinkhornMode::SoftmaxEps;
}

void mlir::mhc::describeStreams(::mhc::KernelSpec &spec, int64_t n,
                                Layout layout, Value x) {
  spec.n = n;
  spec.layout = toKernelLayout(layout);
  int64_t c = channelsOf(x, layout);
  spec.channels = ShapedType::isDynamic(c) ? 0 : c;
  if (auto dt = toKernelDType(elementTypeOf(x)))
    spec.act = *dt;
}

::mhc::DType mlir::mhc::paramDType(Value param) {
  if (auto dt = toKernelDType(elementTypeOf(param)))
    return *dt;
  return ::mhc::DType::F32;
}

Type mlir::mhc::withTokens(Value v, int64_t tokens) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || t.getRank() == 0)
    return v.getType();
  SmallVector<int64_t> shape(t.getShape());
  shape[0] = tokens;
  return RankedTensorType::get(shape, t.getElementType());
}

LogicalResult mlir::mhc::checkStreamCount(Operation *op, int64_t n) {
  if (n <= ::mhc::kMaxStreams)
    return success();
  return op->emitOpError() << "attribute 'n' must be at most "
                           << ::mhc::kMaxStreams << ", got " << n;
}

LogicalResult mlir::mhc::checkAcc(Signature &sig, Value acc, Value x,
                                  int64_t n, Layout layout) {
  if (!acc)
    return success();
  if (failed(sig.check("operand", "acc", acc, streamDims(n, layout),
                       ElemKind::Activation)) ||
      failed(sig.checkSameElementType("operand", "acc", acc, x, "x")))
    return failure();
  return success();
}

void mlir::mhc::appendPreStepTypes(SmallVectorImpl<Type> &types, Value x,
                                   Layout layout, int64_t m, int64_t n) {
  Type f32 = Float32Type::get(x.getContext());
  types.push_back(tensorOf({m, ::mhc::numLogits(n)}, f32)); // h
  types.push_back(tensorOf({m}, f32));                      // ms
  types.push_back(tensorOf({m, n}, f32));                   // pre
  types.push_back(tensorOf({m, n}, f32));                   // post
  types.push_back(tensorOf({m, n, n}, f32));                // logits
  types.push_back(tensorOf({m, n, n}, f32));                // P
  types.push_back(tensorOf({m, channelsOf(x, layout)}, elementTypeOf(x))); // y
}
