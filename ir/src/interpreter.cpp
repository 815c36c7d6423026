// The reference interpreter: runs a graph node by node with the op table's reference kernels.
//
// Values live as RefTensors (doubles) and are rounded to their dtype after every op, so an f32
// graph sees f32 rounding at the same points a compiled model does; options.float64 skips the
// f32 rounding to give the float64 reference. Intermediates are freed after their last use.
#include "policyc/ir/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "op_impls.h"
#include "policyc/ir/error.h"

namespace policyc::ir {
namespace {

RefTensor toRef(const Tensor& t) {
  RefTensor r{t.dtype(), t.shape(), {}};
  r.data.resize(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) r.data[i] = t.getAsDouble(i);
  return r;
}

// f32 values kept in double (float64 mode) come back as f64 tensors.
Tensor fromRef(const RefTensor& r, bool float64) {
  DType dtype = float64 && r.dtype == DType::F32 ? DType::F64 : r.dtype;
  Tensor t(dtype, r.shape);
  for (int64_t i = 0; i < r.numel(); ++i) t.setAsDouble(i, r.data[i]);
  return t;
}

template <typename T>
void saturateAll(std::vector<double>& data) {
  constexpr auto lo = static_cast<double>(std::numeric_limits<T>::lowest());
  constexpr auto hi = static_cast<double>(std::numeric_limits<T>::max());
  // + 0.0: an integer has no negative zero (trunc(-0.5) is -0.0, which a later cast to float
  // would keep).
  for (double& v : data) v = std::isnan(v) ? 0.0 : std::clamp(std::trunc(v), lo, hi) + 0.0;
}

// Rounds every element to what its dtype can hold, as storing it would.
void roundToDType(RefTensor& t, bool float64) {
  switch (t.dtype) {
    case DType::F32:
      if (!float64) {
        for (double& v : t.data) v = static_cast<float>(v);
      }
      break;
    case DType::F64: break;
    case DType::I32: saturateAll<int32_t>(t.data); break;
    case DType::I64: saturateAll<int64_t>(t.data); break;
    case DType::U8: saturateAll<uint8_t>(t.data); break;
    case DType::I8: saturateAll<int8_t>(t.data); break;
    case DType::Bool:
      for (double& v : t.data) v = v != 0 ? 1.0 : 0.0;
      break;
  }
}

// Runs one op's reference kernel; outputs get the given types evaluated at `batch`.
std::vector<RefTensor> runKernel(Op op, const std::vector<const RefTensor*>& inputs, const AttrMap& attrs,
                                 const std::vector<TensorType>& outputTypes, int64_t batch, bool float64) {
  std::vector<RefTensor> outputs;
  outputs.reserve(outputTypes.size());
  for (const TensorType& type : outputTypes) {
    RefTensor t{type.dtype, evalShape(type.shape, batch), {}};
    t.data.assign(static_cast<size_t>(t.numel()), 0.0);
    outputs.push_back(std::move(t));
  }
  opInfo(op).reference(RefCall{op, inputs, attrs, outputs});
  for (RefTensor& t : outputs) roundToDType(t, float64);
  return outputs;
}

// Checks the inputs against the signature and returns the value of `batch`.
int64_t bindInputs(const Graph& graph, const std::vector<Value*>& signature, const std::vector<Tensor>& inputs) {
  if (inputs.size() != signature.size()) {
    std::vector<std::string> names;
    for (const Value* v : signature) names.push_back(v->name());
    fail("graph '{}' takes {} input(s) ({}), got {}", graph.name(), signature.size(), fmt::join(names, ", "),
         inputs.size());
  }
  std::optional<int64_t> batch;
  const Value* batchFrom = nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorType& want = signature[i]->type();
    const Tensor& got = inputs[i];
    const std::string& name = signature[i]->name();
    auto mismatch = [&] {
      fail("input '{}': expected {}, got {}{}", name, want.str(), dtypeName(got.dtype()),
           shapeStr(staticShape(got.shape())));
    };
    if (got.dtype() != want.dtype || got.shape().size() != want.rank()) mismatch();
    for (size_t d = 0; d < want.rank(); ++d) {
      Dim dim = want.shape[d];
      int64_t size = got.shape()[d];
      if (dim.isStatic()) {
        if (dim.value() != size) mismatch();
      } else if (!batch) {
        batch = size;
        batchFrom = signature[i];
      } else if (*batch != size) {
        fail("input '{}': expected {} with batch = {} (as input '{}' has it), got {}{}", name, want.str(), *batch,
             batchFrom->name(), dtypeName(got.dtype()), shapeStr(staticShape(got.shape())));
      }
    }
  }
  return batch.value_or(1);
}

}  // namespace

std::vector<Tensor> interpret(const Graph& graph, const std::vector<Tensor>& inputs,
                              const InterpreterOptions& options) {
  const Node* outputNode = graph.outputNode();
  if (!outputNode) fail("graph '{}' has no outputs", graph.name());
  std::vector<Value*> signature = graph.inputs();
  int64_t batch = bindInputs(graph, signature, inputs);
  const auto& nodes = graph.nodes();

  // Index of the last node reading each value; a value nobody reads dies where it is made.
  std::unordered_map<const Value*, size_t> lastUse;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t o = 0; o < nodes[i]->numOutputs(); ++o) lastUse[nodes[i]->output(o)] = i;
    for (const Value* v : nodes[i]->inputs()) lastUse[v] = i;
  }

  std::unordered_map<const Value*, RefTensor> env;
  auto lookup = [&](const Node& node, const Value* v) -> const RefTensor& {
    auto it = env.find(v);
    if (it == env.end()) {
      fail("interpreter: node '{}' reads '{}', which is not computed before it", node.name(), v ? v->name() : "?");
    }
    return it->second;
  };
  auto release = [&](size_t index) {
    const Node& node = *nodes[index];
    for (const Value* v : node.inputs()) {
      if (lastUse[v] == index) env.erase(v);
    }
    for (size_t o = 0; o < node.numOutputs(); ++o) {
      if (lastUse[node.output(o)] == index) env.erase(node.output(o));
    }
  };

  size_t nextInput = 0;
  std::vector<Tensor> results;
  for (size_t index = 0; index < nodes.size(); ++index) {
    const Node& node = *nodes[index];
    switch (node.kind()) {
      case NodeKind::Input: env[node.output()] = toRef(inputs[nextInput++]); break;
      case NodeKind::Param: env[node.output()] = toRef(node.paramData()); break;
      case NodeKind::Op: {
        std::vector<const RefTensor*> args;
        for (const Value* v : node.inputs()) args.push_back(&lookup(node, v));
        std::vector<TensorType> types;
        for (size_t o = 0; o < node.numOutputs(); ++o) types.push_back(node.output(o)->type());
        std::vector<RefTensor> outs;
        try {
          outs = runKernel(node.op(), args, node.attrs(), types, batch, options.float64);
        } catch (const Error& e) {
          fail("interpreter: node '{}' ({}): {}", node.name(), node.info().name, e.what());
        }
        if (options.onNode) {
          std::vector<Tensor> tensors;
          for (const RefTensor& t : outs) tensors.push_back(fromRef(t, options.float64));
          options.onNode(node, tensors);
        }
        for (size_t o = 0; o < outs.size(); ++o) env[node.output(o)] = std::move(outs[o]);
        break;
      }
      case NodeKind::Output:
        for (const Value* v : node.inputs()) results.push_back(fromRef(lookup(node, v), options.float64));
        break;
    }
    release(index);
  }
  return results;
}

std::map<std::string, Tensor> interpretNamed(const Graph& graph, const std::map<std::string, Tensor>& inputs,
                                             const InterpreterOptions& options) {
  std::vector<Value*> signature = graph.inputs();
  std::vector<Tensor> ordered;
  for (const Value* v : signature) {
    auto it = inputs.find(v->name());
    if (it == inputs.end()) fail("missing input '{}'", v->name());
    ordered.push_back(it->second);
  }
  for (const auto& [name, tensor] : inputs) {
    bool known = false;
    for (const Value* v : signature) known = known || v->name() == name;
    if (!known) {
      std::vector<std::string> names;
      for (const Value* v : signature) names.push_back(v->name());
      fail("unknown input '{}' (the graph's inputs are: {})", name, fmt::join(names, ", "));
    }
  }
  std::vector<Tensor> results = interpret(graph, ordered, options);
  std::map<std::string, Tensor> named;
  std::vector<std::pair<std::string, Value*>> outputs = graph.outputs();
  for (size_t i = 0; i < outputs.size(); ++i) named.emplace(outputs[i].first, std::move(results[i]));
  return named;
}

std::vector<Tensor> evaluateOp(Op op, const std::vector<Tensor>& inputs, const AttrMap& attrs, int numOutputs) {
  AttrMap complete = completeAttrs(opInfo(op), attrs);
  std::vector<TensorType> inputTypes;
  std::vector<RefTensor> refs;
  for (const Tensor& t : inputs) {
    inputTypes.push_back(t.type());
    refs.push_back(toRef(t));
  }
  std::vector<TensorType> outputTypes = inferOutputTypes(op, inputTypes, complete, numOutputs);
  std::vector<const RefTensor*> args;
  for (const RefTensor& r : refs) args.push_back(&r);
  std::vector<RefTensor> outs = runKernel(op, args, complete, outputTypes, 1, false);
  std::vector<Tensor> results;
  for (const RefTensor& r : outs) results.push_back(fromRef(r, false));
  return results;
}

}  // namespace policyc::ir
