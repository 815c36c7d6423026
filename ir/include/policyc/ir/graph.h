// The graph IR: values, nodes (input / param / op / output) and a graph in topological order.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <unordered_map>
#include <vector>

#include "policyc/ir/attr.h"
#include "policyc/ir/ops.h"
#include "policyc/ir/tensor.h"
#include "policyc/ir/types.h"

namespace policyc::ir {

class Node;
class Graph;

// A tensor produced by a node. Its name is unique in the graph and is what `%name` prints.
class Value {
 public:
  const std::string& name() const { return name_; }
  const TensorType& type() const { return type_; }
  void setType(TensorType type) { type_ = std::move(type); }
  Node* producer() const { return producer_; }
  int index() const { return index_; }  // which output of the producer

 private:
  friend class Graph;
  void setName(std::string name) { name_ = std::move(name); }  // Graph::renameValue keeps the name index
  friend class Node;
  std::string name_;
  TensorType type_;
  Node* producer_ = nullptr;
  int index_ = 0;
};

enum class NodeKind : uint8_t { Input, Param, Op, Output };
const char* nodeKindName(NodeKind kind);

// A node in the graph. As in torch.fx, a node is named by its (first) output value; the
// provenance lists the source-model nodes it came from, and survives every pass.
class Node {
 public:
  NodeKind kind() const { return kind_; }
  bool isOp() const { return kind_ == NodeKind::Op; }
  bool isOp(Op op) const { return kind_ == NodeKind::Op && op_ == op; }
  Op op() const { return op_; }                 // only for kind Op
  const OpInfo& info() const { return opInfo(op_); }
  const std::string& name() const;              // the first output's name; "return" for the output node

  const std::vector<Value*>& inputs() const { return inputs_; }
  Value* input(size_t i) const { return inputs_.at(i); }
  size_t numInputs() const { return inputs_.size(); }
  void setInput(size_t i, Value* value) { inputs_.at(i) = value; }
  void setInputs(std::vector<Value*> values) { inputs_ = std::move(values); }

  size_t numOutputs() const { return outputs_.size(); }
  Value* output(size_t i = 0) const { return outputs_.at(i).get(); }

  AttrMap& attrs() { return attrs_; }
  const AttrMap& attrs() const { return attrs_; }
  int64_t attrInt(const std::string& n) const { return ir::attrInt(attrs_, n); }
  double attrFloat(const std::string& n) const { return ir::attrFloat(attrs_, n); }
  const std::string& attrString(const std::string& n) const { return ir::attrString(attrs_, n); }
  const std::vector<int64_t>& attrInts(const std::string& n) const { return ir::attrInts(attrs_, n); }

  std::vector<std::string>& provenance() { return provenance_; }
  const std::vector<std::string>& provenance() const { return provenance_; }

  // Param nodes: the constant tensor (its type equals the output value's type).
  const Tensor& paramData() const { return param_; }
  void setParamData(Tensor data);
  // Param nodes: a trained weight of the model file (an ONNX initializer, a .pir param), as
  // opposed to a constant of the computation (a Constant node's scalar, a folded shape).
  bool isModelWeight() const { return modelWeight_; }
  void setModelWeight(bool weight) { modelWeight_ = weight; }
  // Param nodes: whether the caller may replace this param's values at run time (set_weights).
  // An updatable param's source has its shape and dtype i64: element e holds 1 + the index of the
  // Graph::updatableWeights() element it is a copy of, or 0 for a literal zero (padding). A pass
  // may move an updatable param's elements (transpose, concat, pack) and must move its source the
  // same way; it must never compute with its values or compare them, since they will change.
  bool isUpdatable() const { return updatable_; }
  const Tensor& paramSource() const { return source_; }
  void setParamSource(Tensor source);  // makes the param updatable

  // Output node: the names the graph's outputs are known by (one per input of this node).
  const std::vector<std::string>& outputNames() const { return outputNames_; }

 private:
  friend class Graph;
  NodeKind kind_ = NodeKind::Op;
  Op op_ = Op::Identity;
  std::vector<Value*> inputs_;
  std::vector<std::unique_ptr<Value>> outputs_;
  AttrMap attrs_;
  std::vector<std::string> provenance_;
  Tensor param_;
  Tensor source_;  // see paramSource()
  bool updatable_ = false;
  bool modelWeight_ = false;
  std::vector<std::string> outputNames_;
};

// Nodes in topological order: inputs first (in signature order), then params and ops, and the
// single output node last. Owns its nodes and values; not copyable — use clone().
class Graph {
 public:
  explicit Graph(std::string name = "graph") : name_(std::move(name)) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  const std::string& name() const { return name_; }
  void setName(std::string name) { name_ = std::move(name); }
  std::unique_ptr<Graph> clone() const;

  // ---- building. Names must be unique among the graph's values (Error otherwise).
  Value* addInput(std::string name, TensorType type);
  Value* addParam(std::string name, Tensor data, std::vector<std::string> provenance = {});

  // ---- weights replaceable at run time (compile --updatable-weights)
  struct UpdatableWeight {
    std::string name;  // the model's name of the weight (what set_weights is called with)
    Tensor value;      // as the model file gives it (f32)
    int64_t offset = 0;  // of its first element among all updatable weights' elements
  };
  // Makes a param updatable: records its name and current data as a weight and gives it the
  // source of its own elements. Only f32 params; Error otherwise.
  void makeUpdatable(Node* param);
  const std::vector<UpdatableWeight>& updatableWeights() const { return weights_; }
  // For a pass that rebuilds a graph node by node: the weights of the graph it replaces.
  void setUpdatableWeights(std::vector<UpdatableWeight> weights) { weights_ = std::move(weights); }
  // Adds an op before the output node (or at `before`, when given). Attributes are completed with
  // the op's defaults and checked; output types are inferred when `outputTypes` is empty.
  // `outputNames` gives one name per output (variadic-output ops need all of them).
  Node* addOp(Op op, std::vector<Value*> inputs, AttrMap attrs, std::vector<std::string> outputNames,
              std::vector<TensorType> outputTypes = {}, std::vector<std::string> provenance = {},
              const Node* before = nullptr);
  Node* addOp(Op op, std::vector<Value*> inputs, AttrMap attrs, std::string name) {
    return addOp(op, std::move(inputs), std::move(attrs), std::vector<std::string>{std::move(name)});
  }
  void setOutputs(std::vector<std::pair<std::string, Value*>> outputs);

  // ---- queries
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Value*> inputs() const;                               // in signature order
  std::vector<std::pair<std::string, Value*>> outputs() const;      // empty before setOutputs
  Node* outputNode() const;                                         // nullptr before setOutputs
  Value* findValue(std::string_view name) const;                    // nullptr if absent
  std::vector<Node*> users(const Value* value) const;               // nodes reading `value`
  size_t numOpNodes() const;
  // A name not used by any value: `base` itself, or base_1, base_2, ...
  std::string uniqueName(std::string_view base) const;
  // Renames a value of this graph (the new name must be free).
  void renameValue(Value* value, std::string name);

  // ---- rewriting
  void replaceAllUsesWith(Value* from, Value* to);
  void eraseNode(Node* node);  // the node's outputs must be unused
  void removeDeadNodes();      // ops and params no output depends on (inputs stay)

 private:
  void checkNameFree(const std::string& name) const;
  void indexValues(const Node& node);    // adds the node's values to byName_
  void unindexValues(const Node& node);  // removes them
  std::vector<std::unique_ptr<Node>>::iterator insertionPoint(const Node* before);

  std::string name_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<UpdatableWeight> weights_;
  // Every value by name: name lookups and uniqueness checks in constant time (a graph of 50,000
  // nodes must import in linear time).
  std::unordered_map<std::string, Value*> byName_;
};

}  // namespace policyc::ir
