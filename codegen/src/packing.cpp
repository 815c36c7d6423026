// What the backends share about template kernels (packing.h).
#include "packing.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

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

uint16_t bf16Bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // a quiet NaN, whatever its payload
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);                   // to nearest even
}

std::vector<uint16_t> toBf16Pairs(const std::vector<float>& packed, int64_t panelCount, int64_t kk) {
  const int64_t pairs = bf16PairRows(kk);
  std::vector<uint16_t> out(static_cast<size_t>(panelCount * pairs * kPanel * 2), 0);
  for (int64_t j = 0; j < panelCount; ++j) {
    const float* panel = packed.data() + j * kk * kPanel;
    uint16_t* dst = out.data() + j * pairs * kPanel * 2;
    for (int64_t q = 0; q < kk; ++q) {
      for (int64_t c = 0; c < kPanel; ++c) dst[(q / 2 * kPanel + c) * 2 + q % 2] = bf16Bits(panel[q * kPanel + c]);
    }
  }
  return out;
}

std::vector<int8_t> toInt8(const std::vector<float>& packed, int64_t panelCount, int64_t kk, std::vector<float>& scales) {
  scales.assign(static_cast<size_t>(panelCount * kPanel), 0.0f);
  std::vector<int8_t> out(packed.size());
  for (int64_t j = 0; j < panelCount; ++j) {
    const float* panel = packed.data() + j * kk * kPanel;
    for (int64_t c = 0; c < kPanel; ++c) {
      float maxAbs = 0;
      for (int64_t q = 0; q < kk; ++q) maxAbs = std::max(maxAbs, std::abs(panel[q * kPanel + c]));
      const float scale = maxAbs / 127.0f;
      scales[static_cast<size_t>(j * kPanel + c)] = scale;
      if (scale == 0) continue;  // a zero or padding column: zeros
      // Round to nearest; `left`: each value's w / scale - q, in (-0.5, 0.5] steps.
      std::vector<double> left(static_cast<size_t>(kk));
      double sum = 0;
      for (int64_t q = 0; q < kk; ++q) {
        const float v = std::clamp(std::nearbyint(panel[q * kPanel + c] / scale), -127.0f, 127.0f);
        out[static_cast<size_t>((j * kk + q) * kPanel + c)] = static_cast<int8_t>(v);
        left[static_cast<size_t>(q)] = static_cast<double>(panel[q * kPanel + c] / scale) - v;
        sum += left[static_cast<size_t>(q)];
      }
      // Round |n| values the other way, those nearest the half step first (ties by k).
      const int64_t n = static_cast<int64_t>(std::nearbyint(sum));
      if (n == 0) continue;
      std::vector<int64_t> order(static_cast<size_t>(kk));
      std::iota(order.begin(), order.end(), 0);
      const double sign = n > 0 ? 1.0 : -1.0;
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return sign * left[static_cast<size_t>(a)] > sign * left[static_cast<size_t>(b)]; });
      // At least 2|n| - 1 values have left of n's sign (each is at most half a step), and each
      // moves toward its w / scale; one at +-127 (w / scale a rounding past max |w| / scale) stays.
      const int step = n > 0 ? 1 : -1;
      for (int64_t i = 0, moved = 0; i < kk && moved < std::abs(n); ++i) {
        const size_t at = static_cast<size_t>(order[static_cast<size_t>(i)]);
        int8_t& v = out[(static_cast<size_t>(j * kk) + at) * kPanel + static_cast<size_t>(c)];
        if (sign * left[at] <= 0 || std::abs(v + step) > 127) continue;
        v = static_cast<int8_t>(v + step);
        ++moved;
      }
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
