//===- Passes.td - mhc code generation passes ---------------*- tablegen -*-===//
//
// The passes from specialised mhc ops to kernels: gpu.func generation, the
// fixes inside the NVVM lowering, and the kernel bundle on disk. The mhc ->
// mhc graph passes are in mhc/Passes/Passes.td.
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_PASSES_TD
#define MHC_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def GenerateKernels : Pass<"mhc-generate-kernels", "::mlir::ModuleOp"> {
  let summary = "build the gpu.func kernels of every specialised mhc op";
  let description = [{
    For each distinct `mhc.spec` on an op that is not marked `mhc.fallback`,
    appends a `gpu.module` named after the kernel (`mhc_<op>_<dir>_n<n>_<hash>`,
    with an `#nvvm.target` for the spec's arch) holding every launch of that
    op: gpu.func kernels in gpu/scf/vector/arith/math/memref/nvgpu, specialised
    for n, dtypes, layout, C and the variant. The op gets
    `mhc.kernel = @<module>`; the gpu.module carries its launch manifest as
    `mhc.manifest` (JSON). The module becomes a `gpu.container_module`.
    An op with `mhc.spec_one_launch` (a pre / post_pre forward of dynamic M)
    gets that spec's module too, named in `mhc.kernel_one_launch`.
    Run after `mhc-specialize`; an op whose stamped spec is no longer the one
    it describes (a rewrite changed it since) is an error: specialise again.
  }];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect", "::mlir::nvgpu::NVGPUDialect"
  ];
}

def KernelNoAlias : Pass<"mhc-kernel-noalias", "::mlir::gpu::GPUModuleOp"> {
  let summary = "mark the buffer pointers of lowered mhc kernels noalias";
  let description = [{
    Runs inside the NVVM lowering (`--mhc-lower-to-nvvm`), after the
    gpu.funcs became `llvm.func`s, whose argument attributes the GPU-to-NVVM
    conversion does not carry over. The outputs and workspaces of an mhc
    launch are fresh allocations and inputs are only read, so the
    aligned pointer of each memref argument (the second of its five
    parameters) gets `llvm.noalias`: the backend may then move loads above
    stores and read inputs through the non-coherent cache (`ld.global.nc`).
    A tensor-map parameter (`tmap:<buffer>` in the manifest) becomes a
    128-byte `llvm.byval` argument marked `nvvm.grid_constant`, so that TMA
    reads it in parameter space. Only kernels (`nvvm.kernel`) in modules
    made by `mhc-generate-kernels` (an `mhc.manifest` attribute) are touched;
    the manifest's parameter lists say where each buffer's five parameters
    start, and must match the kernel's arguments (count, and a pointer
    wherever an attribute goes): a mismatch is an error.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect"];
}

def ExternDynamicShared
    : Pass<"mhc-extern-dynamic-shared", "::mlir::gpu::GPUModuleOp"> {
  let summary = "declare the dynamic shared memory symbol external";
  let description = [{
    Runs inside the NVVM lowering, after GPU-to-NVVM turned
    `gpu.dynamic_shared_memory` into an internal zero-sized
    `llvm.mlir.global` in address space 3. The NVPTX backend demotes such
    a global into its one user function as a static one-byte shared
    variable (`.shared .b8 sym;`) instead of the `.extern .shared .b8
    sym[];` that names the launch's dynamic allocation. This pass turns
    every zero-sized shared global into an external declaration, so the
    kernel addresses exactly the bytes the launch reserves (mhc launches
    whose buffers exceed the 48 KB static limit).
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def WriteBundle : Pass<"mhc-write-bundle", "::mlir::ModuleOp"> {
  let summary = "lower every generated kernel module to PTX and cubin and "
                "write the kernel bundle";
  let description = [{
    For each gpu.module made by `mhc-generate-kernels`, lowers a copy to
    NVVM, serialises it to PTX (MLIR's NVVM target) and, with `cubin`,
    assembles it with the CUDA toolkit's ptxas, then writes
    `<dir>/<kernel>.ptx`, `.cubin` and `.json` (the manifest, with ptxas'
    register/spill report) and `<dir>/index.json` listing the kernels. The IR
    is left unchanged, so later passes (or `--mhc-lower-to-nvvm`) can still
    print each stage. The toolkit is `$MHC_CUDA_HOME`, `$CUDA_HOME` or
    `/usr/local/cuda`. A module name that is not a plain file name (letters,
    digits, `_`, `-`, `.`, not starting with `.`) is an error, so nothing is
    written outside `dir`; with no kernel module to write the pass warns and
    writes an empty index.
  }];
  let options = [
    Option<"dir", "dir", "std::string", /*default=*/"\"mhc-bundle\"",
           "directory to write the bundle to">,
    Option<"cubin", "cubin", "bool", /*default=*/"true",
           "also assemble cubins with ptxas (else PTX only)">,
  ];
}

#endif // MHC_CODEGEN_PASSES_TD
