// RUN: rm -rf %t && mhc-opt %s -split-input-file -verify-diagnostics -mhc-write-bundle=dir=%t -o /dev/null
// RUN: FileCheck %s < %t/index.json
// RUN: not ls %t/../escaped.ptx %t/../escaped.json

// Nothing to write is worth a warning: the bundle holds no kernel.
// expected-warning @below {{mhc-write-bundle: no kernel modules to write (run mhc-generate-kernels first); index.json lists none}}
module {
  func.func @f() {
    return
  }
}
// CHECK: {
// CHECK-NEXT:   "format": 1,
// CHECK-NEXT:   "kernels": []
// CHECK-NEXT: }

// -----

// A module name becomes a file name in the bundle directory: a path (or a
// name that would break index.json) is refused before anything is written.
module {
  // expected-error @below {{gpu.module name "../escaped" is not a plain file name (letters, digits, '_', '-', '.'; not starting with '.')}}
  gpu.module @"../escaped" attributes {mhc.manifest = "{}"} {
  }
}

// -----

module {
  // expected-error @below {{gpu.module name "a\22b" is not a plain file name}}
  gpu.module @"a\"b" attributes {mhc.manifest = "{}"} {
  }
}
