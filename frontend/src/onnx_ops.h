// Internal to the frontend: what the ONNX converters of onnx_ops.cpp share with those of
// onnx_composite.cpp (ONNX operators written as several IR ops).
#pragma once

#include <string>
#include <vector>

#include "import_context.h"

namespace policyc::frontend {

std::vector<ImportedValue> allInputs(NodeContext& ctx);
// A constant input holding one value, read as a double; Error naming `role` otherwise.
double scalarInput(NodeContext& ctx, size_t i, std::string_view role);
// A left-to-right chain of a binary op over `ins`, the last result named `out` (one input: a copy).
ImportedValue chainBinary(NodeContext& ctx, ir::Op op, const std::vector<ImportedValue>& ins, const std::string& out);

// The axes and keepdims of an ONNX Reduce* node (axes from the attribute or, from opset 13 on for
// ReduceSum, the input); `noop` when the node asks for a copy (empty axes, noop_with_empty_axes=1).
struct ReduceSpec {
  std::vector<int64_t> axes;
  int64_t keepdims = 1;
  bool noop = false;
};
ReduceSpec reduceSpec(NodeContext& ctx);

// A Conv-like node's attributes for the IR's conv (kernel from the weight type, strides,
// dilations, pads resolved from auto_pad, group).
ir::AttrMap convAttributes(NodeContext& ctx, const ir::TensorType& x, const ir::TensorType& w);

// Builds one node's composition: every intermediate value gets a fresh name derived from the
// node's output, the last one the output's own name.
class Composer {
 public:
  explicit Composer(NodeContext& ctx) : ctx_(ctx), out_(ctx.outputName(0)) {}

  // An intermediate value named OUT_<what>.
  ImportedValue op(ir::Op op, const std::vector<ImportedValue>& ins, std::string_view what, ir::AttrMap attrs = {}) {
    return ctx_.emit(op, ins, std::move(attrs), ctx_.freshName(fmt::format("{}_{}", out_, what)));
  }
  // The node's output.
  void result(ir::Op op, const std::vector<ImportedValue>& ins, ir::AttrMap attrs = {}) {
    ctx_.setOutput(0, ctx_.emit(op, ins, std::move(attrs), out_));
  }
  // A scalar constant of x's dtype.
  ImportedValue scalarLike(const ImportedValue& x, double v) {
    ir::Tensor c(x.type().dtype, {});
    c.setAsDouble(0, v);
    return constant(std::move(c), "const");
  }
  const std::string& name() const { return out_; }
  // An intermediate constant named OUT_<what>.
  ImportedValue constant(ir::Tensor t, std::string_view what) {
    return ImportedValue::constant(std::move(t), ctx_.freshName(fmt::format("{}_{}", out_, what)), ctx_.provenance());
  }
  // The node's output, known at import.
  void constantResult(ir::Tensor t) { ctx_.setOutput(0, ImportedValue::constant(std::move(t), out_, ctx_.provenance())); }

 private:
  NodeContext& ctx_;
  std::string out_;
};

// Composite operators (onnx_composite.cpp).
void convertReciprocal(NodeContext& ctx);
void convertMean(NodeContext& ctx);
void convertPRelu(NodeContext& ctx);
void convertThresholdedRelu(NodeContext& ctx);
void convertSoftsign(NodeContext& ctx);
void convertShrink(NodeContext& ctx);
void convertCelu(NodeContext& ctx);
void convertMish(NodeContext& ctx);
void convertGelu(NodeContext& ctx);
void convertLstm(NodeContext& ctx);
void convertGru(NodeContext& ctx);
void convertRnn(NodeContext& ctx);
void convertDequantizeLinear(NodeContext& ctx);
void convertQuantizeLinear(NodeContext& ctx);
void convertSign(NodeContext& ctx);
void convertIsNaN(NodeContext& ctx);
void convertIsInf(NodeContext& ctx);
void convertReduceL1(NodeContext& ctx);
void convertReduceL2(NodeContext& ctx);
void convertReduceSumSquare(NodeContext& ctx);
void convertReduceLogSum(NodeContext& ctx);
void convertReduceLogSumExp(NodeContext& ctx);
void convertReduceMin(NodeContext& ctx);
void convertArgMin(NodeContext& ctx);
void convertGlobalMaxPool(NodeContext& ctx);
void convertHardmax(NodeContext& ctx);
void convertTrilu(NodeContext& ctx);
void convertTile(NodeContext& ctx);
void convertRange(NodeContext& ctx);
void convertSize(NodeContext& ctx);
void convertCastLike(NodeContext& ctx);
void convertEyeLike(NodeContext& ctx);
void convertEinsum(NodeContext& ctx);  // onnx_einsum.cpp
void convertResize(NodeContext& ctx);  // onnx_resize.cpp
void convertUpsample(NodeContext& ctx);
void convertDepthToSpace(NodeContext& ctx);  // onnx_rearrange.cpp
void convertSpaceToDepth(NodeContext& ctx);
void convertOneHot(NodeContext& ctx);
void convertCumSum(NodeContext& ctx);
void convertDynamicQuantizeLinear(NodeContext& ctx);
void convertMatMulInteger(NodeContext& ctx);
void convertConvInteger(NodeContext& ctx);
void convertInstanceNormalization(NodeContext& ctx);
void convertMeanVarianceNormalization(NodeContext& ctx);
void convertLrn(NodeContext& ctx);
void convertTopK(NodeContext& ctx);
void convertGatherND(NodeContext& ctx);
void convertScatterElements(NodeContext& ctx);
void convertScatterND(NodeContext& ctx);
void convertQLinearMatMul(NodeContext& ctx);
void convertQLinearConv(NodeContext& ctx);

}  // namespace policyc::frontend
