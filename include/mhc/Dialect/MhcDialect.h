//===- MhcDialect.h - the mhc dialect ---------------------------*- C++ -*-===//

#ifndef MHC_DIALECT_MHCDIALECT_H
#define MHC_DIALECT_MHCDIALECT_H

#include "mlir/IR/Dialect.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#include "mhc/Dialect/MhcDialect.h.inc"
#include "mhc/Dialect/MhcEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "mhc/Dialect/MhcAttrs.h.inc"

#endif // MHC_DIALECT_MHCDIALECT_H
