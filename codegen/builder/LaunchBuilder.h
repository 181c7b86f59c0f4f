//===- LaunchBuilder.h - one kernel launch's gpu.func -----------*- C++ -*-===//
//
// LaunchBuilder declares one kernel launch: its buffers and the token count M
// become the gpu.func's parameters (and the manifest's parameter list), in
// the order they are declared, and its shared-memory buffers the func's
// workgroup attributions (or views of dynamic shared memory past 48 KB).
//
//===----------------------------------------------------------------------===//

#ifndef MHC_CODEGEN_BUILDER_LAUNCHBUILDER_H
#define MHC_CODEGEN_BUILDER_LAUNCHBUILDER_H

#include "mhc/Support/Manifest.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <map>

namespace mlir::mhc {

/// One kernel launch under construction.
class LaunchBuilder {
public:
  LaunchBuilder(std::string entry, const ::mhc::Manifest &manifest)
      : entry(std::move(entry)), manifest(manifest) {}

  /// Declares parameters, in order: a buffer of the manifest, or "M".
  LaunchBuilder &param(const std::string &name);
  LaunchBuilder &block(int threads);
  LaunchBuilder &grid(::mhc::GridRule rule);
  /// Launched cooperatively (LaunchDesc::cooperative): the grid must be
  /// fixed and co-resident; take the "sync" parameter for grid barriers.
  LaunchBuilder &cooperative();
  /// Launched with programmatic stream serialization
  /// (LaunchDesc::programmatic; sm_90+): the kernel waits for the previous
  /// grid itself (SimtBuilder::waitGridDependency).
  LaunchBuilder &programmaticDependent();
  /// Asks ptxas to fit `blocks` blocks per SM (it caps registers).
  LaunchBuilder &minBlocksPerSM(int blocks);
  /// A workgroup (shared memory) buffer of `elems` f32 values, aligned to
  /// `align` bytes when given.
  LaunchBuilder &sharedF32(int64_t elems, int64_t align = 0);
  /// A workgroup buffer of `elems` i64 values (mbarriers).
  LaunchBuilder &sharedI64(int64_t elems);
  /// The most shared memory a block may use on the spec's arch; past 48 KB
  /// the buffers become views of dynamic shared memory, which the runtime
  /// opts in to (the manifest's dynamic_shared_bytes).
  static constexpr int64_t kStaticSharedLimit = 48 * 1024;
  static int64_t sharedLimit(const std::string &arch);
  /// Bytes of shared memory the buffers declared so far take.
  int64_t sharedBytes() const;

  /// Creates the gpu.func at the end of `module`, positions `b` in its body
  /// and returns it. Call once, before arg()/shared().
  gpu::GPUFuncOp create(OpBuilder &b, gpu::GPUModuleOp module);

  Value arg(const std::string &name) const;
  /// M and S as index values.
  Value tokens() const { return tokensIndex; }
  Value splits() const { return splitIndex; }
  Value shared(unsigned i = 0) const;

  ::mhc::LaunchDesc describe() const;
  int threads() const { return blockThreads; }

private:
  /// The gpu.func's parameter types, in declaration order.
  SmallVector<Type> paramTypes(MLIRContext *ctx) const;
  /// The memref type of shared buffer `i`.
  MemRefType sharedType(MLIRContext *ctx, unsigned i) const;
  /// One dynamic shared allocation, sliced into the declared buffers.
  void sliceDynamicShared(OpBuilder &b);

  std::string entry;
  const ::mhc::Manifest &manifest;
  std::vector<std::string> params;
  int blockThreads = 256;
  int minBlocks = 0;
  bool isCooperative = false;
  bool isProgrammatic = false;
  ::mhc::GridRule gridRule{1, 0};
  struct SharedBuffer {
    int64_t elems;
    bool i64;
    int64_t align;
  };
  SmallVector<SharedBuffer> sharedBuffers;
  /// Views of dynamic shared memory, one per buffer, when sharedBytes()
  /// exceeds kStaticSharedLimit; otherwise workgroup attributions.
  SmallVector<Value> dynamicViews;
  gpu::GPUFuncOp func;
  std::map<std::string, Value> args;
  Value tokensIndex, splitIndex;
};

/// The MLIR element type of a kernel dtype.
Type elementType(MLIRContext *ctx, ::mhc::DType dtype);

} // namespace mlir::mhc

#endif // MHC_CODEGEN_BUILDER_LAUNCHBUILDER_H
