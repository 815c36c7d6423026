// canonicalize: one form per idea, so later passes and the code generator match one pattern.
//
// Assumes: a verified graph with up-to-date types (run after infer-shapes).
// Guarantees: every value keeps its type and (up to float rounding of rewritten constants) its
// value; rewritten nodes carry the union of the provenance of the nodes they replace, in graph
// order. A pattern fires only when the values inside it have no users outside it. Rewrites, each
// with its counter:
//   gemm->linear      gemm(x, w, b) {alpha=1, beta=1 or no C, trans_a=0}: trans_b=1 uses w as is,
//                     trans_b=0 with a param B uses a transposed copy; a C that is not [N] must be a
//                     param that broadcasts along N ([1,N], [1], []) and becomes [N]
//   matmul->linear    matmul(x, W) with a param W [K,N] -> linear(x, W^T)
//   bias absorbed     add(linear(x, w), b) (either order) with a param b along N -> linear(x, w, b)
//   identities removed  identity and dropout
//   div->mul          div(x, param c) -> mul(x, 1/c) (float only; not when some 1/c is not a
//                     normal number of the dtype, where the product would round differently)
//   sub->add          sub(x, param c) -> add(x, -c) (float only)
//   unit products removed  mul(x, param 1) or mul(param 1, x), every element of the (float,
//                     not updatable) param exactly 1 and the product of x's type: x (x * 1 is x
//                     for every float, -0, infinities and NaN included; a div by 1 meets it as a
//                     mul by 1, an attention's scale of 1 for one)
//   reshapes collapsed  chains of flatten/reshape/squeeze/unsqueeze -> one reshape
//   no-op reshapes removed  flatten/reshape/squeeze/unsqueeze whose result has its operand's type
//   silu              x * sigmoid(x), either order
//   gelu              x * 0.5 * (1 + erf(x / sqrt(2))) in any association/order of the products,
//                     also with x * 0.70710677 in place of x / 1.4142135
//   hard_swish        x * hard_sigmoid(x) {alpha=1/6, beta=0.5}, either order
//   layer_norm        (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) over the last axis,
//                     optionally * gamma and + beta (params along the last axis)
//   clip->relu        clip {min=0, max=inf}
//   whole slices removed  slice with unit steps whose result has its operand's type (it takes
//                     every element, as an unrolled recurrent layer's step 0 of 1 does)
//   unit transposes->reshape  transpose that keeps the order of every dim but those of size 1
//                     (moving a unit axis moves no data) -> reshape, which the rules above meet
//   unit gathers->squeeze  gather(x, scalar param 0 or -1, axis a) where x's dim a is 1 ->
//                     squeeze(x, a), which the reshape rules then meet (an exporter's h[0])
//   conv1d->conv2d    conv(x [N,C,L], param W [M,C,K], b?) {group=1} -> squeeze(conv(unsqueeze(x, 2),
//                     W as [M,C,1,K], b) {kernel [1,K], strides [1,s], pads [0,p0,0,p1], dilations
//                     [1,d]}, 2): one form of convolution, the 2-D one the code generator packs
//                     and runs as GEMM microkernels or oneDNN (a 1-D one ran as scalar loops)
// Adds params (restoring topological order at the end); leaves replaced params for dce.
#include <cmath>
#include <limits>
#include <unordered_set>

#include "rewrite.h"

namespace policyc::passes {
namespace {

using namespace detail;
using ir::DType;
using ir::Dim;
using ir::Graph;

class Canonicalizer {
 public:
  Canonicalizer(Graph& graph, PassStats& stats) : graph_(graph), stats_(stats) {}

  // Sweeps the graph until no pattern fires.
  void run() {
    for (int sweep = 0; sweep < 100; ++sweep) {
      bool changed = false;
      std::vector<Node*> snapshot;
      for (const auto& n : graph_.nodes()) {
        if (n->isOp()) snapshot.push_back(n.get());
      }
      erased_.clear();
      for (Node* n : snapshot) {
        if (erased_.count(n)) continue;
        if (rewrite(n)) changed = true;
      }
      if (!changed) break;
    }
    restoreTopologicalOrder(graph_);
  }

 private:
  bool rewrite(Node* n) {
    switch (n->op()) {
      case Op::Gemm: return gemmToLinear(n);
      case Op::MatMul: return matmulToLinear(n);
      case Op::Add: return absorbBias(n);
      case Op::Identity:
      case Op::Dropout: return removeIdentity(n);
      case Op::Div: return layerNorm(n) || divToMul(n);
      case Op::Sub: return subToAdd(n);
      case Op::Mul: return unitProduct(n) || silu(n) || hardSwish(n) || gelu(n);
      case Op::Flatten:
      case Op::Reshape:
      case Op::Squeeze:
      case Op::Unsqueeze: return collapseReshapes(n);
      case Op::Clip: return clipToRelu(n);
      case Op::Slice: return removeWholeSlice(n);
      case Op::Gather: return unitGatherToSqueeze(n);
      case Op::Transpose: return unitTransposeToReshape(n);
      case Op::Conv: return conv1dToConv2d(n);
      default: return false;
    }
  }

  // ---- helpers

  void erase(const std::vector<Node*>& nodes) {
    for (Node* n : nodes) erased_.insert(n);
    eraseUnused(graph_, nodes);
  }

  // Replaces `root` (and the pattern `nodes`, root first) by one op; provenance is their union.
  bool replace(Node* root, std::vector<Node*> nodes, Op op, std::vector<Value*> inputs, ir::AttrMap attrs,
               std::string_view counter, Node* nameFrom = nullptr) {
    std::vector<const Node*> cnodes(nodes.begin(), nodes.end());
    Node* node = replaceOp(graph_, root, op, std::move(inputs), std::move(attrs), unionProvenance(graph_, cnodes),
                           nameFrom);
    if (!node) return false;
    erase(nodes);
    stats_.add(counter);
    return true;
  }

  // Removes `n`, its users reading `by` instead (a value of n's output's type).
  bool bypass(Node* n, Value* by, std::string_view counter) {
    graph_.replaceAllUsesWith(n->output(), by);
    erase({n});
    stats_.add(counter);
    return true;
  }

  static bool isFloatValue(const Value* v) { return ir::isFloat(v->type().dtype); }

  // ---- linear layers

  bool gemmToLinear(Node* n) {
    if (n->attrFloat("alpha") != 1.0 || n->attrInt("trans_a") != 0) return false;
    bool hasC = n->numInputs() == 3;
    if (hasC && n->attrFloat("beta") != 1.0) return false;
    Value* x = n->input(0);
    Value* b = n->input(1);
    if (!isFloatValue(x)) return false;
    Dim outN = n->output()->type().shape[1];
    Node* bParam = paramNode(b);
    bool transB = n->attrInt("trans_b") != 0;
    if (!transB && !bParam) return false;
    // The bias: a [N] value as is, or a param broadcasting along N.
    Value* bias = nullptr;
    std::optional<Moved> biasRow;
    Node* cParam = nullptr;
    if (hasC) {
      Value* c = n->input(2);
      if (c->type().shape == ir::Shape{outN}) {
        bias = c;
      } else {
        cParam = paramNode(c);
        if (!cParam || outN.isBatch() || c->type().dtype != x->type().dtype) return false;
        biasRow = channelRow(cParam, 2, 1, outN.value());
        if (!biasRow) return false;
      }
    }
    Value* w = b;
    if (!transB) w = addParam(graph_, b->name() + ".T", moveParam(bParam, transpose2d), bParam->provenance());
    if (biasRow) bias = addParam(graph_, cParam->name() + ".row", std::move(*biasRow), cParam->provenance());
    std::vector<Value*> inputs{x, w};
    if (bias) inputs.push_back(bias);
    return replace(n, {n}, Op::Linear, inputs, {}, "gemm->linear");
  }

  bool matmulToLinear(Node* n) {
    Value* x = n->input(0);
    Node* wParam = paramNode(n->input(1));
    if (!wParam || !isFloatValue(x) || wParam->output()->type().rank() != 2 || x->type().rank() < 1) return false;
    // x [..., K] . W [K, N] is linear(x, W^T) for any rank of x ([K] gives [N] either way).
    Value* w = addParam(graph_, wParam->name() + ".T", moveParam(wParam, transpose2d), wParam->provenance());
    return replace(n, {n}, Op::Linear, {x, w}, {}, "matmul->linear");
  }

  bool absorbBias(Node* n) {
    for (int side = 0; side < 2; ++side) {
      Node* lin = producerOp(n->input(side), Op::Linear);
      Node* bParam = paramNode(n->input(1 - side));
      if (!lin || !bParam || lin->numInputs() != 2 || !onlyUsedBy(graph_, lin->output(), n)) continue;
      const ir::TensorType& y = lin->output()->type();
      Dim outN = y.shape.back();
      if (outN.isBatch() || bParam->output()->type().dtype != y.dtype) continue;
      std::optional<Moved> row = channelRow(bParam, y.rank(), y.rank() - 1, outN.value());
      if (!row) continue;
      Value* bias = bParam->output();
      if (bParam->output()->type().shape != ir::Shape{outN}) {
        bias = addParam(graph_, bParam->name() + ".row", std::move(*row), bParam->provenance());
      }
      if (replace(n, {n, lin}, Op::Linear, {lin->input(0), lin->input(1), bias}, {}, "bias absorbed", lin)) return true;
    }
    return false;
  }

  // ---- no-ops and constant operands

  bool removeIdentity(Node* n) { return bypass(n, n->input(0), "identities removed"); }

  bool divToMul(Node* n) {
    Node* c = paramNode(n->input(1));
    // An updatable divisor stays a division: its reciprocal would be computed from values that change.
    if (!c || c->isUpdatable() || !isFloatValue(n->input(0)) || !isFloatValue(c->output())) return false;
    std::vector<double> values = toDoubles(c->paramData());
    double largest = std::numeric_limits<float>::max();
    double smallest = std::numeric_limits<float>::min();
    if (c->paramData().dtype() == DType::F64) {
      largest = std::numeric_limits<double>::max();
      smallest = std::numeric_limits<double>::min();
    }
    for (double& v : values) {
      // x / c and x * (1/c) agree to rounding only while 1/c is a normal number; a tiny or huge c
      // (or one whose reciprocal overflows) stays a division. 1/0 = inf and NaN behave alike.
      double r = 1.0 / v;
      if (std::isfinite(r) && r != 0 && (std::abs(r) > largest || std::abs(r) < smallest)) return false;
      v = r;
    }
    Value* recip =
        addParam(graph_, c->name() + ".recip", fromDoubles(c->paramData().dtype(), c->paramData().shape(), values),
                 c->provenance());
    return replace(n, {n}, Op::Mul, {n->input(0), recip}, {}, "div->mul");
  }

  bool unitProduct(Node* n) {
    for (int side = 0; side < 2; ++side) {
      Node* c = paramNode(n->input(static_cast<size_t>(side)));
      Value* x = n->input(static_cast<size_t>(1 - side));
      if (!c || c->isUpdatable() || !isFloatValue(c->output()) || x->type() != n->output()->type()) continue;
      const std::vector<double> values = toDoubles(c->paramData());
      if (std::any_of(values.begin(), values.end(), [](double v) { return v != 1.0; })) continue;
      return bypass(n, x, "unit products removed");
    }
    return false;
  }

  bool subToAdd(Node* n) {
    Node* c = paramNode(n->input(1));
    if (!c || c->isUpdatable() || !isFloatValue(n->input(0)) || !isFloatValue(c->output())) return false;
    std::vector<double> values = toDoubles(c->paramData());
    for (double& v : values) v = -v;
    Value* neg = addParam(graph_, c->name() + ".neg",
                          fromDoubles(c->paramData().dtype(), c->paramData().shape(), values), c->provenance());
    return replace(n, {n}, Op::Add, {n->input(0), neg}, {}, "sub->add");
  }

  static bool isReshapeLike(const Node* n) {
    return n && (n->isOp(Op::Flatten) || n->isOp(Op::Reshape) || n->isOp(Op::Squeeze) || n->isOp(Op::Unsqueeze));
  }

  // The reshape {shape} attribute that relabels `in` as `out` (same elements): batch stays 0 when
  // it keeps its position, -1 otherwise; nullopt for shapes with zero-size dims.
  static std::optional<std::vector<int64_t>> reshapeTarget(const ir::Shape& in, const ir::Shape& out) {
    std::vector<int64_t> target;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].isBatch()) {
        target.push_back(i < in.size() && in[i].isBatch() ? 0 : -1);
      } else if (out[i].value() == 0) {
        return std::nullopt;
      } else {
        target.push_back(out[i].value());
      }
    }
    return target;
  }

  bool removeWholeSlice(Node* n) {
    const std::vector<int64_t>& steps = n->attrInts("steps");
    if (n->output()->type() != n->input(0)->type()) return false;
    if (std::any_of(steps.begin(), steps.end(), [](int64_t s) { return s != 1; })) return false;  // a reversal keeps the type
    return bypass(n, n->input(0), "whole slices removed");
  }

  bool unitTransposeToReshape(Node* n) {
    const ir::Shape& in = n->input(0)->type().shape;
    std::vector<int64_t> perm = n->attrInts("perm");
    if (perm.empty()) {
      for (size_t i = in.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    }
    int64_t last = -1;
    for (int64_t axis : perm) {
      if (axis < 0 || axis >= static_cast<int64_t>(in.size())) return false;
      if (in[static_cast<size_t>(axis)] == Dim(1)) continue;
      if (axis < last) return false;  // two dims of other sizes swap: data moves
      last = axis;
    }
    auto target = reshapeTarget(in, n->output()->type().shape);
    if (!target) return false;
    return replace(n, {n}, Op::Reshape, {n->input(0)}, {{"shape", *target}}, "unit transposes->reshape");
  }

  bool unitGatherToSqueeze(Node* n) {
    const Value* indices = n->input(1);
    std::optional<double> index = scalarParam(indices);
    if (!index || indices->type().rank() != 0 || (*index != 0 && *index != -1)) return false;
    const ir::Shape& shape = n->input(0)->type().shape;
    const auto rank = static_cast<int64_t>(shape.size());
    int64_t axis = n->attrInt("axis");
    if (axis < -rank || axis >= rank) return false;
    if (axis < 0) axis += rank;
    if (shape[static_cast<size_t>(axis)] != Dim(1)) return false;
    return replace(n, {n}, Op::Squeeze, {n->input(0)}, {{"axes", std::vector<int64_t>{axis}}}, "unit gathers->squeeze");
  }

  bool conv1dToConv2d(Node* n) {
    Value* x = n->input(0);
    Node* wParam = paramNode(n->input(1));
    const ir::TensorType& w = n->input(1)->type();
    if (!wParam || x->type().rank() != 3 || w.rank() != 3 || n->attrInt("group") != 1 || !isFloatValue(x)) return false;
    const ir::AttrMap& a = n->attrs();
    const std::vector<int64_t> strides = ir::windowAttr(a, "strides", 1, 1), dilations = ir::windowAttr(a, "dilations", 1, 1),
                               pads = ir::windowAttr(a, "pads", 2, 0), kernel = ir::windowAttr(a, "kernel_shape", 1, w.shape[2].value());
    if (strides.size() != 1 || dilations.size() != 1 || pads.size() != 2 || kernel.size() != 1) return false;
    Value* x4 = graph_.addOp(Op::Unsqueeze, {x}, {{"axes", std::vector<int64_t>{2}}}, {graph_.uniqueName(x->name() + ".2d")},
                             {}, n->provenance(), n)->output();
    Value* w4 = addParam(graph_, wParam->name() + ".2d", moveParam(wParam, [](const Tensor& t) {
                           return Tensor::fromBytes(t.dtype(), {t.shape()[0], t.shape()[1], 1, t.shape()[2]}, t.bytes(), t.nbytes());
                         }), wParam->provenance());
    std::vector<Value*> inputs{x4, w4};
    if (n->numInputs() == 3) inputs.push_back(n->input(2));
    ir::AttrMap attrs{{"kernel_shape", std::vector<int64_t>{1, kernel[0]}},
                      {"strides", std::vector<int64_t>{1, strides[0]}},
                      {"pads", std::vector<int64_t>{0, pads[0], 0, pads[1]}},
                      {"dilations", std::vector<int64_t>{1, dilations[0]}}};
    Node* conv = graph_.addOp(Op::Conv, std::move(inputs), std::move(attrs), {graph_.uniqueName(n->output()->name() + ".2d")},
                              {}, n->provenance(), n);
    return replace(n, {n}, Op::Squeeze, {conv->output()}, {{"axes", std::vector<int64_t>{2}}}, "conv1d->conv2d");
  }

  bool collapseReshapes(Node* n) {
    if (n->output()->type() == n->input(0)->type()) return bypass(n, n->input(0), "no-op reshapes removed");
    Node* p = n->input(0)->producer();
    if (!isReshapeLike(p) || !onlyUsedBy(graph_, p->output(), n)) return false;
    Value* x = p->input(0);
    auto target = reshapeTarget(x->type().shape, n->output()->type().shape);
    if (!target) return false;
    return replace(n, {n, p}, Op::Reshape, {x}, {{"shape", *target}}, "reshapes collapsed");
  }

  bool clipToRelu(Node* n) {
    if (n->attrFloat("min") != 0.0 || n->attrFloat("max") != std::numeric_limits<double>::infinity()) return false;
    return replace(n, {n}, Op::Relu, {n->input(0)}, {}, "clip->relu");
  }

  // ---- activations

  // mul(x, act(x)) in either order, with act's result used only by the mul.
  Node* gatedBy(Node* mul, Op act, Value** x) {
    for (int side = 0; side < 2; ++side) {
      Node* a = producerOp(mul->input(side), act);
      if (a && a->input(0) == mul->input(1 - side) && onlyUsedBy(graph_, a->output(), mul)) {
        *x = mul->input(1 - side);
        return a;
      }
    }
    return nullptr;
  }

  bool silu(Node* n) {
    Value* x = nullptr;
    Node* s = gatedBy(n, Op::Sigmoid, &x);
    if (!s || !isFloatValue(x)) return false;
    return replace(n, {n, s}, Op::Silu, {x}, {}, "silu");
  }

  bool hardSwish(Node* n) {
    Value* x = nullptr;
    Node* h = gatedBy(n, Op::HardSigmoid, &x);
    if (!h || !isFloatValue(x)) return false;
    if (std::abs(h->attrFloat("alpha") - 1.0 / 6.0) > 1e-6 || h->attrFloat("beta") != 0.5) return false;
    return replace(n, {n, h}, Op::HardSwish, {x}, {}, "hard_swish");
  }

  // x * 0.5 * (1 + erf(x / sqrt(2))): the root mul and one inner mul give three factors.
  bool gelu(Node* n) {
    std::vector<Value*> factors;
    std::vector<Node*> muls{n};
    for (int side = 0; side < 2; ++side) {
      Value* operand = n->input(side);
      Node* inner = producerOp(operand, Op::Mul);
      if (inner && muls.size() == 1 && onlyUsedBy(graph_, operand, n)) {
        muls.push_back(inner);
        factors.push_back(inner->input(0));
        factors.push_back(inner->input(1));
      } else {
        factors.push_back(operand);
      }
    }
    if (factors.size() != 3) return false;
    // Which factor is 0.5, which is 1 + erf(...), and the rest is x.
    for (size_t half = 0; half < 3; ++half) {
      if (!isScalarParam(factors[half], 0.5)) continue;
      for (size_t sum = 0; sum < 3; ++sum) {
        if (sum == half) continue;
        Value* x = factors[3 - half - sum];
        std::vector<Node*> pattern = matchOnePlusErf(factors[sum], x, muls);
        if (pattern.empty() || !isFloatValue(x)) continue;
        std::vector<Node*> nodes = muls;
        nodes.insert(nodes.end(), pattern.begin(), pattern.end());
        if (replace(n, nodes, Op::Gelu, {x}, {}, "gelu")) return true;
      }
    }
    return false;
  }

  // Matches 1 + erf(x / sqrt(2)) (or x * (1/sqrt(2)), any operand order) computed only for the
  // muls of a gelu; returns the add, erf and scaling nodes, in that order, or nothing.
  std::vector<Node*> matchOnePlusErf(Value* sum, Value* x, const std::vector<Node*>& muls) {
    Node* add = producerOp(sum, Op::Add);
    if (!add) return {};
    std::vector<Node*> users = graph_.users(sum);
    if (users.size() != 1 || std::find(muls.begin(), muls.end(), users.front()) == muls.end()) return {};
    for (int side = 0; side < 2; ++side) {
      Node* erf = producerOp(add->input(side), Op::Erf);
      if (!erf || !isScalarParam(add->input(1 - side), 1.0) || !onlyUsedBy(graph_, erf->output(), add)) continue;
      Value* scaled = erf->input(0);
      if (!onlyUsedBy(graph_, scaled, erf)) continue;
      constexpr double kTol = 1e-6;
      if (Node* div = producerOp(scaled, Op::Div)) {
        if (div->input(0) == x && isScalarParam(div->input(1), std::sqrt(2.0), kTol)) return {add, erf, div};
      }
      if (Node* mul = producerOp(scaled, Op::Mul)) {
        for (int s = 0; s < 2; ++s) {
          if (mul->input(s) == x && isScalarParam(mul->input(1 - s), std::sqrt(0.5), kTol)) return {add, erf, mul};
        }
      }
    }
    return {};
  }

  // ---- layer norm

  // A reduce_mean over the last axis only, keeping dims.
  static bool isLastAxisMean(const Node* n) {
    if (!n || !n->isOp(Op::ReduceMean) || n->attrInt("keepdims") != 1) return false;
    const std::vector<int64_t>& axes = n->attrInts("axes");
    auto rank = static_cast<int64_t>(n->input(0)->type().rank());
    return rank >= 1 && axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
  }

  // Rooted at the div: (x - mean) / sqrt(var + eps), then the optional affine tail.
  bool layerNorm(Node* div) {
    Value* centered = div->input(0);
    Node* sub = producerOp(centered, Op::Sub);
    Node* sqrt = producerOp(div->input(1), Op::Sqrt);
    if (!sub || !sqrt || !onlyUsedBy(graph_, sqrt->output(), div)) return false;
    Value* x = sub->input(0);
    Node* mean = producerOp(sub->input(1), Op::ReduceMean);
    if (!isLastAxisMean(mean) || mean->input(0) != x || !onlyUsedBy(graph_, mean->output(), sub)) return false;
    const ir::TensorType& xt = x->type();
    if (!ir::isFloat(xt.dtype) || xt.rank() < 1 || xt.shape.back().isBatch()) return false;
    int64_t channels = xt.shape.back().value();
    Node* addEps = producerOp(sqrt->input(0), Op::Add);
    if (!addEps || !onlyUsedBy(graph_, addEps->output(), sqrt)) return false;
    Node* var = nullptr;
    std::optional<double> eps;
    for (int side = 0; side < 2; ++side) {
      Node* v = producerOp(addEps->input(side), Op::ReduceMean);
      std::optional<double> e = scalarParam(addEps->input(1 - side));
      if (v && e) {
        var = v;
        eps = e;
      }
    }
    if (!isLastAxisMean(var) || !onlyUsedBy(graph_, var->output(), addEps) || *eps < 0) return false;
    Node* pow = producerOp(var->input(0), Op::Pow);
    if (!pow || pow->input(0) != centered || !isScalarParam(pow->input(1), 2.0) ||
        !onlyUsedBy(graph_, pow->output(), var)) {
      return false;
    }
    std::vector<Node*> users = graph_.users(centered);
    if (users.size() != 2 || std::find(users.begin(), users.end(), pow) == users.end() ||
        std::find(users.begin(), users.end(), div) == users.end()) {
      return false;
    }

    // The optional tail: * gamma, then + beta (params along the last axis, in either order).
    std::vector<Node*> nodes{div, sqrt, addEps, var, pow, sub, mean};
    Node* root = div;
    Node* gamma = nullptr;
    Node* beta = nullptr;
    std::optional<Moved> gammaRow, betaRow;
    auto affine = [&](Op op, Node** param, std::optional<Moved>* row) {
      std::vector<Node*> next = graph_.users(root->output());
      if (next.size() != 1 || !next.front()->isOp(op)) return;
      Node* user = next.front();
      for (int side = 0; side < 2; ++side) {
        Node* p = paramNode(user->input(1 - side));
        if (user->input(side) != root->output() || !p || p->output()->type().dtype != xt.dtype) continue;
        std::optional<Moved> r = channelRow(p, xt.rank(), xt.rank() - 1, channels);
        if (!r) continue;
        *param = p;
        *row = std::move(r);
        nodes.insert(nodes.begin(), user);
        root = user;
        return;
      }
    };
    affine(Op::Mul, &gamma, &gammaRow);
    affine(Op::Add, &beta, &betaRow);

    auto vectorParam = [&](Node* p, std::optional<Moved>& row) -> Value* {
      if (p->output()->type().shape == ir::Shape{Dim(channels)}) return p->output();
      return addParam(graph_, p->name() + ".row", std::move(*row), p->provenance());
    };
    Value* scale = gamma ? vectorParam(gamma, gammaRow)
                         : addParam(graph_, x->name() + ".ln_scale",
                                    fromDoubles(xt.dtype, {channels}, std::vector<double>(channels, 1.0)), {});
    std::vector<Value*> inputs{x, scale};
    if (beta) inputs.push_back(vectorParam(beta, betaRow));
    ir::AttrMap attrs{{"axis", int64_t{-1}}, {"epsilon", *eps}};
    return replace(root, nodes, Op::LayerNorm, inputs, attrs, "layer_norm");
  }

  Graph& graph_;
  PassStats& stats_;
  std::unordered_set<const Node*> erased_;
};

}  // namespace

PassStats canonicalize(ir::Graph& graph) {
  PassStats stats;
  Canonicalizer(graph, stats).run();
  return stats;
}

}  // namespace policyc::passes
