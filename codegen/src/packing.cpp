// What the backends share about template kernels (packing.h).
#include "packing.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

namespace policyc::codegen {

using ir::DType;
using ir::Op;

int64_t packedN(const KernelProgram& p, const Kernel& k) { return p.buffer(k.anchorInputs[1]).type.shape[0].value(); }
int64_t packedK(const KernelProgram& p, const Kernel& k) {
  int64_t kk = 1;
  const ir::Shape& s = p.buffer(k.anchorInputs[1]).type.shape;
  for (size_t d = 1; d < s.size(); ++d) kk *= s[d].value();
  return kk;
}

bool packable(const KernelProgram& p, const Kernel& k) {
  bool linear = k.kind == KernelKind::Linear && k.anchor->isOp(Op::Linear);
  bool conv = k.kind == KernelKind::Conv && k.anchor->attrInt("group") == 1 && p.buffer(k.anchorInputs[0]).type.rank() == 4;
  if (!linear && !conv) return false;
  const Buffer& w = p.buffer(k.anchorInputs[1]);
  const Buffer& x = p.buffer(k.anchorInputs[0]);
  if (linear && x.strides.back() != 1) return false;
  if (conv && packedK(p, k) * 4 * 4 > 128 * 1024) return false;  // four patches on the stack
  if (conv && x.strides[0] >= (int64_t{1} << 31)) return false;  // window offsets are int32
  bool biasOk = k.anchorInputs.size() < 3 || (p.buffer(k.anchorInputs[2]).kind == BufferKind::Param &&
                                               !p.buffer(k.anchorInputs[2]).isView() &&
                                               p.buffer(k.anchorInputs[2]).type.dtype == DType::F32);
  return w.kind == BufferKind::Param && !w.isView() && w.type.dtype == DType::F32 && x.type.dtype == DType::F32 && biasOk;
}

int64_t inputChannelGroup(const KernelProgram& p, const Kernel& k) {
  const int64_t kk = packedK(p, k);
  const ir::Shape& w = p.buffer(k.anchorInputs[1]).type.shape;
  if (k.kind == KernelKind::Conv) return kk / w[1].value();  // [M, C, KH, KW]: a channel's window
  // A linear layer over a flattened feature map [batch, C, H, ...]: a channel's H x ... values.
  const ir::Value* x = p.buffer(k.anchorInputs[0]).value;
  const ir::Node* from = x ? x->producer() : nullptr;
  if (!from || !(from->isOp(Op::Flatten) || from->isOp(Op::Reshape)) || from->inputs().empty()) return kk;
  const ir::Shape& map = from->input(0)->type().shape;
  if (map.size() < 3) return kk;
  int64_t group = 1;
  for (size_t d = 2; d < map.size(); ++d) {
    if (!map[d].isStatic()) return kk;
    group *= map[d].value();
  }
  return map[1].isStatic() && map[1].value() * group == kk ? group : kk;
}

namespace {

// Panel j holds W[j*16 + c, q] at [q][c]: the same move for the values and for their sources.
template <typename T>
std::vector<T> panels(const T* src, int64_t n, int64_t kk) {
  const int64_t count = (n + kPanel - 1) / kPanel;
  std::vector<T> packed(static_cast<size_t>(count * kk * kPanel), T{0});
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t q = 0; q < kk; ++q) packed[static_cast<size_t>(((j / kPanel) * kk + q) * kPanel + j % kPanel)] = src[j * kk + q];
  }
  return packed;
}

template <typename T>
std::vector<T> biasPanels(const T* src, int64_t count, int64_t n) {
  std::vector<T> bias(static_cast<size_t>((n + kPanel - 1) / kPanel * kPanel), T{0});
  if (src) std::copy_n(src, std::min(n, count), bias.begin());
  return bias;
}

const ir::Node& paramOf(const KernelProgram& p, int buffer) { return *p.buffer(buffer).value->producer(); }

}  // namespace

std::vector<float> packWeightPanels(const KernelProgram& p, const Kernel& k) {
  return panels(paramOf(p, k.anchorInputs[1]).paramData().data<float>(), packedN(p, k), packedK(p, k));
}

std::vector<float> winogradWeights(const KernelProgram& p, const Kernel& k) {
  const ir::Shape& shape = p.buffer(k.anchorInputs[1]).type.shape;  // [M, C, 3, 3]
  const int64_t M = shape[0].value(), C = shape[1].value();
  const float* w = paramOf(p, k.anchorInputs[1]).paramData().data<float>();
  static constexpr double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  std::vector<float> u(static_cast<size_t>(16 * M * C));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) {
      const float* g = w + (m * C + c) * 9;
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          double v = 0;
          for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b) v += G[i][a] * static_cast<double>(g[a * 3 + b]) * G[j][b];
          u[static_cast<size_t>(((i * 4 + j) * M + m) * C + c)] = static_cast<float>(v);
        }
    }
  return u;
}

uint16_t bf16Bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // a quiet NaN, whatever its payload
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);                   // to nearest even
}

namespace {

// The ranges whose sums a narrowed column keeps, in order: each group of `group` values of k (the
// values one input channel feeds), then, where that is not already the whole column, all kk.
template <class Keep>
void forEachSumKept(int64_t kk, int64_t group, Keep keep) {
  if (group > 0 && group < kk) {
    for (int64_t lo = 0; lo < kk; lo += group) keep(lo, std::min(kk, lo + group));
  }
  keep(0, kk);
}

// The float a bf16 value stands for.
double bf16Value(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The bf16 neighbour of b on the side `up` points to (bf16 bits step by one within a sign) and the
// step to it; none from zero, to an infinity or NaN, or across zero.
std::optional<uint16_t> bf16Neighbour(uint16_t b, bool up, double& step) {
  const bool negative = (b & 0x8000u) != 0;
  if ((b & 0x7fffu) == 0 || (b & 0x7f80u) == 0x7f80u) return std::nullopt;
  const uint16_t n = static_cast<uint16_t>(up != negative ? b + 1 : b - 1);
  if ((n & 0x7fffu) == 0 || (n & 0x7f80u) == 0x7f80u || ((n ^ b) & 0x8000u) != 0) return std::nullopt;
  step = bf16Value(n) - bf16Value(b);
  return n;
}

// Values [lo, hi) of one bf16 column (`bits`, rounded; `left`, w - bf16 value) whose errors add up
// to S: values rounded the way S points move to their neighbour on the other side of w, fewest
// added squared error first, while the move lowers err^2 + S^2 (a step d from a value r short of
// w: d < r + S). With inputs of a common mean S^2 weighs like a value's own error. Keeps `left`.
void bf16KeepingSum(uint16_t* bits, std::vector<double>& left, int64_t lo, int64_t hi) {
  double sum = 0;
  for (int64_t q = lo; q < hi; ++q) sum += left[static_cast<size_t>(q)];
  if (sum == 0) return;
  const double sign = sum > 0 ? 1.0 : -1.0;
  struct Move {
    double extra;  // the added squared error
    int64_t q;
  };
  std::vector<Move> moves;
  for (int64_t q = lo; q < hi; ++q) {
    const double r = sign * left[static_cast<size_t>(q)];
    double step = 0;
    if (r > 0 && bf16Neighbour(bits[q], sign > 0, step)) moves.push_back({(sign * step - r) * (sign * step - r) - r * r, q});
  }
  std::stable_sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) { return a.extra < b.extra; });
  double s = sign * sum;  // > 0
  for (const Move& m : moves) {
    double step = 0;
    const std::optional<uint16_t> n = bf16Neighbour(bits[m.q], sign > 0, step);
    const double d = sign * step, r = sign * left[static_cast<size_t>(m.q)];
    if (!n || d >= r + s) continue;
    bits[m.q] = *n;
    left[static_cast<size_t>(m.q)] -= step;
    s -= d;
  }
}

}  // namespace

std::vector<uint16_t> toBf16Pairs(const std::vector<float>& packed, int64_t panelCount, int64_t kk, int64_t group) {
  const int64_t pairs = bf16PairRows(kk);
  std::vector<uint16_t> out(static_cast<size_t>(panelCount * pairs * kPanel * 2), 0);
  std::vector<uint16_t> column(static_cast<size_t>(kk));
  std::vector<double> left(static_cast<size_t>(kk));
  for (int64_t j = 0; j < panelCount; ++j) {
    const float* panel = packed.data() + j * kk * kPanel;
    uint16_t* dst = out.data() + j * pairs * kPanel * 2;
    for (int64_t c = 0; c < kPanel; ++c) {
      for (int64_t q = 0; q < kk; ++q) {
        const float v = panel[q * kPanel + c];
        column[static_cast<size_t>(q)] = bf16Bits(v);
        const double b = bf16Value(column[static_cast<size_t>(q)]);
        left[static_cast<size_t>(q)] = std::isfinite(v) && std::isfinite(b) ? static_cast<double>(v) - b : 0.0;
      }
      forEachSumKept(kk, group, [&](int64_t lo, int64_t hi) { bf16KeepingSum(column.data(), left, lo, hi); });
      for (int64_t q = 0; q < kk; ++q) dst[(q / 2 * kPanel + c) * 2 + q % 2] = column[static_cast<size_t>(q)];
    }
  }
  return out;
}

namespace {

// Rounds values [lo, hi) of one int8 column the other way where their errors (`left`, w / scale
// - q) add up to n whole steps: the |n| values nearest the half step toward n first (ties by k),
// each moving toward its w / scale; one at +-127 stays. Keeps `left` current.
void int8KeepingSum(int8_t* out, int64_t stride, std::vector<double>& left, int64_t lo, int64_t hi) {
  double sum = 0;
  for (int64_t q = lo; q < hi; ++q) sum += left[static_cast<size_t>(q)];
  const int64_t n = static_cast<int64_t>(std::nearbyint(sum));
  if (n == 0) return;
  std::vector<int64_t> order(static_cast<size_t>(hi - lo));
  std::iota(order.begin(), order.end(), lo);
  const double sign = n > 0 ? 1.0 : -1.0;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return sign * left[static_cast<size_t>(a)] > sign * left[static_cast<size_t>(b)]; });
  const int step = n > 0 ? 1 : -1;
  for (int64_t i = 0, moved = 0; i < hi - lo && moved < std::abs(n); ++i) {
    const size_t at = static_cast<size_t>(order[static_cast<size_t>(i)]);
    int8_t& v = out[static_cast<int64_t>(at) * stride];
    if (sign * left[at] <= 0 || std::abs(v + step) > 127) continue;
    v = static_cast<int8_t>(v + step);
    left[at] -= step;
    ++moved;
  }
}

}  // namespace

std::vector<int8_t> toInt8(const std::vector<float>& packed, int64_t panelCount, int64_t kk, int64_t group, std::vector<float>& scales) {
  scales.assign(static_cast<size_t>(panelCount * kPanel), 0.0f);
  std::vector<int8_t> out(packed.size());
  std::vector<double> left(static_cast<size_t>(kk));
  for (int64_t j = 0; j < panelCount; ++j) {
    const float* panel = packed.data() + j * kk * kPanel;
    for (int64_t c = 0; c < kPanel; ++c) {
      float maxAbs = 0;
      for (int64_t q = 0; q < kk; ++q) maxAbs = std::max(maxAbs, std::abs(panel[q * kPanel + c]));
      const float scale = maxAbs / 127.0f;
      scales[static_cast<size_t>(j * kPanel + c)] = scale;
      if (scale == 0) continue;  // a zero or padding column: zeros
      int8_t* column = out.data() + j * kk * kPanel + c;
      for (int64_t q = 0; q < kk; ++q) {
        const float v = std::clamp(std::nearbyint(panel[q * kPanel + c] / scale), -127.0f, 127.0f);
        column[q * kPanel] = static_cast<int8_t>(v);
        left[static_cast<size_t>(q)] = static_cast<double>(panel[q * kPanel + c] / scale) - v;
      }
      forEachSumKept(kk, group, [&](int64_t lo, int64_t hi) { int8KeepingSum(column, kPanel, left, lo, hi); });
    }
  }
  return out;
}

std::vector<float> packBiasPanels(const KernelProgram& p, const Kernel& k) {
  if (k.anchorInputs.size() < 3) return biasPanels<float>(nullptr, 0, packedN(p, k));
  const ir::Tensor& t = paramOf(p, k.anchorInputs[2]).paramData();
  return biasPanels(t.data<float>(), t.numel(), packedN(p, k));
}

std::vector<int64_t> packedWeightSource(const KernelProgram& p, const Kernel& k) {
  const ir::Node& w = paramOf(p, k.anchorInputs[1]);
  if (!w.isUpdatable()) return {};
  return panels(w.paramSource().data<int64_t>(), packedN(p, k), packedK(p, k));
}

std::vector<int64_t> packedBiasSource(const KernelProgram& p, const Kernel& k) {
  if (k.anchorInputs.size() < 3) return {};
  const ir::Node& b = paramOf(p, k.anchorInputs[2]);
  if (!b.isUpdatable()) return {};
  return biasPanels(b.paramSource().data<int64_t>(), b.paramSource().numel(), packedN(p, k));
}

ReducedAxes reducedAxes(const ir::Node& n, size_t rank) {
  auto normalize = [&](int64_t axis) { return static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis); };
  ReducedAxes r{std::vector<bool>(rank, false), true};
  if (n.isOp(Op::GlobalAvgPool)) {
    for (size_t d = 2; d < rank; ++d) r.reduced[d] = true;
  } else if (n.isOp(Op::ArgMax)) {
    r.reduced[normalize(n.attrInt("axis"))] = true;
    r.keepdims = n.attrInt("keepdims") != 0;
  } else {
    std::vector<int64_t> axes = n.attrInts("axes");
    if (axes.empty()) std::fill(r.reduced.begin(), r.reduced.end(), true);
    for (int64_t a : axes) r.reduced[normalize(a)] = true;
    r.keepdims = n.attrInt("keepdims") != 0;
  }
  return r;
}

}  // namespace policyc::codegen
