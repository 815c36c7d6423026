// ONNX Einsum as IR ops: labels summed out where only one operand has them, then operands contracted
// pairwise, each pair one batched matmul between transposes and reshapes ("bihd,bjhd->bhij" is
// attention's q.k: a transpose of each side and a matmul over [b,h]).
#include <algorithm>
#include <map>

#include "onnx_ops.h"

namespace policyc::frontend {
namespace {

using ir::Op;

// An operand as the contraction sees it: a value and the label of each of its dims.
struct Term {
  ImportedValue value;
  std::string labels;
};

class Einsum {
 public:
  explicit Einsum(NodeContext& ctx) : ctx_(ctx), c_(ctx) {}

  void convert() {
    parse(*ctx_.attrString("equation"));
    std::vector<Term> terms;
    for (size_t i = 0; i < inputs_.size(); ++i) terms.push_back(diagonal({ctx_.input(i), inputs_[i]}));
    // Sum out, in each operand, the labels no other operand and not the output has.
    for (size_t i = 0; i < terms.size(); ++i) {
      std::string others = output_;
      for (size_t j = 0; j < terms.size(); ++j) {
        if (j != i) others += terms[j].labels;
      }
      terms[i] = sumOut(terms[i], others);
    }
    while (terms.size() > 1) {
      std::string keep = output_;
      for (size_t j = 2; j < terms.size(); ++j) keep += terms[j].labels;
      Term pair = contract(sumOut(terms[0], terms[1].labels + keep), sumOut(terms[1], terms[0].labels + keep), keep);
      terms.erase(terms.begin(), terms.begin() + 2);
      terms.insert(terms.begin(), std::move(pair));
    }
    Term last = sumOut(terms.front(), output_);
    std::vector<int64_t> perm;
    for (char l : output_) perm.push_back(static_cast<int64_t>(last.labels.find(l)));
    c_.result(Op::Transpose, {last.value}, {{"perm", perm}});
  }

 private:
  // Reads the equation; "..." becomes one label per dim it covers (digits, right-aligned across
  // operands, so that they broadcast as ONNX says), and an implicit output is every label that
  // occurs once, in alphabetical order after the ellipsis dims.
  void parse(std::string eq) {
    eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
    const size_t arrow = eq.find("->");
    const std::string lhs = eq.substr(0, arrow);
    std::vector<std::string> raw;
    for (size_t start = 0;;) {
      const size_t comma = lhs.find(',', start);
      raw.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (raw.size() != ctx_.numInputs()) {
      ctx_.fail("equation '{}' has {} operands, the node {} inputs", eq, raw.size(), ctx_.numInputs());
    }
    size_t ellipsis = 0;
    for (size_t i = 0; i < raw.size(); ++i) {
      const size_t rank = ctx_.inputType(i).rank();
      const size_t dots = raw[i].find("...");
      std::string letters = raw[i];
      if (dots != std::string::npos) letters.erase(dots, 3);
      check(letters, eq);
      if (dots == std::string::npos) {
        if (letters.size() != rank) ctx_.fail("operand {} '{}' of equation '{}' names {} dims, its input has {}", i, raw[i], eq, letters.size(), rank);
        inputs_.push_back(letters);
        continue;
      }
      if (letters.size() > rank) ctx_.fail("operand {} '{}' of equation '{}' names more dims than its input's {}", i, raw[i], eq, rank);
      const size_t n = rank - letters.size();
      if (n > 10) ctx_.fail("'...' in operand {} stands for {} dims; at most 10 are supported", i, n);
      ellipsis = std::max(ellipsis, n);
      inputs_.push_back(letters.substr(0, dots) + ellipsisLabels(n) + letters.substr(dots));
    }
    if (arrow != std::string::npos) {
      std::string rhs = eq.substr(arrow + 2);
      const size_t dots = rhs.find("...");
      if (dots != std::string::npos) rhs.replace(dots, 3, ellipsisLabels(ellipsis));
      check(dots == std::string::npos ? rhs : eq.substr(arrow + 2).erase(dots, 3), eq);
      output_ = rhs;
    } else {
      std::map<char, int> count;
      for (const std::string& t : inputs_) {
        for (char l : t) ++count[l];
      }
      output_ = ellipsisLabels(ellipsis);
      for (auto [l, n] : count) {
        if (n == 1 && std::isalpha(static_cast<unsigned char>(l))) output_ += l;
      }
    }
    for (size_t i = 0; i < output_.size(); ++i) {
      const char l = output_[i];
      if (output_.find(l, i + 1) != std::string::npos) ctx_.fail("label '{}' appears twice in the output of '{}'", l, eq);
      if (std::none_of(inputs_.begin(), inputs_.end(), [&](const std::string& t) { return t.find(l) != std::string::npos; })) {
        ctx_.fail("output label '{}' of '{}' is in no operand", l, eq);
      }
    }
  }

  // `t` with each label it repeats taken once: the diagonal, as a product with an identity matrix
  // summed over the second occurrence ("ii->i").
  Term diagonal(Term t) {
    for (size_t p = 0; p < t.labels.size(); ++p) {
      const size_t q = t.labels.find(t.labels[p], p + 1);
      if (q == std::string::npos) continue;
      const ir::TensorType type = t.value.type();
      const ir::Dim n = type.shape[p];
      if (n.isBatch() || n != type.shape[q]) ctx_.fail("label '{}' repeats over dims {} and {} of {}", t.labels[p], p, q, type.str());
      const int64_t size = n.value();
      if (size > 4096) ctx_.fail("a diagonal over {} elements is too large", size);
      std::vector<int64_t> eyeShape(type.rank(), 1);
      eyeShape[p] = eyeShape[q] = size;
      ir::Tensor eye(type.dtype, eyeShape);
      for (int64_t i = 0; i < size; ++i) eye.setAsDouble(i * size + i, 1.0);  // the other dims are 1s
      ImportedValue mask = c_.constant(std::move(eye), "eye");
      ImportedValue masked = op(Op::Mul, {t.value, mask}, "diag");
      t.value = op(Op::ReduceSum, {masked}, "diag_sum", {{"axes", std::vector<int64_t>{static_cast<int64_t>(q)}}, {"keepdims", int64_t{0}}});
      t.labels.erase(q, 1);
      --p;  // the label may repeat a third time
    }
    return t;
  }

  void check(const std::string& letters, const std::string& eq) const {
    for (char l : letters) {
      if (!std::isalpha(static_cast<unsigned char>(l))) ctx_.fail("equation '{}' has '{}' where a letter belongs", eq, l);
    }
  }

  // The labels of the last n of the (at most 10) dims "..." stands for.
  static std::string ellipsisLabels(size_t n) {
    std::string s;
    for (size_t k = 0; k < n; ++k) s += static_cast<char>('9' - (n - 1 - k));
    return s;
  }

  ir::Dim dimOf(const Term& t, char label) const { return t.value.type().shape.at(t.labels.find(label)); }

  // `t` with the dims whose label `others` lacks summed away.
  Term sumOut(const Term& t, const std::string& others) {
    std::vector<int64_t> axes;
    std::string kept;
    for (size_t k = 0; k < t.labels.size(); ++k) {
      if (others.find(t.labels[k]) == std::string::npos) axes.push_back(static_cast<int64_t>(k));
      else kept += t.labels[k];
    }
    if (axes.empty()) return t;
    return {op(Op::ReduceSum, {t.value}, "sum", {{"axes", axes}, {"keepdims", int64_t{0}}}), kept};
  }

  // `t` transposed so its labels read `order`.
  ImportedValue arrange(const Term& t, const std::string& order) {
    std::vector<int64_t> perm;
    for (char l : order) perm.push_back(static_cast<int64_t>(t.labels.find(l)));
    bool identity = true;
    for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == static_cast<int64_t>(k);
    return identity ? t.value : op(Op::Transpose, {t.value}, "t", {{"perm", perm}});
  }

  ImportedValue reshape(const ImportedValue& v, const ir::Shape& to) {
    const ir::Shape from = v.type().shape;
    if (from == to) return v;
    std::optional<std::vector<int64_t>> target = reshapeTarget(from, to);
    if (!target) ctx_.fail("cannot lay {} out as {} for a matmul (the batch dims would move)", ir::shapeStr(from), ir::shapeStr(to));
    return op(Op::Reshape, {v}, "r", {{"shape", *target}});
  }

  // Product of the dims of `labels` in `t` as one dim; the batch size only alone.
  ir::Dim product(const Term& t, const std::string& labels) {
    if (labels.size() == 1) return dimOf(t, labels[0]);
    int64_t n = 1;
    for (char l : labels) {
      const ir::Dim d = dimOf(t, l);
      if (d.isBatch()) ctx_.fail("label '{}' is the batch dim, which cannot be merged with '{}' for a matmul", l, labels);
      n *= d.value();
    }
    return ir::Dim(n);
  }

  // Two operands as one batched matmul: labels both have and `keep` needs are the matmul's batch
  // dims, labels both have and nothing later needs are contracted, and each side's own labels are
  // its rows or columns (all but one of them as further batch dims, the other side's 1s there).
  Term contract(const Term& a, const Term& b, const std::string& keep) {
    std::string batch, contracted, left, right;
    for (char l : a.labels) {
      if (b.labels.find(l) == std::string::npos) left += l;
      else if (keep.find(l) != std::string::npos) batch += l;
      else contracted += l;
    }
    for (char l : b.labels) {
      if (a.labels.find(l) == std::string::npos) right += l;
    }
    for (char l : contracted) {
      if (dimOf(a, l) != dimOf(b, l)) {
        ctx_.fail("label '{}' is {} in one operand and {} in the other", l, dimOf(a, l).str(), dimOf(b, l).str());
      }
    }
    const std::string leftExtra = left.empty() ? "" : left.substr(0, left.size() - 1);
    const std::string rightExtra = right.empty() ? "" : right.substr(0, right.size() - 1);
    ir::Shape as, bs;
    for (char l : batch) {
      as.push_back(dimOf(a, l));
      bs.push_back(dimOf(b, l));
    }
    for (char l : leftExtra) {
      as.push_back(dimOf(a, l));
      bs.push_back(ir::Dim(1));
    }
    for (char l : rightExtra) {
      as.push_back(ir::Dim(1));
      bs.push_back(dimOf(b, l));
    }
    const ir::Dim k = contracted.empty() ? ir::Dim(1) : product(a, contracted);
    as.push_back(left.empty() ? ir::Dim(1) : dimOf(a, left.back()));
    as.push_back(k);
    bs.push_back(k);
    bs.push_back(right.empty() ? ir::Dim(1) : dimOf(b, right.back()));
    ImportedValue av = reshape(arrange(a, batch + left + contracted), as);
    ImportedValue bv = reshape(arrange(b, batch + contracted + right), bs);
    ImportedValue y = op(Op::MatMul, {av, bv}, "mm");
    // Drop the 1s standing for a side without rows or columns.
    std::vector<int64_t> squeeze;
    const auto rank = static_cast<int64_t>(as.size());
    if (left.empty()) squeeze.push_back(rank - 2);
    if (right.empty()) squeeze.push_back(rank - 1);
    if (!squeeze.empty()) y = op(Op::Squeeze, {y}, "sq", {{"axes", squeeze}});
    return {y, batch + leftExtra + rightExtra + (left.empty() ? "" : left.substr(left.size() - 1)) +
                   (right.empty() ? "" : right.substr(right.size() - 1))};
  }

  ImportedValue op(Op o, const std::vector<ImportedValue>& ins, std::string_view what, ir::AttrMap attrs = {}) {
    return c_.op(o, ins, what, std::move(attrs));
  }

  NodeContext& ctx_;
  Composer c_;
  std::vector<std::string> inputs_;  // each operand's labels, "..." expanded
  std::string output_;
};

}  // namespace

void convertEinsum(NodeContext& ctx) {
  if (!ctx.hasAttr("equation")) ctx.fail("attribute equation is required");
  Einsum(ctx).convert();
}

}  // namespace policyc::frontend
