// Graph construction, queries and the few rewriting primitives passes build on.
#include "policyc/ir/graph.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "policyc/ir/error.h"

namespace policyc::ir {

const char* nodeKindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::Input: return "input";
    case NodeKind::Param: return "param";
    case NodeKind::Op: return "op";
    case NodeKind::Output: return "output";
  }
  return "?";
}

const std::string& Node::name() const {
  static const std::string kReturn = "return";
  return outputs_.empty() ? kReturn : outputs_.front()->name();
}

void Node::setParamData(Tensor data) {
  if (kind_ != NodeKind::Param) fail("internal: setParamData on a {} node", nodeKindName(kind_));
  outputs_.front()->setType(data.type());
  param_ = std::move(data);
}

void Node::setParamSource(Tensor source) {
  if (kind_ != NodeKind::Param) fail("internal: setParamSource on a {} node", nodeKindName(kind_));
  if (source.dtype() != DType::I64 || source.shape() != param_.shape()) {
    fail("internal: the source of param '{}' is not i64 of its shape", name());
  }
  source_ = std::move(source);
  updatable_ = true;
}

void Graph::makeUpdatable(Node* param) {
  if (!param || param->kind() != NodeKind::Param) fail("internal: makeUpdatable on a node that is not a param");
  if (param->isUpdatable()) return;
  if (param->paramData().dtype() != DType::F32) {
    fail("weight '{}' is {}: only f32 weights can be replaced at run time", param->name(),
         dtypeName(param->paramData().dtype()));
  }
  int64_t offset = weights_.empty() ? 0 : weights_.back().offset + weights_.back().value.numel();
  Tensor source(DType::I64, param->paramData().shape());
  auto* codes = reinterpret_cast<int64_t*>(source.bytes());
  for (int64_t i = 0; i < source.numel(); ++i) codes[i] = 1 + offset + i;
  weights_.push_back({param->name(), param->paramData(), offset});
  param->setParamSource(std::move(source));
}

void Graph::checkNameFree(const std::string& name) const {
  if (name.empty()) fail("graph '{}': a value needs a name", name_);
  if (findValue(name)) fail("graph '{}': value name '{}' is used twice", name_, name);
}

void Graph::indexValues(const Node& node) {
  for (const auto& v : node.outputs_) byName_[v->name()] = v.get();
}

void Graph::unindexValues(const Node& node) {
  for (const auto& v : node.outputs_) {
    auto it = byName_.find(v->name());
    if (it != byName_.end() && it->second == v.get()) byName_.erase(it);
  }
}

void Graph::renameValue(Value* value, std::string name) {
  if (name == value->name()) return;
  checkNameFree(name);
  byName_.erase(value->name());
  value->setName(std::move(name));
  byName_[value->name()] = value;
}

std::vector<std::unique_ptr<Node>>::iterator Graph::insertionPoint(const Node* before) {
  if (before) {
    auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& n) { return n.get() == before; });
    if (it == nodes_.end()) fail("internal: insertion point is not in graph '{}'", name_);
    return it;
  }
  if (!nodes_.empty() && nodes_.back()->kind() == NodeKind::Output) return nodes_.end() - 1;
  return nodes_.end();
}

Value* Graph::addInput(std::string name, TensorType type) {
  checkNameFree(name);
  auto node = std::make_unique<Node>();
  node->kind_ = NodeKind::Input;
  auto value = std::make_unique<Value>();
  value->name_ = std::move(name);
  value->type_ = std::move(type);
  value->producer_ = node.get();
  Value* result = value.get();
  node->outputs_.push_back(std::move(value));
  // Inputs stay first, in the order they were added. Indexed once inserted (an insertion that
  // throws leaves no name behind).
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [](const auto& n) { return n->kind() != NodeKind::Input; });
  indexValues(**nodes_.insert(it, std::move(node)));
  return result;
}

Value* Graph::addParam(std::string name, Tensor data, std::vector<std::string> provenance) {
  checkNameFree(name);
  auto node = std::make_unique<Node>();
  node->kind_ = NodeKind::Param;
  node->provenance_ = std::move(provenance);
  auto value = std::make_unique<Value>();
  value->name_ = std::move(name);
  value->type_ = data.type();
  value->producer_ = node.get();
  node->param_ = std::move(data);
  Value* result = value.get();
  node->outputs_.push_back(std::move(value));
  indexValues(**nodes_.insert(insertionPoint(nullptr), std::move(node)));
  return result;
}

Node* Graph::addOp(Op op, std::vector<Value*> inputs, AttrMap attrs, std::vector<std::string> outputNames,
                   std::vector<TensorType> outputTypes, std::vector<std::string> provenance, const Node* before) {
  const OpInfo& info = opInfo(op);
  std::string what = outputNames.empty() ? std::string(info.name) : outputNames.front();
  try {
    attrs = completeAttrs(info, std::move(attrs));
    for (Value* v : inputs) {
      if (!v) fail("an operand is missing");
    }
    int numOutputs = static_cast<int>(outputNames.size());
    if (outputTypes.empty()) {
      std::vector<TensorType> inputTypes;
      for (Value* v : inputs) inputTypes.push_back(v->type());
      outputTypes = inferOutputTypes(op, inputTypes, attrs, numOutputs);
    }
    if (outputTypes.size() != outputNames.size()) {
      fail("{} output names for {} output types", outputNames.size(), outputTypes.size());
    }
    for (size_t i = 0; i < outputNames.size(); ++i) {
      checkNameFree(outputNames[i]);
      for (size_t j = 0; j < i; ++j) {
        if (outputNames[j] == outputNames[i]) fail("graph '{}': value name '{}' is used twice", name_, outputNames[i]);
      }
    }
  } catch (const Error& e) {
    fail("node '{}' ({}): {}", what, info.name, e.what());
  }
  auto node = std::make_unique<Node>();
  node->kind_ = NodeKind::Op;
  node->op_ = op;
  node->inputs_ = std::move(inputs);
  node->attrs_ = std::move(attrs);
  node->provenance_ = std::move(provenance);
  for (size_t i = 0; i < outputNames.size(); ++i) {
    auto value = std::make_unique<Value>();
    value->name_ = std::move(outputNames[i]);
    value->type_ = std::move(outputTypes[i]);
    value->producer_ = node.get();
    value->index_ = static_cast<int>(i);
    node->outputs_.push_back(std::move(value));
  }
  Node* result = node.get();
  indexValues(**nodes_.insert(insertionPoint(before), std::move(node)));
  return result;
}

void Graph::setOutputs(std::vector<std::pair<std::string, Value*>> outputs) {
  std::unordered_set<std::string> seen;
  for (const auto& [name, value] : outputs) {
    if (!value) fail("graph '{}': output '{}' has no value", name_, name);
    if (!seen.insert(name).second) fail("graph '{}': output name '{}' is used twice", name_, name);
  }
  if (!nodes_.empty() && nodes_.back()->kind() == NodeKind::Output) nodes_.pop_back();
  auto node = std::make_unique<Node>();
  node->kind_ = NodeKind::Output;
  for (auto& [name, value] : outputs) {
    node->outputNames_.push_back(name);
    node->inputs_.push_back(value);
  }
  nodes_.push_back(std::move(node));
}

std::vector<Value*> Graph::inputs() const {
  std::vector<Value*> result;
  for (const auto& n : nodes_) {
    if (n->kind() == NodeKind::Input) result.push_back(n->output());
  }
  return result;
}

std::vector<std::pair<std::string, Value*>> Graph::outputs() const {
  std::vector<std::pair<std::string, Value*>> result;
  if (Node* out = outputNode()) {
    for (size_t i = 0; i < out->numInputs(); ++i) result.emplace_back(out->outputNames_[i], out->input(i));
  }
  return result;
}

Node* Graph::outputNode() const {
  if (nodes_.empty() || nodes_.back()->kind() != NodeKind::Output) return nullptr;
  return nodes_.back().get();
}

Value* Graph::findValue(std::string_view name) const {
  auto it = byName_.find(std::string(name));
  return it == byName_.end() ? nullptr : it->second;
}

std::vector<Node*> Graph::users(const Value* value) const {
  std::vector<Node*> result;
  for (const auto& n : nodes_) {
    if (std::find(n->inputs_.begin(), n->inputs_.end(), value) != n->inputs_.end()) result.push_back(n.get());
  }
  return result;
}

size_t Graph::numOpNodes() const {
  return static_cast<size_t>(std::count_if(nodes_.begin(), nodes_.end(), [](const auto& n) { return n->isOp(); }));
}

std::string Graph::uniqueName(std::string_view base) const {
  std::string candidate(base);
  for (int i = 1; byName_.count(candidate); ++i) candidate = fmt::format("{}_{}", base, i);
  return candidate;
}

void Graph::replaceAllUsesWith(Value* from, Value* to) {
  for (auto& n : nodes_) {
    std::replace(n->inputs_.begin(), n->inputs_.end(), from, to);
  }
}

void Graph::eraseNode(Node* node) {
  for (const auto& v : node->outputs_) {
    if (!users(v.get()).empty()) fail("internal: erasing node '{}' whose value '{}' is still used", node->name(), v->name());
  }
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& n) { return n.get() == node; });
  if (it != nodes_.end()) {
    unindexValues(**it);
    nodes_.erase(it);
  }
}

void Graph::removeDeadNodes() {
  std::unordered_set<const Value*> live;
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
    const Node& n = **it;
    bool needed = n.kind() == NodeKind::Output || n.kind() == NodeKind::Input;
    for (const auto& v : n.outputs_) needed = needed || live.count(v.get());
    if (needed) {
      for (Value* v : n.inputs_) live.insert(v);
    }
  }
  std::erase_if(nodes_, [&](const std::unique_ptr<Node>& n) {
    if (n->kind() == NodeKind::Output || n->kind() == NodeKind::Input) return false;
    bool dead = std::none_of(n->outputs_.begin(), n->outputs_.end(), [&](const auto& v) { return live.count(v.get()); });
    if (dead) unindexValues(*n);
    return dead;
  });
}

std::unique_ptr<Graph> Graph::clone() const {
  auto copy = std::make_unique<Graph>(name_);
  copy->weights_ = weights_;
  std::unordered_map<const Value*, Value*> map;
  for (const auto& n : nodes_) {
    auto node = std::make_unique<Node>();
    node->kind_ = n->kind_;
    node->op_ = n->op_;
    node->attrs_ = n->attrs_;
    node->provenance_ = n->provenance_;
    node->param_ = n->param_;
    node->source_ = n->source_;
    node->updatable_ = n->updatable_;
    node->modelWeight_ = n->modelWeight_;
    node->outputNames_ = n->outputNames_;
    for (Value* v : n->inputs_) {
      auto it = map.find(v);
      if (it == map.end()) fail("internal: clone of graph '{}' met an operand defined later", name_);
      node->inputs_.push_back(it->second);
    }
    for (const auto& v : n->outputs_) {
      auto value = std::make_unique<Value>(*v);
      value->producer_ = node.get();
      map[v.get()] = value.get();
      node->outputs_.push_back(std::move(value));
    }
    copy->indexValues(*node);
    copy->nodes_.push_back(std::move(node));
  }
  return copy;
}

}  // namespace policyc::ir
