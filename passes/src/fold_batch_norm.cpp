// fold-batch-norm: folds inference-time normalisation and per-channel affine ops into the conv or
// linear layer that feeds them.
//
// Assumes: a verified graph; run after canonicalize (dense layers are `linear`, div by a constant
// is mul, sub of a constant is add).
// Guarantees: for a conv or linear `y = layer(x, W, b?)` with param W (and param b, if any) whose
// result is read only by
//   batch_norm(y, scale, B, mean, var) with param statistics ("folded"; for linear only when y is
//       [rows, N], where batch_norm's channel axis is the layer's output axis),
//   mul(y, s) or mul(s, y) with a param s that is per output channel ("scales folded"), or
//   add(y, t) or add(t, y) with a param t that is per output channel ("shifts folded"),
// the pair becomes one layer with W'[o] = W[o] * s[o] and b'[o] = b[o] * s[o] + t[o] (computed in
// double, rounded once to the weights' dtype; a missing bias becomes one). Per output channel
// means broadcasting along the layer's channel axis only: [N] (or [1,..,N]) for linear, [C,1,1]
// or [1,C,1,1] for a 2-D conv; a one-element param scales every channel alike. Nothing fires when
// y has other users or the operand is not a param of that form, nor when any param involved is
// updatable (its values change at run time: the fold would go stale). The new layer keeps the layer's
// name and unites both nodes' provenance; the new weight params unite the provenance of every
// param folded into them. Adds params (restoring topological order at the end); leaves the old
// ones for dce.
#include <cmath>

#include "rewrite.h"

namespace policyc::passes {
namespace {

using namespace detail;

// A conv or linear with constant weights whose result only `user` reads.
Node* foldableLayer(const ir::Graph& graph, const Value* y, const Node* user) {
  Node* layer = y->producer();
  if (!layer || !(layer->isOp(Op::Conv) || layer->isOp(Op::Linear))) return nullptr;
  if (!ir::isFloat(y->type().dtype) || !isParam(layer->input(1))) return nullptr;
  if (layer->numInputs() == 3 && !isParam(layer->input(2))) return nullptr;
  if (!onlyUsedBy(graph, y, user)) return nullptr;
  return layer;
}

// The layer's output-channel axis in its result and the number of channels.
size_t channelAxis(const Node* layer) {
  return layer->isOp(Op::Conv) ? 1 : layer->output()->type().rank() - 1;
}
int64_t channelCount(const Node* layer) { return layer->input(1)->type().shape[0].value(); }

class BatchNormFolder {
 public:
  BatchNormFolder(ir::Graph& graph, PassStats& stats) : graph_(graph), stats_(stats) {}

  void run() {
    for (const char* counter : {"folded", "scales folded", "shifts folded"}) stats_.add(counter, 0);
    for (bool changed = true; changed;) {
      changed = false;
      std::vector<Node*> ops;
      for (const auto& n : graph_.nodes()) {
        if (n->isOp(Op::BatchNorm) || n->isOp(Op::Mul) || n->isOp(Op::Add)) ops.push_back(n.get());
      }
      for (Node* n : ops) {
        if (tryFold(n)) {
          changed = true;
          break;  // the node list changed; look again
        }
      }
    }
    restoreTopologicalOrder(graph_);
  }

 private:
  bool tryFold(Node* n) {
    if (n->isOp(Op::BatchNorm)) return foldBatchNorm(n);
    for (int side = 0; side < 2; ++side) {
      Node* layer = foldableLayer(graph_, n->input(side), n);
      Node* param = paramNode(n->input(1 - side));
      if (!layer || !param || param->output()->type().dtype != n->output()->type().dtype) continue;
      int64_t channels = channelCount(layer);
      size_t rank = layer->output()->type().rank();
      auto values = perChannel(param->paramData(), rank, channelAxis(layer), channels);
      if (!values) continue;
      bool isScale = n->isOp(Op::Mul);
      std::vector<double> scale = isScale ? *values : std::vector<double>(channels, 1.0);
      std::vector<double> shift = isScale ? std::vector<double>(channels, 0.0) : *values;
      if (fold(layer, n, scale, shift, {param}, isScale ? "scales folded" : "shifts folded")) return true;
    }
    return false;
  }

  bool foldBatchNorm(Node* bn) {
    Node* layer = foldableLayer(graph_, bn->input(0), bn);
    if (!layer) return false;
    // batch_norm normalises axis 1: a linear's output axis only when its result is 2-D.
    if (channelAxis(layer) != 1) return false;
    std::vector<const Node*> params;
    std::vector<std::vector<double>> stats;
    for (size_t i = 1; i < 5; ++i) {
      Node* p = paramNode(bn->input(i));
      if (!p) return false;
      params.push_back(p);
      stats.push_back(toDoubles(p->paramData()));
    }
    double epsilon = bn->attrFloat("epsilon");
    int64_t channels = channelCount(layer);
    std::vector<double> scale(channels), shift(channels);
    for (int64_t c = 0; c < channels; ++c) {
      // y = (x - mean) / sqrt(var + eps) * gamma + beta
      scale[c] = stats[0][c] / std::sqrt(stats[3][c] + epsilon);
      shift[c] = stats[1][c] - stats[2][c] * scale[c];
    }
    return fold(layer, bn, scale, shift, params, "folded");
  }

  // Replaces layer -> op by one layer computing op(layer(x)) = layer(x) * scale + shift per channel.
  bool fold(Node* layer, Node* op, const std::vector<double>& scale, const std::vector<double>& shift,
            const std::vector<const Node*>& foldedParams, std::string_view counter) {
    Node* wNode = paramNode(layer->input(1));
    // Updatable weights change at run time: the folded product would go stale. Such a layer keeps
    // its normalisation (a per-channel scale and shift its epilogue applies).
    bool updatable = wNode->isUpdatable() || (layer->numInputs() == 3 && isUpdatable(layer->input(2)));
    for (const Node* p : foldedParams) updatable = updatable || p->isUpdatable();
    if (updatable) return false;
    const Tensor& w = wNode->paramData();
    int64_t channels = channelCount(layer);
    int64_t perChannelSize = w.numel() / std::max<int64_t>(channels, 1);
    bool scales = std::any_of(scale.begin(), scale.end(), [](double s) { return s != 1.0; });

    std::vector<std::string> paramProvenance;
    for (const Node* p : foldedParams) appendProvenance(paramProvenance, p->provenance());

    Value* newW = layer->input(1);
    if (scales) {
      std::vector<double> values = toDoubles(w);
      for (int64_t c = 0; c < channels; ++c) {
        for (int64_t i = 0; i < perChannelSize; ++i) values[c * perChannelSize + i] *= scale[c];
      }
      std::vector<std::string> provenance = wNode->provenance();
      appendProvenance(provenance, paramProvenance);
      newW = addParam(graph_, baseName(wNode->name()) + ".folded", fromDoubles(w.dtype(), w.shape(), values),
                      provenance);
    }
    std::vector<double> bias(channels, 0.0);
    std::vector<std::string> biasProvenance;
    std::string biasBase = baseName(wNode->name()) + ".bias.folded";
    if (layer->numInputs() == 3) {
      Node* bNode = paramNode(layer->input(2));
      bias = toDoubles(bNode->paramData());
      biasProvenance = bNode->provenance();
      biasBase = baseName(bNode->name()) + ".folded";
    }
    for (int64_t c = 0; c < channels; ++c) bias[c] = bias[c] * scale[c] + shift[c];
    appendProvenance(biasProvenance, paramProvenance);
    Value* newB = addParam(graph_, biasBase, fromDoubles(w.dtype(), {channels}, bias), biasProvenance);

    std::vector<const Node*> replaced{layer, op};
    Node* node = replaceOp(graph_, op, layer->op(), {layer->input(0), newW, newB}, layer->attrs(),
                           unionProvenance(graph_, replaced), layer);
    if (!node) return false;
    eraseUnused(graph_, {op, layer});
    stats_.add(counter);
    return true;
  }

  // "w.folded" folded again is named "w.folded" (made unique), not "w.folded.folded".
  static std::string baseName(const std::string& name) {
    constexpr std::string_view kSuffix = ".folded";
    std::string base = name;
    if (size_t at = base.rfind(kSuffix); at != std::string::npos) base.erase(at);
    return base;
  }

  ir::Graph& graph_;
  PassStats& stats_;
};

}  // namespace

PassStats foldBatchNorm(ir::Graph& graph) {
  PassStats stats;
  BatchNormFolder(graph, stats).run();
  return stats;
}

}  // namespace policyc::passes
