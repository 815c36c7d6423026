// The importer's value bookkeeping: constants folded at import, shape vectors carrying the batch
// size, params made on first use, and the node context converters work through.
#include "import_context.h"

#include <algorithm>

#include "onnx_tensor.h"
#include "policyc/ir/interpreter.h"

namespace policyc::frontend {
namespace {

ir::Shape standInShape(const ir::Shape& shape) {
  ir::Shape out = shape;
  for (ir::Dim& d : out) {
    if (d.isBatch()) d = ir::Dim(1);
  }
  return out;
}

bool allZero(const ir::Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.getAsInt(i) != 0) return false;
  }
  return true;
}

// Data-movement ops a shape vector may pass through: every output element is a copy of one
// input element, so running the op on a 0/1 mask of batch elements tells where they end up.
bool movesShapeVectors(ir::Op op) {
  switch (op) {
    case ir::Op::Gather:
    case ir::Op::Slice:
    case ir::Op::Concat:
    case ir::Op::Unsqueeze:
    case ir::Op::Squeeze:
    case ir::Op::Identity:
    case ir::Op::Cast:
    case ir::Op::Reshape:
    case ir::Op::Flatten:
    case ir::Op::Split:
    case ir::Op::Transpose: return true;
    default: return false;
  }
}

}  // namespace

std::string describeKindProblem(const ImportedValue& v) {
  if (v.kind == ImportedValue::Kind::ShapeVector) {
    return fmt::format(
        "value '{}' holds dims that include the batch size (from Shape of a batch-sized value); policyc can pass "
        "it through Gather, Slice, Concat, Unsqueeze, Squeeze, Cast, Identity and multiplication by constants "
        "into the shape input of Reshape, and nowhere else",
        v.name);
  }
  if (v.isFolded()) {
    return fmt::format(
        "value '{}' has shape {}, a dim that is a multiple of the batch size; policyc follows such values "
        "through Reshape, Transpose, MatMul, Gemm, Softmax and elementwise ops only, and a graph output must not "
        "have one",
        v.name, onnxDimsStr(v.dims()));
  }
  return fmt::format(
      "value '{}' is a constant whose shape includes the batch size (ConstantOfShape of a batch-dependent shape); "
      "policyc supports it only as an operand of elementwise ops",
      v.name);
}

// ---------------------------------------------------------------------------------------------
// ImportedValue / ImportState

std::string onnxDimsStr(const std::vector<OnnxDim>& dims) {
  std::vector<std::string> parts;
  for (const OnnxDim& d : dims) {
    parts.push_back(!d.batch ? std::to_string(d.coef) : d.coef == 1 ? "batch" : fmt::format("{}*batch", d.coef));
  }
  return fmt::format("[{}]", fmt::join(parts, ","));
}

ir::TensorType ImportedValue::type() const {
  switch (kind) {
    case Kind::Runtime:
      if (isFolded()) throw Error(describeKindProblem(*this));
      return value->type();
    case Kind::Constant:
    case Kind::ShapeVector: return tensor->type();
    case Kind::BatchFill: return ir::TensorType{tensor->dtype(), fillShape};
  }
  return {};
}

std::vector<OnnxDim> ImportedValue::dims() const {
  if (kind == Kind::Runtime && isFolded()) {
    const ir::Shape& shape = value->type().shape;
    std::vector<OnnxDim> out;
    size_t at = 0;
    for (int n : folds) {
      OnnxDim d;
      for (int k = 0; k < n; ++k, ++at) {
        if (shape.at(at).isBatch()) d.batch = true;
        else d.coef *= shape.at(at).value();
      }
      out.push_back(d);
    }
    return out;
  }
  std::vector<OnnxDim> out;
  for (const ir::Dim& d : type().shape) out.push_back(d.isBatch() ? OnnxDim{1, true} : OnnxDim{d.value(), false});
  return out;
}

std::vector<OnnxDim> ImportedValue::elementsAsDims() const {
  std::vector<OnnxDim> out;
  for (int64_t i = 0; i < tensor->numel(); ++i) {
    out.push_back({tensor->getAsInt(i), kind == Kind::ShapeVector && batchMask->getAsInt(i) != 0});
  }
  return out;
}

const ImportedValue* ImportState::find(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

void ImportState::define(const std::string& name, ImportedValue value) {
  if (!values_.emplace(name, std::move(value)).second) fail("value '{}' is defined twice", name);
}

std::string ImportState::freshName(std::string_view base) {
  std::string stem = base.empty() ? std::string("tmp") : std::string(base);
  std::string candidate = stem;
  for (int i = 1; reserved_.count(candidate) || graph_.findValue(candidate); ++i) {
    candidate = fmt::format("{}_{}", stem, i);
  }
  reserved_.insert(candidate);
  return candidate;
}

ir::Value* ImportState::materialise(const ImportedValue& v, bool allowBatchFill) {
  switch (v.kind) {
    case ImportedValue::Kind::Runtime:
      if (v.isFolded()) throw Error(describeKindProblem(v));
      return v.value;
    case ImportedValue::Kind::ShapeVector: throw Error(describeKindProblem(v));
    case ImportedValue::Kind::BatchFill:
      if (!allowBatchFill) return expandBatchFill(v);
      break;
    case ImportedValue::Kind::Constant: break;
  }
  auto it = params_.find(v.tensor.get());
  if (it != params_.end()) return it->second.value;
  std::string name = v.name;
  if (name.empty() || graph_.findValue(name)) name = freshName(name.empty() ? "const" : name);
  std::vector<std::string> provenance = v.provenance;
  ir::Value* param = graph_.addParam(name, *v.tensor, std::move(provenance));
  param->producer()->setModelWeight(v.weight);
  params_.emplace(v.tensor.get(), Param{v.tensor, param});
  return param;
}

// Where a batch fill must be a value of its own (a graph output, an operand of a matmul): its
// stand-in as a param, broadcast to the real shape at run time (expand, -1 for the batch).
ir::Value* ImportState::expandBatchFill(const ImportedValue& v) {
  auto done = expanded_.find(v.tensor.get());
  if (done != expanded_.end()) return done->second;  // one expand per fill, however many readers
  ImportedValue standIn = v;
  standIn.kind = ImportedValue::Kind::Constant;
  standIn.name = v.name.empty() ? "fill" : v.name + "_fill";
  ir::Value* param = materialise(standIn, false);
  std::vector<int64_t> shape;
  for (const ir::Dim& d : v.fillShape) shape.push_back(d.isBatch() ? -1 : d.value());
  std::string name = v.name.empty() || graph_.findValue(v.name) || reserved_.count(v.name) ? freshName(v.name.empty() ? "fill" : v.name) : v.name;
  reserved_.insert(name);
  ir::Value* expanded = graph_.addOp(ir::Op::Expand, {param}, {{"shape", shape}}, {name}, {}, v.provenance)->output();
  expanded_.emplace(v.tensor.get(), expanded);
  return expanded;
}

// ---------------------------------------------------------------------------------------------
// NodeContext: identity, inputs, outputs

NodeContext::NodeContext(ImportState& state, const onnx::NodeProto& node) : state_(state), node_(node) {
  std::string firstOutput;
  for (const std::string& out : node.output()) {
    if (!out.empty()) {
      firstOutput = out;
      break;
    }
  }
  std::string shown = !node.name().empty() ? node.name() : !firstOutput.empty() ? firstOutput : "<unnamed>";
  provenance_ = {shown};
  std::string outputPart =
      !node.name().empty() && !firstOutput.empty() ? fmt::format(", output '{}'", firstOutput) : "";
  prefix_ =
      fmt::format("{}: node '{}' ({}, opset {}{}): ", state.source(), shown, node.op_type(), state.opset(), outputPart);
}

bool NodeContext::hasInput(size_t i) const { return i < numInputs() && !node_.input(static_cast<int>(i)).empty(); }

const ImportedValue* NodeContext::optionalInput(size_t i) const {
  if (!hasInput(i)) return nullptr;
  const std::string& name = node_.input(static_cast<int>(i));
  const ImportedValue* v = state_.find(name);
  // The graph walk checks every input name before converting, so this is a safety net.
  if (!v) fail("input '{}' is not defined before this node", name);
  return v;
}

const ImportedValue& NodeContext::input(size_t i) const {
  const ImportedValue* v = optionalInput(i);
  if (!v) fail("{} needs input {}, which is missing", opType(), i);
  return *v;
}

const ir::Tensor& NodeContext::constantInput(size_t i, std::string_view role) const {
  const ImportedValue& v = input(i);
  switch (v.kind) {
    case ImportedValue::Kind::Constant: return *v.tensor;
    case ImportedValue::Kind::Runtime:
      fail(
          "{} (input '{}') must be a constant (an initializer, or computed from constants only), but it is "
          "computed at run time",
          role, v.name);
    case ImportedValue::Kind::ShapeVector:
    case ImportedValue::Kind::BatchFill:
      fail("{} (input '{}') must be a constant, but it depends on the batch size", role, v.name);
  }
  fail("internal: unknown value kind");
}

std::vector<int64_t> NodeContext::constantInts(size_t i, std::string_view role) const {
  const ir::Tensor& t = constantInput(i, role);
  if (ir::isFloat(t.dtype()))
    fail("{} (input '{}') must be an integer tensor, got {}", role, input(i).name, t.type().str());
  if (t.shape().size() > 1) fail("{} (input '{}') must be a 1-D tensor, got {}", role, input(i).name, t.type().str());
  return tensorInts(t);
}

std::string NodeContext::outputName(size_t i) {
  if (i >= numOutputs()) fail("internal: output {} of a node with {} outputs", i, numOutputs());
  const std::string& name = node_.output(static_cast<int>(i));
  if (!name.empty()) return name;
  return freshName(fmt::format("{}_out{}", provenance_.front(), i));
}

bool NodeContext::outputUsed(size_t i) const {
  if (i >= numOutputs()) return false;
  const std::string& name = node_.output(static_cast<int>(i));
  return !name.empty() && state_.isRead(name);
}

void NodeContext::requireUnusedOutputs(size_t from, std::string_view why) const {
  for (size_t i = from; i < numOutputs(); ++i) {
    if (outputUsed(i)) fail("output {} ('{}') is used, but {}", i, node_.output(static_cast<int>(i)), why);
  }
}

void NodeContext::setOutput(size_t i, ImportedValue value) {
  if (i >= numOutputs()) fail("internal: output {} of a node with {} outputs", i, numOutputs());
  const std::string& name = node_.output(static_cast<int>(i));
  if (name.empty()) return;
  state_.define(name, std::move(value));
}

// ---------------------------------------------------------------------------------------------
// NodeContext: attributes

const onnx::AttributeProto* NodeContext::findAttr(std::string_view name) const {
  for (const onnx::AttributeProto& a : node_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

const onnx::AttributeProto* NodeContext::use(std::string_view name) {
  usedAttrs_.insert(std::string(name));
  return findAttr(name);
}

const onnx::AttributeProto* NodeContext::useTyped(std::string_view name, onnx::AttributeProto::AttributeType type) {
  const onnx::AttributeProto* a = use(name);
  if (!a) return nullptr;
  if (!a->ref_attr_name().empty()) {
    fail("attribute '{}' refers to a function attribute ('{}'), which policyc does not support", name,
         a->ref_attr_name());
  }
  onnx::AttributeProto::AttributeType actual = a->type();
  if (actual == onnx::AttributeProto::UNDEFINED) {
    // Old producers leave `type` unset; the field that is filled in says what it is.
    if (a->has_f()) actual = onnx::AttributeProto::FLOAT;
    else if (a->has_i()) actual = onnx::AttributeProto::INT;
    else if (a->has_s()) actual = onnx::AttributeProto::STRING;
    else if (a->has_t()) actual = onnx::AttributeProto::TENSOR;
    else if (a->floats_size()) actual = onnx::AttributeProto::FLOATS;
    else if (a->ints_size()) actual = onnx::AttributeProto::INTS;
    else if (type == onnx::AttributeProto::INTS || type == onnx::AttributeProto::FLOATS) actual = type;  // empty list
  }
  if (actual != type) {
    fail("attribute '{}' is {}, but {} expects {}", name, onnx::AttributeProto::AttributeType_Name(actual), opType(),
         onnx::AttributeProto::AttributeType_Name(type));
  }
  return a;
}

std::optional<int64_t> NodeContext::attrInt(std::string_view name) {
  const onnx::AttributeProto* a = useTyped(name, onnx::AttributeProto::INT);
  if (!a) return std::nullopt;
  return a->i();
}

std::optional<double> NodeContext::attrFloat(std::string_view name) {
  const onnx::AttributeProto* a = useTyped(name, onnx::AttributeProto::FLOAT);
  if (!a) return std::nullopt;
  return static_cast<double>(a->f());
}

std::optional<std::vector<int64_t>> NodeContext::attrInts(std::string_view name) {
  const onnx::AttributeProto* a = useTyped(name, onnx::AttributeProto::INTS);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::optional<std::vector<double>> NodeContext::attrFloats(std::string_view name) {
  const onnx::AttributeProto* a = useTyped(name, onnx::AttributeProto::FLOATS);
  if (!a) return std::nullopt;
  return std::vector<double>(a->floats().begin(), a->floats().end());
}

std::optional<std::string> NodeContext::attrString(std::string_view name) {
  const onnx::AttributeProto* a = useTyped(name, onnx::AttributeProto::STRING);
  if (!a) return std::nullopt;
  return a->s();
}

std::optional<std::vector<std::string>> NodeContext::attrStrings(std::string_view name) {
  const onnx::AttributeProto* a = useTyped(name, onnx::AttributeProto::STRINGS);
  if (!a) return std::nullopt;
  return std::vector<std::string>(a->strings().begin(), a->strings().end());
}

std::optional<ir::Tensor> NodeContext::attrTensor(std::string_view name) {
  const onnx::AttributeProto* a = useTyped(name, onnx::AttributeProto::TENSOR);
  if (!a) return std::nullopt;
  return decodeTensor(a->t(), fmt::format("attribute '{}'", name));  // the node loop adds the prefix
}

void NodeContext::checkAllAttributesUnderstood() const {
  for (const onnx::AttributeProto& a : node_.attribute()) {
    if (!usedAttrs_.count(a.name())) fail("attribute '{}' is not supported on {}", a.name(), opType());
  }
}

// ---------------------------------------------------------------------------------------------
// NodeContext: emitting IR

std::vector<ImportedValue> NodeContext::emit(ir::Op op, const std::vector<ImportedValue>& inputs, ir::AttrMap attrs,
                                             std::vector<std::string> names) {
  const ir::OpInfo& info = ir::opInfo(op);
  attrs = ir::completeAttrs(info, std::move(attrs));
  for (const ImportedValue& in : inputs) {
    if (in.isFolded()) return emitFolded(op, inputs, std::move(attrs), std::move(names));
  }
  const ImportedValue* shapeVector = nullptr;
  const ImportedValue* batchFill = nullptr;
  bool anyRuntime = false;
  for (const ImportedValue& in : inputs) {
    if (in.kind == ImportedValue::Kind::ShapeVector && !shapeVector) shapeVector = &in;
    if (in.kind == ImportedValue::Kind::BatchFill && !batchFill) batchFill = &in;
    anyRuntime = anyRuntime || in.isRuntime();
  }
  if (shapeVector && (op == ir::Op::Mul || op == ir::Op::Div) && !anyRuntime && !batchFill && names.size() == 1) {
    return {emitShapeArithmetic(op, inputs, names.front())};
  }
  if (shapeVector) {
    if (anyRuntime || batchFill || !movesShapeVectors(op)) fail("{}", describeKindProblem(*shapeVector));
    return emitShapeVector(op, inputs, attrs, names);
  }
  const int outputCount = static_cast<int>(names.size());

  // A batch fill stands in with size-1 batch dims. That is exact for elementwise ops, provided
  // broadcasting gives the same result shape as with the real batch dims.
  std::vector<ir::TensorType> realTypes;
  if (batchFill && (info.fusion != ir::FusionKind::Elementwise || op == ir::Op::BatchNorm)) {
    // Any other op reads the fill as the value it is: broadcast at run time (expand).
    std::vector<ImportedValue> materialised;
    for (const ImportedValue& in : inputs) {
      materialised.push_back(in.kind == ImportedValue::Kind::BatchFill ? ImportedValue::runtime(state_.materialise(in, false)) : in);
    }
    return emit(op, materialised, std::move(attrs), std::move(names));
  }
  if (batchFill) {
    std::vector<ir::TensorType> inputTypes;
    for (const ImportedValue& in : inputs) inputTypes.push_back(in.type());
    realTypes = ir::inferOutputTypes(op, inputTypes, attrs, outputCount);
  }

  std::vector<ImportedValue> results;
  if (!anyRuntime) {
    std::vector<ir::Tensor> tensors;
    for (const ImportedValue& in : inputs) tensors.push_back(*in.tensor);
    std::vector<ir::Tensor> outs = ir::evaluateOp(op, tensors, attrs, outputCount);
    for (size_t i = 0; i < outs.size(); ++i) {
      ImportedValue r = ImportedValue::constant(std::move(outs[i]), names.at(i), provenance_);
      if (batchFill && !ir::isStaticShape(realTypes[i].shape)) {
        if (r.tensor->type().shape != standInShape(realTypes[i].shape)) fail("{}", describeKindProblem(*batchFill));
        r.kind = ImportedValue::Kind::BatchFill;
        r.fillShape = realTypes[i].shape;
      }
      results.push_back(std::move(r));
    }
    return results;
  }

  std::vector<ir::Value*> operands;
  for (const ImportedValue& in : inputs) operands.push_back(state_.materialise(in, batchFill != nullptr));
  // Infer here rather than in addOp, whose message would name the IR node on top of ours.
  std::vector<ir::TensorType> operandTypes;
  for (const ir::Value* v : operands) operandTypes.push_back(v->type());
  std::vector<ir::TensorType> outTypes;
  try {
    outTypes = ir::inferOutputTypes(op, operandTypes, attrs, outputCount);
  } catch (const ImportError&) {
    throw;
  } catch (const Error& e) {
    fail("{}", e.what());
  }
  ir::Node* node =
      graph().addOp(op, std::move(operands), std::move(attrs), std::move(names), std::move(outTypes), provenance_);
  for (size_t i = 0; i < node->numOutputs(); ++i) {
    if (batchFill && node->output(i)->type() != realTypes.at(i)) fail("{}", describeKindProblem(*batchFill));
    results.push_back(ImportedValue::runtime(node->output(i)));
  }
  return results;
}

std::vector<ImportedValue> NodeContext::emitShapeVector(ir::Op op, const std::vector<ImportedValue>& inputs,
                                                        const ir::AttrMap& attrs,
                                                        const std::vector<std::string>& names) {
  if (op == ir::Op::Cast) {
    auto to = ir::parseDType(ir::attrString(attrs, "to"));
    if (to != ir::DType::I64 && to != ir::DType::I32) {
      fail(
          "Cast of value '{}', which holds dims that include the batch size, to {} is not supported (only to "
          "int32 or int64)",
          inputs.front().name, ir::attrString(attrs, "to"));
    }
  }
  // Evaluate twice: on the element values, and on a mask that is 1 for batch elements. Index
  // inputs (Gather's second) are the same in both runs.
  std::vector<ir::Tensor> values;
  std::vector<ir::Tensor> masks;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ImportedValue& in = inputs[i];
    values.push_back(*in.tensor);
    if (in.kind == ImportedValue::Kind::ShapeVector) {
      if (op == ir::Op::Gather && i == 1) fail("{}", describeKindProblem(in));
      masks.push_back(*in.batchMask);
    } else if (op == ir::Op::Gather && i == 1) {
      masks.push_back(*in.tensor);
    } else {
      masks.emplace_back(in.tensor->dtype(), in.tensor->shape());
    }
  }
  const int outputCount = static_cast<int>(names.size());
  std::vector<ir::Tensor> valueOuts = ir::evaluateOp(op, values, attrs, outputCount);
  std::vector<ir::Tensor> maskOuts = ir::evaluateOp(op, masks, attrs, outputCount);
  std::vector<ImportedValue> results;
  for (size_t i = 0; i < valueOuts.size(); ++i) {
    ImportedValue r = ImportedValue::constant(std::move(valueOuts[i]), names.at(i), provenance_);
    if (!allZero(maskOuts.at(i))) {
      r.kind = ImportedValue::Kind::ShapeVector;
      r.batchMask = std::make_shared<const ir::Tensor>(std::move(maskOuts[i]));
    }
    results.push_back(std::move(r));
  }
  return results;
}

// A shape vector times a constant or another shape vector (one side's batch elements meeting the
// other's static ones: batch*batch is not a size), or divided by a constant that divides its batch
// elements' coefficients: nn.MultiheadAttention's export computes batch*heads and head_dim so.
ImportedValue NodeContext::emitShapeArithmetic(ir::Op op, const std::vector<ImportedValue>& inputs,
                                               const std::string& name) {
  std::vector<ir::Tensor> values;
  std::vector<ir::Tensor> masks;
  for (const ImportedValue& in : inputs) {
    values.push_back(*in.tensor);
    masks.push_back(in.kind == ImportedValue::Kind::ShapeVector ? *in.batchMask
                                                                 : ir::Tensor(ir::DType::I64, in.tensor->shape()));
  }
  if (op == ir::Op::Div) {
    const ImportedValue& divisor = inputs[1];
    if (divisor.kind == ImportedValue::Kind::ShapeVector || divisor.tensor->numel() != 1 || divisor.tensor->getAsInt(0) == 0) {
      fail("{} is divided by '{}', which is not a nonzero constant scalar", inputs[0].name, divisor.name);
    }
    const int64_t d = divisor.tensor->getAsInt(0);
    for (int64_t i = 0; i < values[0].numel(); ++i) {
      if (masks[0].getAsInt(i) != 0 && d != -1 && values[0].getAsInt(i) % d != 0) {
        fail("value '{}' holds {}*batch, which {} does not divide for every batch size", inputs[0].name,
             values[0].getAsInt(i), d);
      }
    }
  }
  for (ir::Tensor& m : masks) m = ir::evaluateOp(ir::Op::Cast, {m}, ir::completeAttrs(ir::opInfo(ir::Op::Cast), {{"to", std::string("i64")}}), 1).front();
  ir::Tensor value = ir::evaluateOp(op, values, {}, 1).front();
  ir::Tensor mask = ir::evaluateOp(ir::Op::Add, masks, {}, 1).front();  // 1 where a batch element lands
  for (int64_t i = 0; i < mask.numel(); ++i) {
    if (mask.getAsInt(i) > 1) fail("value '{}' would hold the batch size squared, which is not a size policyc supports", name);
  }
  ImportedValue r = ImportedValue::constant(std::move(value), name, provenance_);
  if (!allZero(mask)) {
    r.kind = ImportedValue::Kind::ShapeVector;
    r.batchMask = std::make_shared<const ir::Tensor>(std::move(mask));
  }
  return r;
}

}  // namespace policyc::frontend
