// Internal: the importer's state (what each ONNX value stands for) and the per-node context
// that operator converters use to read inputs and attributes and to emit IR.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "policyc/ir/error.h"
#include "policyc/ir/graph.h"

namespace policyc::frontend {

// An error whose message already names the model and node; the node loop passes it on as is
// and prefixes every other policyc::Error (from the IR) with the node it happened in.
class ImportError : public Error {
 public:
  using Error::Error;
};

// A dim as an ONNX value has it: `coef` times the batch size where `batch`, else `coef`.
struct OnnxDim {
  int64_t coef = 1;
  bool batch = false;
  bool operator==(const OnnxDim&) const = default;
};
std::string onnxDimsStr(const std::vector<OnnxDim>& dims);  // "[8,4*batch,16]"

// What an ONNX value name stands for during import. Constants are kept out of the graph until
// an op that stays in the graph reads them, so ONNX shape arithmetic folds away completely.
struct ImportedValue {
  enum class Kind {
    Runtime,      // a value of the graph (input or op output)
    Constant,     // known data: an initializer, a Constant node or a folded node
    ShapeVector,  // a 1-D (or 0-D) integer tensor of dims in which some elements are the batch size
    BatchFill,    // a tensor of one repeated value whose shape has the batch dim (ConstantOfShape)
  };
  Kind kind = Kind::Runtime;
  ir::Value* value = nullptr;                   // Runtime
  std::shared_ptr<const ir::Tensor> tensor;     // Constant: the data. ShapeVector: the static elements;
                                                // a batch entry holds what multiplies the batch size
                                                // (1 for Shape's own). BatchFill: the data with every
                                                // batch dim of size 1, which broadcasts the same way.
  std::shared_ptr<const ir::Tensor> batchMask;  // ShapeVector: 1 where the element is the batch size
  ir::Shape fillShape;                          // BatchFill: the real shape
  std::string name;                             // ONNX name; a materialised constant's param name
  std::vector<std::string> provenance;          // for params made from it
  bool weight = false;                          // Constant: an initializer as the file has it
  // Runtime: how many IR dims each ONNX dim folds together, where some ONNX dim is the batch size
  // times a constant (nn.MultiheadAttention's export reshapes [T, batch, E] to [T, batch*heads, D]).
  // The IR keeps the batch as a dim of its own, so such a value is held unfolded ([T, batch, heads,
  // D], folds {1, 2, 1}) and the ops that meet it (folded_dims.cpp) work on the IR dims. Empty: one
  // IR dim per ONNX dim, the usual case.
  std::vector<int> folds;

  static ImportedValue runtime(ir::Value* v) {
    ImportedValue r;
    r.kind = Kind::Runtime;
    r.value = v;
    r.name = v->name();
    return r;
  }
  static ImportedValue constant(ir::Tensor t, std::string name, std::vector<std::string> provenance) {
    ImportedValue r;
    r.kind = Kind::Constant;
    r.tensor = std::make_shared<const ir::Tensor>(std::move(t));
    r.name = std::move(name);
    r.provenance = std::move(provenance);
    return r;
  }

  bool isRuntime() const { return kind == Kind::Runtime; }
  bool isConstant() const { return kind == Kind::Constant; }
  bool isFolded() const { return !folds.empty(); }
  // The real type (with batch dims for ShapeVector/BatchFill). Error for a folded value, whose ONNX
  // shape the IR cannot write: converters that accept one read dims() or its IR value.
  ir::TensorType type() const;
  // The ONNX dims of a Runtime value (folded or not), a Constant or a BatchFill.
  std::vector<OnnxDim> dims() const;
  // ShapeVector and Constant: the elements as dims (a batch element holds its coefficient).
  std::vector<OnnxDim> elementsAsDims() const;
};

// Why `v` (a shape vector, a folded value or a batch fill) cannot be used where it is.
std::string describeKindProblem(const ImportedValue& v);

// State of one import: the graph being built and every ONNX value seen so far.
class ImportState {
 public:
  // `sourceOpset`: the model file's own opset when ONNX's version converter brought it to `opset`.
  ImportState(ir::Graph& graph, std::string source, int64_t opset, int64_t sourceOpset)
      : graph_(graph), source_(std::move(source)), opset_(opset), sourceOpset_(sourceOpset) {}

  ir::Graph& graph() { return graph_; }
  const std::string& source() const { return source_; }
  int64_t opset() const { return opset_; }
  int64_t sourceOpset() const { return sourceOpset_; }

  // Every name the model uses; helper values the importer makes avoid them.
  void reserveName(const std::string& name) { reserved_.insert(name); }
  // Names some node or graph output reads (an output not in here is unused).
  void markRead(const std::string& name) { read_.insert(name); }
  bool isRead(const std::string& name) const { return read_.count(name) != 0; }

  const ImportedValue* find(const std::string& name) const;
  void define(const std::string& name, ImportedValue value);  // Error if already defined

  // A new value name based on `base` that is neither in the model nor in the graph.
  std::string freshName(std::string_view base);

  // The graph value for `v`: runtime values as they are, constants as params (made once per
  // constant and placed before their first reader). Errors for shape vectors. A batch fill is its
  // size-1 stand-in where `allowBatchFill` (elementwise ops broadcast it correctly), else that
  // stand-in expanded to the real shape at run time.
  ir::Value* materialise(const ImportedValue& v, bool allowBatchFill = false);

 private:
  ir::Value* expandBatchFill(const ImportedValue& v);

  std::map<const ir::Tensor*, ir::Value*> expanded_;  // batch fills made values (expandBatchFill)
  ir::Graph& graph_;
  std::string source_;
  int64_t opset_;
  int64_t sourceOpset_;
  std::unordered_map<std::string, ImportedValue> values_;
  std::unordered_set<std::string> reserved_;
  std::unordered_set<std::string> read_;
  // Materialised constants by data identity; holding the data keeps its address unique.
  struct Param {
    std::shared_ptr<const ir::Tensor> data;
    ir::Value* value;
  };
  std::unordered_map<const ir::Tensor*, Param> params_;
};

// What a converter sees while translating one ONNX node.
class NodeContext {
 public:
  NodeContext(ImportState& state, const onnx::NodeProto& node);

  const onnx::NodeProto& node() const { return node_; }
  const std::string& opType() const { return node_.op_type(); }
  int64_t opset() const { return state_.opset(); }
  // The opset the file was written at (below opset() when ONNX's converter upgraded it): where a
  // converted node keeps a meaning the converter does not rewrite.
  int64_t sourceOpset() const { return state_.sourceOpset(); }
  ImportState& state() { return state_; }
  ir::Graph& graph() { return state_.graph(); }
  // "model.onnx: node 'Conv_3' (Conv, opset 13, output 'y'): "
  const std::string& prefix() const { return prefix_; }
  // Provenance of the IR nodes made for this ONNX node: its name, or its first output's.
  const std::vector<std::string>& provenance() const { return provenance_; }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw ImportError(prefix_ + fmt::format(format, std::forward<Args>(args)...));
  }

  // ---- inputs (an empty name is an omitted optional input)
  size_t numInputs() const { return static_cast<size_t>(node_.input_size()); }
  bool hasInput(size_t i) const;
  const ImportedValue& input(size_t i) const;          // Error if omitted
  const ImportedValue* optionalInput(size_t i) const;  // nullptr if omitted
  ir::TensorType inputType(size_t i) const { return input(i).type(); }
  // A constant input read as attribute data; Error naming `role` if it is not a constant.
  const ir::Tensor& constantInput(size_t i, std::string_view role) const;
  std::vector<int64_t> constantInts(size_t i, std::string_view role) const;

  // ---- outputs (an empty name is an omitted optional output)
  size_t numOutputs() const { return static_cast<size_t>(node_.output_size()); }
  std::string outputName(size_t i);  // a fresh name when the ONNX name is empty
  bool outputUsed(size_t i) const;   // read by a node or a graph output
  // Error unless outputs `from`.. are unused (inference-only forms of training ops).
  void requireUnusedOutputs(size_t from, std::string_view why) const;
  void setOutput(size_t i, ImportedValue value);

  // ---- attributes. Every read marks the attribute understood; after conversion, any
  // attribute nobody read is an error, so no attribute that changes semantics is ignored.
  bool hasAttr(std::string_view name) const { return findAttr(name) != nullptr; }
  std::optional<int64_t> attrInt(std::string_view name);
  int64_t attrInt(std::string_view name, int64_t fallback) { return attrInt(name).value_or(fallback); }
  std::optional<double> attrFloat(std::string_view name);
  double attrFloat(std::string_view name, double fallback) { return attrFloat(name).value_or(fallback); }
  std::optional<std::vector<int64_t>> attrInts(std::string_view name);
  std::optional<std::vector<double>> attrFloats(std::string_view name);
  std::optional<std::string> attrString(std::string_view name);
  std::optional<std::vector<std::string>> attrStrings(std::string_view name);
  std::optional<ir::Tensor> attrTensor(std::string_view name);
  void ignoreAttr(std::string_view name) { (void)use(name); }  // read and deliberately unused
  void checkAllAttributesUnderstood() const;

  // ---- building. Emits `op` over `inputs`: evaluated at import when every input is a
  // constant (or a shape vector passing through data movement), otherwise added to the graph
  // with constants materialised as params. One result per name in `names`.
  std::vector<ImportedValue> emit(ir::Op op, const std::vector<ImportedValue>& inputs, ir::AttrMap attrs,
                                  std::vector<std::string> names);
  ImportedValue emit(ir::Op op, const std::vector<ImportedValue>& inputs, ir::AttrMap attrs, std::string name) {
    return std::move(emit(op, inputs, std::move(attrs), std::vector<std::string>{std::move(name)}).front());
  }
  std::string freshName(std::string_view base) { return state_.freshName(base); }

 private:
  const onnx::AttributeProto* findAttr(std::string_view name) const;
  const onnx::AttributeProto* use(std::string_view name);
  const onnx::AttributeProto* useTyped(std::string_view name, onnx::AttributeProto::AttributeType type);
  std::vector<ImportedValue> emitShapeVector(ir::Op op, const std::vector<ImportedValue>& inputs,
                                             const ir::AttrMap& attrs, const std::vector<std::string>& names);
  ImportedValue emitShapeArithmetic(ir::Op op, const std::vector<ImportedValue>& inputs, const std::string& name);
  // folded_dims.cpp: `op` where some input is folded.
  std::vector<ImportedValue> emitFolded(ir::Op op, const std::vector<ImportedValue>& inputs, ir::AttrMap attrs,
                                        std::vector<std::string> names);

  ImportState& state_;
  const onnx::NodeProto& node_;
  std::string prefix_;
  std::vector<std::string> provenance_;
  std::unordered_set<std::string> usedAttrs_;
};

// The IR reshape attribute taking `from` to `to` (equal element counts, the same number of batch
// dims): -1 for a lone batch dim, 0 where several stay at their positions; nullopt otherwise.
std::optional<std::vector<int64_t>> reshapeTarget(const ir::Shape& from, const ir::Shape& to);

// Reshape of `x` to `target` (ONNX dims; a 0 copies x's dim, one -1 is inferred) where x is folded
// or the target has a multiple of the batch size: the IR dims of x split and merged to a common
// refinement, folded again as the target says (folded_dims.cpp).
ImportedValue reshapeFolded(NodeContext& ctx, const ImportedValue& x, std::vector<OnnxDim> target,
                            const std::string& name);

// Converts one ONNX node (opset and domain already checked). Defined in onnx_ops.cpp.
void convertNode(NodeContext& ctx);
// Whether convertNode knows `opType` (at some opset).
bool hasConverter(std::string_view opType);

}  // namespace policyc::frontend
