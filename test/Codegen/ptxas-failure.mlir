// A ptxas that fails is reported with the spec, its command line and its own
// output: by mhc-compile (whose log the JIT shows) and by
// --mhc-write-bundle. The fake toolkit's ptxas prints an error and exits 3.
// (A crash, a hang past the limit and a missing ptxas: test/unit/PtxasTest.cpp.)
// RUN: rm -rf %t && mkdir -p %t/cuda/bin
// RUN: printf '#!/bin/sh\necho "ptxas fatal   : Unresolved extern function f" >&2\nexit 3\n' > %t/cuda/bin/ptxas && chmod +x %t/cuda/bin/ptxas
// RUN: not env MHC_CUDA_HOME=%t/cuda mhc-compile --spec 'aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a' -o %t/out 2>&1 | FileCheck %s --check-prefix=COMPILE
// RUN: not env MHC_CUDA_HOME=%t/cuda mhc-opt %s -mhc-specialize=arch=sm_90a -mhc-generate-kernels -mhc-write-bundle=dir=%t/bundle -o /dev/null 2>&1 | FileCheck %s --check-prefix=BUNDLE

// COMPILE: mhc-compile: ptxas failed for 'aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a': {{.*}}/cuda/bin/ptxas -arch=sm_90a -O3 -v {{.*}}.ptx -o {{.*}}/out/mhc_aggregate_fwd_n4_{{[0-9a-f]+}}.cubin exited with code 3
// COMPILE-NEXT: ptxas fatal   : Unresolved extern function f

// BUNDLE: error: ptxas failed for 'aggregate.fwd;n=4;act=bf16;layout=nc;C=64;arch=sm_90a': {{.*}}/cuda/bin/ptxas -arch=sm_90a -O3 -v {{.*}}.ptx -o {{.*}}/bundle/mhc_aggregate_fwd_n4_{{[0-9a-f]+}}.cubin exited with code 3
// BUNDLE-NEXT: ptxas fatal   : Unresolved extern function f

func.func @f(%x: tensor<?x4x64xbf16>, %pre: tensor<?x4xf32>) {
  %y = mhc.aggregate nc %x, %pre {n = 4 : i64} : (tensor<?x4x64xbf16>, tensor<?x4xf32>) -> tensor<?x64xbf16>
  return
}
