//===- MhcDialect.cpp - dialect, attribute and op registration ------------===//

#include "mhc/Dialect/MhcOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mhc;

#include "mhc/Dialect/MhcDialect.cpp.inc"
#include "mhc/Dialect/MhcEnums.cpp.inc"
#include "mhc/Dialect/MhcInterfaces.cpp.inc"

// Enum attributes print as a bare keyword in op syntax (`mhc.project nc ...`).
template <typename AttrT, typename EnumT>
static ParseResult parseEnumKeyword(OpAsmParser &parser, AttrT &attr,
                                    std::optional<EnumT> (*symbolize)(StringRef),
                                    StringRef what) {
  StringRef keyword;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<EnumT> value = symbolize(keyword);
  if (!value)
    return parser.emitError(loc) << "expected " << what << ", got '"
                                 << keyword << "'";
  attr = AttrT::get(parser.getContext(), *value);
  return success();
}

static ParseResult parseLayout(OpAsmParser &parser, LayoutAttr &attr) {
  return parseEnumKeyword<LayoutAttr, Layout>(parser, attr, symbolizeLayout,
                                              "layout 'nc' or 'cn'");
}
static void printLayout(OpAsmPrinter &printer, Operation *, LayoutAttr attr) {
  printer << stringifyLayout(attr.getValue());
}

static ParseResult parseSinkhornMode(OpAsmParser &parser,
                                     SinkhornModeAttr &attr) {
  return parseEnumKeyword<SinkhornModeAttr, SinkhornMode>(
      parser, attr, symbolizeSinkhornMode,
      "sinkhorn mode 'log' or 'softmax_eps'");
}
static void printSinkhornMode(OpAsmPrinter &printer, Operation *,
                              SinkhornModeAttr attr) {
  printer << stringifySinkhornMode(attr.getValue());
}

// mhc.post_pre_grad's result types, printed as functional-type prints them:
// `(gx, gf, gpost, gP[, gbias], gphi, galpha, gbeta[, gweight])`. Whether
// gbias and gweight are there follows from the bias and weight operands, so
// the parser can split the list into the op's result segments.
static ParseResult parseSeamGradResultTypes(
    OpAsmParser &parser, std::optional<OpAsmParser::UnresolvedOperand> bias,
    std::optional<OpAsmParser::UnresolvedOperand> weight, Type &gx, Type &gf,
    Type &gpost, Type &gP, Type &gbias, Type &gphi, Type &galpha, Type &gbeta,
    Type &gweight) {
  SmallVector<Type> types;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLParen() || parser.parseTypeList(types) ||
      parser.parseRParen())
    return failure();
  size_t expected = 7 + (bias ? 1 : 0) + (weight ? 1 : 0);
  if (types.size() != expected)
    return parser.emitError(loc)
           << "expected " << expected << " result types (gx, gf, gpost, gP, "
           << (bias ? "gbias, " : "") << "gphi, galpha, gbeta"
           << (weight ? ", gweight" : "") << "), got " << types.size();
  Type *slots[] = {&gx, &gf, &gpost, &gP, bias ? &gbias : nullptr,
                   &gphi, &galpha, &gbeta, weight ? &gweight : nullptr};
  auto next = types.begin();
  for (Type *slot : slots)
    if (slot)
      *slot = *next++;
  return success();
}

static void printSeamGradResultTypes(OpAsmPrinter &printer, Operation *op,
                                     Value, Value, Type gx, Type gf,
                                     Type gpost, Type gP, Type gbias,
                                     Type gphi, Type galpha, Type gbeta,
                                     Type gweight) {
  SmallVector<Type> types;
  for (Type t : {gx, gf, gpost, gP, gbias, gphi, galpha, gbeta, gweight})
    if (t)
      types.push_back(t);
  printer << "(";
  llvm::interleaveComma(types, printer);
  printer << ")";
}

#define GET_ATTRDEF_CLASSES
#include "mhc/Dialect/MhcAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "mhc/Dialect/MhcOps.cpp.inc"

void MhcDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "mhc/Dialect/MhcOps.cpp.inc"
      >();
}

void MhcDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "mhc/Dialect/MhcAttrs.cpp.inc"
      >();
}

LogicalResult
KernelSpecAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       StringRef key) {
  std::string error;
  if (!::mhc::KernelSpec::parse(key, &error))
    return emitError() << "invalid kernel spec \"" << key << "\": " << error;
  return success();
}
