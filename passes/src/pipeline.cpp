// The default optimisation pipeline: the compiler's story, top to bottom.
#include "policyc/passes/pass_manager.h"

namespace policyc::passes {

std::vector<std::string> defaultPipeline() {
  return {
      // What import left: constant sub-graphs, shapes to settle.
      "fold-constants",
      "infer-shapes",
      // One form per idea: linear instead of Gemm/MatMul+Add, silu/gelu/layer_norm recognised,
      // no-ops gone; then fold what canonical forms exposed.
      "canonicalize",
      // Code generation loops over the batch outermost: values that carry it inside get it in front.
      "batch-outermost",
      "fold-constants",
      // Inference-time algebra: normalisation and per-channel affine into the producing layer.
      "fold-batch-norm",
      // Share work: identical computations once, sibling layers as one wider layer.
      "cse",
      "fuse-horizontal",
      // Whatever the rewrites left unused.
      "dce",
  };
}

}  // namespace policyc::passes
