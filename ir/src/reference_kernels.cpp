// Reference kernels of the operator table: naive, obviously correct loops over doubles.
//
// Each kernel receives its outputs with dtype and shape already set (from the shape functions,
// evaluated at the run's batch size) and fills their data. Values of integer dtypes must come
// out integral; the interpreter rounds every output to its dtype after the kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "op_impls.h"
#include "policyc/ir/error.h"

namespace policyc::ir::impl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const RefTensor& in(const RefCall& call, size_t i) { return *call.inputs[i]; }
RefTensor& out(const RefCall& call, size_t i = 0) { return call.outputs[i]; }
bool hasInput(const RefCall& call, size_t i) { return call.inputs.size() > i && call.inputs[i] != nullptr; }

bool isIntegral(DType dtype) { return !isFloat(dtype); }

// Row-major strides of a shape, in elements.
std::vector<int64_t> stridesOf(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

int64_t product(const std::vector<int64_t>& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n *= shape[i];
  return n;
}

// Strides that read `shape` broadcast to `target` (numpy rules): 0 along broadcast dims.
std::vector<int64_t> broadcastStrides(const std::vector<int64_t>& shape, const std::vector<int64_t>& target) {
  std::vector<int64_t> strides = stridesOf(shape);
  std::vector<int64_t> result(target.size(), 0);
  size_t offset = target.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) result[offset + i] = shape[i] == 1 ? 0 : strides[i];
  return result;
}

// Advances a multi-index over `shape` in row-major order; false after the last one.
bool nextIndex(std::vector<int64_t>& index, const std::vector<int64_t>& shape) {
  for (size_t i = index.size(); i-- > 0;) {
    if (++index[i] < shape[i]) return true;
    index[i] = 0;
  }
  return false;
}

int64_t dot(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (size_t i = 0; i < index.size(); ++i) offset += index[i] * strides[i];
  return offset;
}

// Calls fn(flatOutputIndex, multiIndex) for every element of `shape`.
template <typename Fn>
void forEachIndex(const std::vector<int64_t>& shape, Fn&& fn) {
  if (staticNumel(shape) == 0) return;
  std::vector<int64_t> index(shape.size(), 0);
  int64_t flat = 0;
  do {
    fn(flat++, index);
  } while (nextIndex(index, shape));
}

// Window attribute lists (conv and pools), with their defaults filled in.
std::vector<int64_t> spatialList(const RefCall& call, const char* name, size_t n, int64_t fallback, size_t factor = 1) {
  return windowAttr(call.attrs, name, n * factor, fallback);
}

// NaN-propagating max and min (ONNX: max(NaN, x) = NaN).
double maxNaN(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  return a < b ? b : a;
}
double minNaN(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  return b < a ? b : a;
}

double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

// log(1 + exp(x)) without overflow for large x.
double softplus(double x) {
  if (std::isnan(x)) return x;
  return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
}

// Float to integer as ONNX Cast and numpy do: truncation toward zero (NaN becomes 0; the
// interpreter saturates out-of-range values to the dtype afterwards).
double truncToInt(double x) { return std::isnan(x) ? 0.0 : std::trunc(x); }

}  // namespace

// ---- linear algebra and convolution

void refGemm(const RefCall& call) {
  const RefTensor& a = in(call, 0);
  const RefTensor& b = in(call, 1);
  RefTensor& y = out(call);
  bool transA = attrInt(call.attrs, "trans_a") != 0;
  bool transB = attrInt(call.attrs, "trans_b") != 0;
  double alpha = attrFloat(call.attrs, "alpha");
  double beta = attrFloat(call.attrs, "beta");
  int64_t m = y.shape[0];
  int64_t n = y.shape[1];
  int64_t k = transA ? a.shape[0] : a.shape[1];
  std::vector<int64_t> cStrides;
  if (hasInput(call, 2)) cStrides = broadcastStrides(in(call, 2).shape, y.shape);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        double av = transA ? a.data[p * m + i] : a.data[i * k + p];
        double bv = transB ? b.data[j * k + p] : b.data[p * n + j];
        sum += av * bv;
      }
      double value = alpha * sum;
      if (hasInput(call, 2)) value += beta * in(call, 2).data[i * cStrides[0] + j * cStrides[1]];
      y.data[i * n + j] = value;
    }
  }
}

// y[r, n] = sum_k x[r, k] * w[n, k] + b[n] over every leading index r of x.
void refLinear(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  const RefTensor& w = in(call, 1);
  RefTensor& y = out(call);
  int64_t n = w.shape[0];
  int64_t k = w.shape[1];
  int64_t rows = product(x.shape, 0, x.shape.size() - 1);
  for (int64_t r = 0; r < rows; ++r) {
    const double* px = x.data.data() + r * k;
    for (int64_t j = 0; j < n; ++j) {
      const double* pw = w.data.data() + j * k;
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += px[p] * pw[p];
      if (hasInput(call, 2)) sum += in(call, 2).data[j];
      y.data[r * n + j] = sum;
    }
  }
}

void refMatMul(const RefCall& call) {
  const RefTensor& a = in(call, 0);
  const RefTensor& b = in(call, 1);
  RefTensor& y = out(call);
  // 1-D operands become matrices ([K] -> [1,K] for A, [K,1] for B); the output's layout is
  // the same with or without those unit dims.
  std::vector<int64_t> sa = a.shape;
  std::vector<int64_t> sb = b.shape;
  if (sa.size() == 1) sa = {1, a.shape[0]};
  if (sb.size() == 1) sb.push_back(1);
  int64_t m = sa[sa.size() - 2];
  int64_t k = sa[sa.size() - 1];
  int64_t n = sb[sb.size() - 1];
  std::vector<int64_t> batchA(sa.begin(), sa.end() - 2);
  std::vector<int64_t> batchB(sb.begin(), sb.end() - 2);
  size_t rank = std::max(batchA.size(), batchB.size());
  std::vector<int64_t> batch(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i + batchA.size() >= rank ? batchA[i + batchA.size() - rank] : 1;
    int64_t db = i + batchB.size() >= rank ? batchB[i + batchB.size() - rank] : 1;
    batch[i] = da == 1 ? db : da;
  }
  std::vector<int64_t> stridesA = broadcastStrides(batchA, batch);
  std::vector<int64_t> stridesB = broadcastStrides(batchB, batch);
  forEachIndex(batch, [&](int64_t flat, const std::vector<int64_t>& index) {
    const double* pa = a.data.data() + dot(index, stridesA) * m * k;
    const double* pb = b.data.data() + dot(index, stridesB) * k * n;
    double* py = y.data.data() + flat * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += pa[i * k + p] * pb[p * n + j];
        py[i * n + j] = sum;
      }
    }
  });
}

// The input offset (within one plane) of every tap of every output position's window, -1 where
// the tap falls in the padding: [output position][tap], both in row-major order. Computed once
// per node, so the sums below walk a table instead of re-deriving indices per channel.
static std::vector<int64_t> windowOffsets(const std::vector<int64_t>& outSpatial, const std::vector<int64_t>& kernel,
                                          const std::vector<int64_t>& strides, const std::vector<int64_t>& pads,
                                          const std::vector<int64_t>& dilations, const std::vector<int64_t>& inSpatial,
                                          const std::vector<int64_t>& inStrides) {
  std::vector<int64_t> table;
  table.reserve(static_cast<size_t>(staticNumel(outSpatial) * staticNumel(kernel)));
  forEachIndex(outSpatial, [&](int64_t, const std::vector<int64_t>& outPos) {
    forEachIndex(kernel, [&](int64_t, const std::vector<int64_t>& kPos) {
      int64_t offset = 0;
      for (size_t d = 0; d < outPos.size(); ++d) {
        int64_t pos = outPos[d] * strides[d] - pads[d] + kPos[d] * dilations[d];
        if (pos < 0 || pos >= inSpatial[d]) {  // zero padding
          offset = -1;
          break;
        }
        offset += pos * inStrides[d];
      }
      table.push_back(offset);
    });
  });
  return table;
}

void refConv(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  const RefTensor& w = in(call, 1);
  RefTensor& y = out(call);
  size_t nsp = x.shape.size() - 2;
  int64_t group = attrInt(call.attrs, "group");
  std::vector<int64_t> strides = spatialList(call, "strides", nsp, 1);
  std::vector<int64_t> dilations = spatialList(call, "dilations", nsp, 1);
  std::vector<int64_t> pads = spatialList(call, "pads", nsp, 0, 2);
  int64_t batch = x.shape[0];
  int64_t channels = x.shape[1];
  int64_t outChannels = y.shape[1];
  int64_t groupChannels = channels / group;
  int64_t groupOutChannels = outChannels / group;
  std::vector<int64_t> inSpatial(x.shape.begin() + 2, x.shape.end());
  std::vector<int64_t> outSpatial(y.shape.begin() + 2, y.shape.end());
  std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  int64_t inPlane = staticNumel(inSpatial);
  int64_t outPlane = staticNumel(outSpatial);
  int64_t kernelSize = staticNumel(kernel);
  const std::vector<int64_t> taps = windowOffsets(outSpatial, kernel, strides, pads, dilations, inSpatial, stridesOf(inSpatial));
  for (int64_t nb = 0; nb < batch; ++nb) {
    for (int64_t m = 0; m < outChannels; ++m) {
      int64_t g = m / groupOutChannels;
      for (int64_t o = 0; o < outPlane; ++o) {
        const int64_t* window = taps.data() + o * kernelSize;
        double sum = 0;
        for (int64_t c = 0; c < groupChannels; ++c) {
          int64_t ic = g * groupChannels + c;
          const double* xPlane = x.data.data() + (nb * channels + ic) * inPlane;
          const double* wKernel = w.data.data() + (m * groupChannels + c) * kernelSize;
          for (int64_t kk = 0; kk < kernelSize; ++kk) {
            if (window[kk] >= 0) sum += xPlane[window[kk]] * wKernel[kk];
          }
        }
        if (hasInput(call, 2)) sum += in(call, 2).data[m];
        y.data[(nb * outChannels + m) * outPlane + o] = sum;
      }
    }
  }
}

// The window geometry both poolings share: one (N, C) plane at a time over the spatial dims.
struct PoolGeometry {
  size_t nsp;
  std::vector<int64_t> kernel, strides, dilations, pads, inSpatial, outSpatial, inStrides;
  int64_t planes, inPlane, outPlane;

  PoolGeometry(const RefCall& call, const RefTensor& x, const RefTensor& y)
      : nsp(x.shape.size() - 2),
        kernel(attrInts(call.attrs, "kernel_shape")),
        strides(spatialList(call, "strides", nsp, 1)),
        dilations(spatialList(call, "dilations", nsp, 1)),
        pads(spatialList(call, "pads", nsp, 0, 2)),
        inSpatial(x.shape.begin() + 2, x.shape.end()),
        outSpatial(y.shape.begin() + 2, y.shape.end()),
        inStrides(stridesOf(inSpatial)),
        planes(x.shape[0] * x.shape[1]),
        inPlane(staticNumel(inSpatial)),
        outPlane(staticNumel(outSpatial)) {}
};

void refMaxPool(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  const PoolGeometry geo(call, x, y);
  const std::vector<int64_t> taps =
      windowOffsets(geo.outSpatial, geo.kernel, geo.strides, geo.pads, geo.dilations, geo.inSpatial, geo.inStrides);
  const int64_t windowSize = staticNumel(geo.kernel);
  for (int64_t p = 0; p < geo.planes; ++p) {
    const double* xPlane = x.data.data() + p * geo.inPlane;
    for (int64_t o = 0; o < geo.outPlane; ++o) {
      // Padding never wins: only in-bounds elements take part (an empty window gives -inf).
      double best = -kInf;
      for (int64_t kk = 0; kk < windowSize; ++kk) {
        const int64_t offset = taps[static_cast<size_t>(o * windowSize + kk)];
        if (offset >= 0) best = maxNaN(best, xPlane[offset]);
      }
      y.data[p * geo.outPlane + o] = best;
    }
  }
}

// As onnxruntime: a window is clipped to the padded input (with ceil_mode the last one may
// reach past it); count_include_pad divides by the clipped window's size, otherwise by the
// number of in-bounds elements (a window with none gives 0).
void refAvgPool(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  bool countIncludePad = attrInt(call.attrs, "count_include_pad") != 0;
  const PoolGeometry geo(call, x, y);  // captured by the lambdas below as geo.* (clang 14 cannot capture bindings)
  for (int64_t p = 0; p < geo.planes; ++p) {
    const double* xPlane = x.data.data() + p * geo.inPlane;
    forEachIndex(geo.outSpatial, [&](int64_t o, const std::vector<int64_t>& outPos) {
      std::vector<int64_t> begin(geo.nsp);
      std::vector<int64_t> extent(geo.nsp);
      int64_t windowSize = 1;
      for (size_t d = 0; d < geo.nsp; ++d) {
        begin[d] = outPos[d] * geo.strides[d] - geo.pads[d];
        int64_t end = std::min(begin[d] + geo.kernel[d], geo.inSpatial[d] + geo.pads[geo.nsp + d]);
        extent[d] = end - begin[d];
        windowSize *= extent[d];
      }
      double sum = 0;
      int64_t count = 0;
      forEachIndex(extent, [&](int64_t, const std::vector<int64_t>& kPos) {
        int64_t offset = 0;
        for (size_t d = 0; d < geo.nsp; ++d) {
          int64_t pos = begin[d] + kPos[d];
          if (pos < 0 || pos >= geo.inSpatial[d]) return;
          offset += pos * geo.inStrides[d];
        }
        sum += xPlane[offset];
        ++count;
      });
      double divisor = static_cast<double>(countIncludePad ? windowSize : count);
      y.data[p * geo.outPlane + o] = count == 0 ? 0.0 : sum / divisor;
    });
  }
}

void refGlobalAvgPool(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  int64_t planes = x.shape[0] * x.shape[1];
  int64_t plane = product(x.shape, 2, x.shape.size());
  for (int64_t p = 0; p < planes; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < plane; ++i) sum += x.data[p * plane + i];
    y.data[p] = sum / static_cast<double>(plane);
  }
}

// ---- normalisation

void refBatchNorm(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  const RefTensor& scale = in(call, 1);
  const RefTensor& bias = in(call, 2);
  const RefTensor& mean = in(call, 3);
  const RefTensor& var = in(call, 4);
  RefTensor& y = out(call);
  double epsilon = attrFloat(call.attrs, "epsilon");
  int64_t batch = x.shape[0];
  int64_t channels = x.shape[1];
  int64_t inner = product(x.shape, 2, x.shape.size());
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      double invStd = 1.0 / std::sqrt(var.data[c] + epsilon);
      for (int64_t i = 0; i < inner; ++i) {
        int64_t at = (n * channels + c) * inner + i;
        y.data[at] = (x.data[at] - mean.data[c]) * invStd * scale.data[c] + bias.data[c];
      }
    }
  }
}

void refLayerNorm(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  size_t axis = static_cast<size_t>(normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(x.shape.size())));
  double epsilon = attrFloat(call.attrs, "epsilon");
  int64_t rows = product(x.shape, 0, axis);
  std::vector<int64_t> normShape(x.shape.begin() + static_cast<std::ptrdiff_t>(axis), x.shape.end());
  int64_t cols = staticNumel(normShape);
  std::vector<int64_t> scaleStrides = broadcastStrides(in(call, 1).shape, normShape);
  std::vector<int64_t> biasStrides;
  if (hasInput(call, 2)) biasStrides = broadcastStrides(in(call, 2).shape, normShape);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data.data() + r * cols;
    double mean = 0;
    for (int64_t i = 0; i < cols; ++i) mean += row[i];
    mean /= static_cast<double>(cols);
    double var = 0;
    for (int64_t i = 0; i < cols; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<double>(cols);
    double invStd = 1.0 / std::sqrt(var + epsilon);
    forEachIndex(normShape, [&](int64_t i, const std::vector<int64_t>& index) {
      double value = (row[i] - mean) * invStd * in(call, 1).data[dot(index, scaleStrides)];
      if (hasInput(call, 2)) value += in(call, 2).data[dot(index, biasStrides)];
      y.data[r * cols + i] = value;
    });
  }
}

// ---- elementwise

void refBinary(const RefCall& call) {
  const RefTensor& a = in(call, 0);
  const RefTensor& b = in(call, 1);
  RefTensor& y = out(call);
  bool integral = isIntegral(y.dtype);
  std::vector<int64_t> stridesA = broadcastStrides(a.shape, y.shape);
  std::vector<int64_t> stridesB = broadcastStrides(b.shape, y.shape);
  Op op = call.op;
  const bool fmodSign = op == Op::Mod && attrInt(call.attrs, "fmod") != 0;
  forEachIndex(y.shape, [&](int64_t i, const std::vector<int64_t>& index) {
    double u = a.data[dot(index, stridesA)];
    double v = b.data[dot(index, stridesB)];
    double r = 0;
    switch (op) {
      case Op::Add: r = u + v; break;
      case Op::Sub: r = u - v; break;
      case Op::Mul: r = u * v; break;
      case Op::Div:
        if (integral) {
          if (v == 0) fail("div: integer division by zero");
          r = std::trunc(u / v);  // C semantics, as onnxruntime: toward zero
        } else {
          r = u / v;
        }
        break;
      case Op::Pow: r = integral ? truncToInt(std::pow(u, v)) : std::pow(u, v); break;
      case Op::Min: r = minNaN(u, v); break;
      case Op::Max: r = maxNaN(u, v); break;
      case Op::Equal: r = u == v ? 1 : 0; break;
      case Op::Less: r = u < v ? 1 : 0; break;
      case Op::Greater: r = u > v ? 1 : 0; break;
      case Op::LessOrEqual: r = u <= v ? 1 : 0; break;
      case Op::GreaterOrEqual: r = u >= v ? 1 : 0; break;
      case Op::And: r = (u != 0 && v != 0) ? 1 : 0; break;
      case Op::Or: r = (u != 0 || v != 0) ? 1 : 0; break;
      case Op::Xor: r = ((u != 0) != (v != 0)) ? 1 : 0; break;
      case Op::Mod:
        if (integral && v == 0) fail("mod: integer division by zero");
        r = std::fmod(u, v);  // the dividend's sign (exact on integers held in doubles)
        if (integral && !fmodSign && r != 0 && (r < 0) != (v < 0)) r += v;  // the divisor's sign
        break;
      default: fail("internal: {} is not a binary elementwise op", opInfo(op).name);
    }
    y.data[i] = r;
  });
}

void refWhere(const RefCall& call) {
  const RefTensor& cond = in(call, 0);
  const RefTensor& a = in(call, 1);
  const RefTensor& b = in(call, 2);
  RefTensor& y = out(call);
  std::vector<int64_t> stridesC = broadcastStrides(cond.shape, y.shape);
  std::vector<int64_t> stridesA = broadcastStrides(a.shape, y.shape);
  std::vector<int64_t> stridesB = broadcastStrides(b.shape, y.shape);
  forEachIndex(y.shape, [&](int64_t i, const std::vector<int64_t>& index) {
    y.data[i] = cond.data[dot(index, stridesC)] != 0 ? a.data[dot(index, stridesA)] : b.data[dot(index, stridesB)];
  });
}

void refExpand(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  std::vector<int64_t> strides = broadcastStrides(x.shape, y.shape);
  forEachIndex(y.shape, [&](int64_t i, const std::vector<int64_t>& index) { y.data[i] = x.data[dot(index, strides)]; });
}

void refUnary(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  const AttrMap& attrs = call.attrs;
  auto number = [&](const char* name) { return attrFloat(attrs, name); };
  // Attributes read once, not per element.
  double alpha = 0;
  double beta = 0;
  double gamma = 0;
  switch (call.op) {
    case Op::LeakyRelu:
    case Op::Elu: alpha = number("alpha"); break;
    case Op::Selu:
      alpha = number("alpha");
      gamma = number("gamma");
      break;
    case Op::HardSigmoid:
      alpha = number("alpha");
      beta = number("beta");
      break;
    case Op::Clip:
      alpha = number("min");
      beta = number("max");
      break;
    default: break;
  }
  DType to = y.dtype;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = x.data[i];
    double r = 0;
    switch (call.op) {
      case Op::Neg: r = -v; break;
      case Op::Abs: r = std::abs(v); break;
      case Op::Sqrt: r = std::sqrt(v); break;
      case Op::Exp: r = std::exp(v); break;
      case Op::Log: r = std::log(v); break;
      case Op::Erf: r = std::erf(v); break;
      case Op::Relu: r = v < 0 ? 0.0 : v; break;  // NaN stays NaN
      case Op::Sigmoid: r = sigmoid(v); break;
      case Op::Tanh: r = std::tanh(v); break;
      case Op::Softplus: r = softplus(v); break;
      case Op::Not: r = v == 0 ? 1 : 0; break;
      case Op::Sin: r = std::sin(v); break;
      case Op::Cos: r = std::cos(v); break;
      case Op::Tan: r = std::tan(v); break;
      case Op::Asin: r = std::asin(v); break;
      case Op::Acos: r = std::acos(v); break;
      case Op::Atan: r = std::atan(v); break;
      case Op::Sinh: r = std::sinh(v); break;
      case Op::Cosh: r = std::cosh(v); break;
      case Op::Asinh: r = std::asinh(v); break;
      case Op::Acosh: r = std::acosh(v); break;
      case Op::Atanh: r = std::atanh(v); break;
      case Op::Floor: r = std::floor(v); break;
      case Op::Ceil: r = std::ceil(v); break;
      case Op::Round: r = std::nearbyint(v); break;  // the default rounding mode: halves to even
      case Op::LeakyRelu: r = v < 0 ? alpha * v : v; break;
      case Op::Elu: r = v < 0 ? alpha * std::expm1(v) : v; break;
      case Op::Selu: r = v <= 0 ? gamma * alpha * std::expm1(v) : gamma * v; break;
      case Op::HardSigmoid: r = std::isnan(v) ? v : std::max(0.0, std::min(1.0, alpha * v + beta)); break;
      case Op::Clip: r = std::isnan(v) ? v : std::min(std::max(v, alpha), beta); break;
      case Op::Cast:
        if (to == DType::Bool) {
          r = v != 0 ? 1 : 0;  // NaN is true, as in numpy
        } else if (isIntegral(to)) {
          r = truncToInt(v);
        } else {
          r = v;
        }
        break;
      default: fail("internal: {} is not a unary elementwise op", opInfo(call.op).name);
    }
    y.data[i] = r;
  }
}

// silu, gelu (exact erf form) and hard_swish; NaN propagates.
void refActivation(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = x.data[i];
    double r = 0;
    switch (call.op) {
      case Op::Silu: r = v * sigmoid(v); break;
      case Op::Gelu: r = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); break;
      case Op::HardSwish: r = std::isnan(v) ? v : v * std::max(0.0, std::min(1.0, v / 6.0 + 0.5)); break;
      default: fail("internal: {} is not an activation", opInfo(call.op).name);
    }
    y.data[i] = r;
  }
}

// ---- reductions

void refSoftmax(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  size_t axis = static_cast<size_t>(normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(x.shape.size())));
  int64_t outer = product(x.shape, 0, axis);
  int64_t n = x.shape[axis];
  int64_t inner = product(x.shape, axis + 1, x.shape.size());
  bool logSoftmax = call.op == Op::LogSoftmax;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + j; };
      double maxValue = -kInf;
      for (int64_t k = 0; k < n; ++k) maxValue = maxNaN(maxValue, x.data[at(k)]);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x.data[at(k)] - maxValue);
      for (int64_t k = 0; k < n; ++k) {
        double shifted = x.data[at(k)] - maxValue;
        y.data[at(k)] = logSoftmax ? shifted - std::log(sum) : std::exp(shifted) / sum;
      }
    }
  }
}

void refReduce(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> axes = attrInts(call.attrs, "axes");
  std::vector<bool> reduced(x.shape.size(), axes.empty());
  for (int64_t a : axes) reduced[normalizeAxis(a, rank)] = true;
  // The output's layout is that of the input with reduced dims set to 1, keepdims or not.
  std::vector<int64_t> kept = x.shape;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (reduced[i]) kept[i] = 1;
  }
  std::vector<int64_t> outStrides = stridesOf(kept);
  for (size_t i = 0; i < kept.size(); ++i) {
    if (reduced[i]) outStrides[i] = 0;
  }
  const bool isMax = call.op == Op::ReduceMax, isProd = call.op == Op::ReduceProd;
  std::fill(y.data.begin(), y.data.end(), isMax ? -kInf : isProd ? 1.0 : 0.0);
  forEachIndex(x.shape, [&](int64_t i, const std::vector<int64_t>& index) {
    double& acc = y.data[dot(index, outStrides)];
    acc = isMax ? maxNaN(acc, x.data[i]) : isProd ? acc * x.data[i] : acc + x.data[i];
  });
  if (call.op == Op::ReduceMean) {
    int64_t count = y.numel() == 0 ? 0 : x.numel() / y.numel();
    for (double& v : y.data) {
      v /= static_cast<double>(count);  // an empty reduction gives NaN (0/0)
      if (isIntegral(y.dtype)) v = truncToInt(v);
    }
  }
}

void refArgMax(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  size_t axis = static_cast<size_t>(normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(x.shape.size())));
  bool selectLast = attrInt(call.attrs, "select_last_index") != 0;
  int64_t outer = product(x.shape, 0, axis);
  int64_t n = x.shape[axis];
  int64_t inner = product(x.shape, axis + 1, x.shape.size());
  if (n == 0 && y.numel() > 0) fail("argmax: axis {} has size 0", axis);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      int64_t best = 0;
      double bestValue = x.data[(o * n) * inner + j];
      for (int64_t k = 1; k < n; ++k) {
        double v = x.data[(o * n + k) * inner + j];
        // NaN counts as the largest value, as in numpy.
        bool better = std::isnan(bestValue) ? false : (std::isnan(v) || v > bestValue);
        bool tie = std::isnan(v) ? std::isnan(bestValue) : v == bestValue;
        if (better || (selectLast && tie)) {
          best = k;
          bestValue = v;
        }
      }
      y.data[o * inner + j] = static_cast<double>(best);
    }
  }
}

// ---- data movement

// Flatten, reshape, squeeze, unsqueeze, identity, dropout: same elements, new shape.
void refCopy(const RefCall& call) { out(call).data = in(call, 0).data; }

void refTranspose(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  std::vector<int64_t> perm = attrInts(call.attrs, "perm");
  if (perm.empty()) {
    for (size_t i = x.shape.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  std::vector<int64_t> inStrides = stridesOf(x.shape);
  std::vector<int64_t> permuted(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) permuted[k] = inStrides[perm[k]];
  forEachIndex(y.shape,
               [&](int64_t i, const std::vector<int64_t>& index) { y.data[i] = x.data[dot(index, permuted)]; });
}

void refConcat(const RefCall& call) {
  RefTensor& y = out(call);
  size_t axis = static_cast<size_t>(normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(y.shape.size())));
  int64_t outer = product(y.shape, 0, axis);
  int64_t inner = product(y.shape, axis + 1, y.shape.size());
  int64_t outRow = y.shape[axis] * inner;
  int64_t offset = 0;
  for (const RefTensor* x : call.inputs) {
    int64_t row = x->shape[axis] * inner;
    for (int64_t o = 0; o < outer; ++o) {
      std::copy_n(x->data.begin() + o * row, row, y.data.begin() + o * outRow + offset);
    }
    offset += row;
  }
}

void refSplit(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  size_t axis = static_cast<size_t>(normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(x.shape.size())));
  int64_t outer = product(x.shape, 0, axis);
  int64_t inner = product(x.shape, axis + 1, x.shape.size());
  int64_t inRow = x.shape[axis] * inner;
  int64_t offset = 0;
  for (RefTensor& y : call.outputs) {
    int64_t row = y.shape[axis] * inner;
    for (int64_t o = 0; o < outer; ++o) {
      std::copy_n(x.data.begin() + o * inRow + offset, row, y.data.begin() + o * row);
    }
    offset += row;
  }
}

void refSlice(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  size_t rank = x.shape.size();
  const std::vector<int64_t>& starts = attrInts(call.attrs, "starts");
  const std::vector<int64_t>& ends = attrInts(call.attrs, "ends");
  std::vector<int64_t> axes = attrInts(call.attrs, "axes");
  std::vector<int64_t> steps = attrInts(call.attrs, "steps");
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> first(rank, 0);
  std::vector<int64_t> step(rank, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    size_t axis = static_cast<size_t>(normalizeAxis(axes[i], static_cast<int64_t>(rank)));
    SliceRange range = sliceRange(starts[i], ends[i], steps[i], x.shape[axis]);
    if (range.length != y.shape[axis]) {
      fail("internal: slice of axis {} has {} elements, the output type says {}", axis, range.length, y.shape[axis]);
    }
    first[axis] = range.start;
    step[axis] = steps[i];
  }
  std::vector<int64_t> inStrides = stridesOf(x.shape);
  forEachIndex(y.shape, [&](int64_t i, const std::vector<int64_t>& index) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d) offset += (first[d] + index[d] * step[d]) * inStrides[d];
    y.data[i] = x.data[offset];
  });
}

void refGather(const RefCall& call) {
  const RefTensor& data = in(call, 0);
  const RefTensor& indices = in(call, 1);
  RefTensor& y = out(call);
  size_t axis =
      static_cast<size_t>(normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(data.shape.size())));
  int64_t outer = product(data.shape, 0, axis);
  int64_t n = data.shape[axis];
  int64_t inner = product(data.shape, axis + 1, data.shape.size());
  int64_t count = indices.numel();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < count; ++j) {
      auto index = static_cast<int64_t>(indices.data[j]);
      if (index < -n || index >= n) fail("gather: index {} is out of range for axis {} of size {}", index, axis, n);
      if (index < 0) index += n;
      std::copy_n(data.data.begin() + (o * n + index) * inner, inner, y.data.begin() + (o * count + j) * inner);
    }
  }
}

void refGatherElements(const RefCall& call) {
  const RefTensor& data = in(call, 0);
  const RefTensor& indices = in(call, 1);
  RefTensor& y = out(call);
  const auto axis = static_cast<size_t>(normalizeAxis(attrInt(call.attrs, "axis"), static_cast<int64_t>(data.shape.size())));
  const int64_t n = data.shape[axis];
  const std::vector<int64_t> strides = stridesOf(data.shape);
  forEachIndex(y.shape, [&](int64_t i, const std::vector<int64_t>& index) {
    auto at = static_cast<int64_t>(indices.data[i]);
    if (at < -n || at >= n) fail("gather_elements: index {} is out of range for axis {} of size {}", at, axis, n);
    if (at < 0) at += n;
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d) offset += (d == axis ? at : index[d]) * strides[d];
    y.data[i] = data.data[offset];
  });
}

void refPad(const RefCall& call) {
  const RefTensor& x = in(call, 0);
  RefTensor& y = out(call);
  size_t rank = x.shape.size();
  const std::vector<int64_t>& pads = attrInts(call.attrs, "pads");
  const std::string& mode = attrString(call.attrs, "mode");
  double value = attrFloat(call.attrs, "value");
  std::vector<int64_t> inStrides = stridesOf(x.shape);
  forEachIndex(y.shape, [&](int64_t i, const std::vector<int64_t>& index) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d) {
      int64_t size = x.shape[d];
      int64_t pos = index[d] - pads[d];
      if (pos < 0 || pos >= size) {
        if (mode == "constant") {
          y.data[i] = value;
          return;
        }
        if (mode == "edge") {
          pos = std::clamp<int64_t>(pos, 0, size - 1);
        } else {  // reflect, without repeating the edge: [a b c] -> b [a b c] b
          while (size > 1 && (pos < 0 || pos >= size)) pos = pos < 0 ? -pos : 2 * (size - 1) - pos;
          if (size == 1) pos = 0;
        }
      }
      offset += pos * inStrides[d];
    }
    y.data[i] = x.data[offset];
  });
}

}  // namespace policyc::ir::impl
