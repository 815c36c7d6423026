// ONNX Resize (and the older Upsample) as IR ops, one axis at a time:
// nearest is a gather of constant indices along the axis (exact); linear and cubic are a matmul
// with a constant [out, in] matrix of interpolation weights along the axis, as separable as ONNX
// defines them. The coordinate transforms, rounding modes, cubic coefficient, exclude_outside,
// tf_crop_and_resize's extrapolation and opset 18's axes and keep_aspect_ratio_policy are all
// worked out at import; only scales and sizes known at compile time are supported.
#include <cmath>

#include "onnx_ops.h"
#include "onnx_tensor.h"

namespace policyc::frontend {
namespace {

using ir::Op;

struct AxisPlan {
  int64_t in = 0, out = 0;
  double scale = 1;            // output / input, as ONNX uses it in the coordinate transform
  double roiStart = 0, roiEnd = 1;
};

class Resize {
 public:
  // `upsample`: ONNX's Upsample (opsets 7-9): scales only, asymmetric coordinates, nearest rounds down.
  Resize(NodeContext& ctx, bool upsample) : ctx_(ctx), c_(ctx), upsample_(upsample) {}

  void convert() {
    const ImportedValue& x = ctx_.input(0);
    const ir::TensorType t = x.type();
    if (!ir::isFloat(t.dtype)) ctx_.fail("Resize of {} is not supported (float inputs only)", t.str());
    const auto rank = static_cast<int64_t>(t.rank());
    readAttributes();

    std::vector<int64_t> axes = ctx_.attrInts("axes").value_or(std::vector<int64_t>{});
    if (axes.empty()) {
      for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
    }
    for (int64_t& a : axes) {
      if (a < -rank || a >= rank) ctx_.fail("axis {} is out of range for {}", a, t.str());
      if (a < 0) a += rank;
    }
    std::vector<double> roi, scales;
    std::vector<int64_t> sizes;
    if (upsample_) {
      if (auto attr = ctx_.attrFloats("scales")) scales = *attr;  // opset 7
      if (ctx_.hasInput(1)) scales = doubles(ctx_.constantInput(1, "scales"));
    } else {
      if (ctx_.hasInput(1) && ctx_.constantInput(1, "roi").numel() > 0) roi = doubles(ctx_.constantInput(1, "roi"));
      if (ctx_.hasInput(2) && ctx_.constantInput(2, "scales").numel() > 0) scales = doubles(ctx_.constantInput(2, "scales"));
      if (ctx_.hasInput(3)) sizes = ctx_.constantInts(3, "sizes");
    }
    if (scales.empty() == sizes.empty()) ctx_.fail("exactly one of scales and sizes must be given");
    const size_t n = axes.size();
    if (!scales.empty() && scales.size() != n) ctx_.fail("scales has {} values for {} axes", scales.size(), n);
    if (!sizes.empty() && sizes.size() != n) ctx_.fail("sizes has {} values for {} axes", sizes.size(), n);
    if (coordMode_ == "tf_crop_and_resize" && roi.size() != 2 * n) {
      ctx_.fail("tf_crop_and_resize needs roi with {} values (starts then ends), got {}", 2 * n, roi.size());
    }

    std::vector<AxisPlan> plans(n);
    for (size_t i = 0; i < n; ++i) {
      const ir::Dim d = t.shape[static_cast<size_t>(axes[i])];
      if (d.isBatch()) {
        const bool same = sizes.empty() ? scales[i] == 1.0 : false;
        if (!same) ctx_.fail("Resize changes the batch dim of {}, which policyc does not support", t.str());
        plans[i].in = -1;
        continue;
      }
      plans[i].in = d.value();
      if (!roi.empty() && coordMode_ == "tf_crop_and_resize") {
        plans[i].roiStart = roi[i];
        plans[i].roiEnd = roi[i + n];
      }
    }
    if (!sizes.empty()) {
      // keep_aspect_ratio_policy (opset 18): one scale for every axis, the smallest or largest.
      double common = 0;
      if (aspect_ != "stretch") {
        bool first = true;
        for (size_t i = 0; i < n; ++i) {
          if (plans[i].in < 0) continue;
          const double s = static_cast<double>(sizes[i]) / static_cast<double>(plans[i].in);
          common = first ? s : aspect_ == "not_larger" ? std::min(common, s) : std::max(common, s);
          first = false;
        }
      }
      for (size_t i = 0; i < n; ++i) {
        if (plans[i].in < 0) continue;
        if (sizes[i] <= 0) ctx_.fail("sizes[{}] is {}; sizes must be positive", i, sizes[i]);
        AxisPlan& p = plans[i];
        if (aspect_ == "stretch") {
          p.out = sizes[i];
          p.scale = static_cast<double>(p.out) / static_cast<double>(p.in);
        } else {
          p.scale = common;
          const double out = std::round(common * static_cast<double>(p.in));
          if (!(out >= 1 && out <= static_cast<double>(kMaxImportElements))) ctx_.fail("axis {} would have {} elements", axes[i], out);
          p.out = static_cast<int64_t>(out);
        }
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        if (plans[i].in < 0) continue;
        if (!(scales[i] > 0) || !std::isfinite(scales[i])) ctx_.fail("scales[{}] is {}; scales must be positive", i, scales[i]);
        plans[i].scale = scales[i];
        const double out = std::floor(static_cast<double>(plans[i].in) * scales[i]);
        if (out < 1) ctx_.fail("scales[{}] = {} leaves axis {} ({}) empty", i, scales[i], axes[i], plans[i].in);
        if (out > static_cast<double>(kMaxImportElements)) ctx_.fail("scales[{}] = {} makes axis {} too large", i, scales[i], axes[i]);
        plans[i].out = static_cast<int64_t>(out);
      }
    }

    ImportedValue y = x;
    std::vector<size_t> todo;
    for (size_t i = 0; i < n; ++i) {
      if (plans[i].in < 0) continue;
      const AxisPlan& p = plans[i];
      if (antialias_ && mode_ != "nearest" && p.scale < 1) {
        ctx_.fail("antialias=1 when downsampling (axis {}) is not supported", axes[i]);
      }
      if (p.out == p.in && p.scale == 1.0 && coordMode_ != "tf_crop_and_resize") continue;  // every transform is the identity
      checkConstantSize(p.out, p.in);
      todo.push_back(i);
    }
    for (size_t k = 0; k < todo.size(); ++k) {
      const size_t i = todo[k];
      y = resizeAxis(y, axes[i], static_cast<int64_t>(t.rank()), plans[i], k + 1 == todo.size());
    }
    if (todo.empty()) c_.result(Op::Identity, {y});
  }

 private:
  void readAttributes() {
    mode_ = ctx_.attrString("mode").value_or("nearest");
    if (mode_ != "nearest" && mode_ != "linear" && mode_ != "cubic") ctx_.fail("mode '{}' is not supported", mode_);
    if (upsample_) {
      if (mode_ == "cubic") ctx_.fail("Upsample has no mode 'cubic'");
      coordMode_ = "asymmetric";
      nearestMode_ = "floor";
      return;
    }
    coordMode_ = ctx_.attrString("coordinate_transformation_mode").value_or("half_pixel");
    static const char* kModes[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                   "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"};
    if (std::find(std::begin(kModes), std::end(kModes), coordMode_) == std::end(kModes)) {
      ctx_.fail("coordinate_transformation_mode '{}' is not supported", coordMode_);
    }
    nearestMode_ = ctx_.attrString("nearest_mode").value_or("round_prefer_floor");
    if (nearestMode_ != "round_prefer_floor" && nearestMode_ != "round_prefer_ceil" && nearestMode_ != "floor" &&
        nearestMode_ != "ceil") {
      ctx_.fail("nearest_mode '{}' is not supported", nearestMode_);
    }
    cubicA_ = ctx_.attrFloat("cubic_coeff_a", -0.75);
    excludeOutside_ = ctx_.attrInt("exclude_outside", 0) != 0;
    extrapolation_ = ctx_.attrFloat("extrapolation_value", 0.0);
    antialias_ = ctx_.attrInt("antialias", 0) != 0;
    aspect_ = ctx_.attrString("keep_aspect_ratio_policy").value_or("stretch");
    if (aspect_ != "stretch" && aspect_ != "not_larger" && aspect_ != "not_smaller") {
      ctx_.fail("keep_aspect_ratio_policy '{}' is not supported", aspect_);
    }
  }

  static std::vector<double> doubles(const ir::Tensor& t) {
    std::vector<double> v;
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.getAsDouble(i));
    return v;
  }

  void checkConstantSize(int64_t rows, int64_t cols) const {
    if (rows > 0 && cols > kMaxImportElements / rows) {
      ctx_.fail("a resize from {} to {} along one axis is too large (a constant of more than 2^26 elements)", cols, rows);
    }
  }

  // Where output index `o` of an axis samples the input (ONNX's coordinate transforms).
  // The output length in these formulas is in * scale (ONNX's reference), not the rounded size.
  double source(const AxisPlan& p, int64_t o) const {
    const double in = static_cast<double>(p.in), out = p.scale * in, x = static_cast<double>(o);
    if (coordMode_ == "half_pixel") return (x + 0.5) / p.scale - 0.5;
    if (coordMode_ == "pytorch_half_pixel") return out > 1 ? (x + 0.5) / p.scale - 0.5 : 0.0;
    if (coordMode_ == "align_corners") return out == 1 ? 0.0 : x * (in - 1) / (out - 1);
    if (coordMode_ == "asymmetric") return x / p.scale;
    if (coordMode_ == "tf_half_pixel_for_nn") return (x + 0.5) / p.scale;
    if (coordMode_ == "half_pixel_symmetric") {
      const double adjustment = static_cast<double>(p.out) / out;
      const double offset = in / 2 * (1 - adjustment);
      return offset + (x + 0.5) / p.scale - 0.5;
    }
    // tf_crop_and_resize
    return out > 1 ? p.roiStart * (in - 1) + x * (p.roiEnd - p.roiStart) * (in - 1) / (out - 1)
                     : 0.5 * (p.roiStart + p.roiEnd) * (in - 1);
  }

  int64_t nearest(double s) const {
    if (nearestMode_ == "floor") return static_cast<int64_t>(std::floor(s));
    if (nearestMode_ == "ceil") return static_cast<int64_t>(std::ceil(s));
    const double f = std::floor(s);
    if (s - f == 0.5) return static_cast<int64_t>(nearestMode_ == "round_prefer_floor" ? f : f + 1);
    return static_cast<int64_t>(std::round(s));
  }

  // The cubic convolution kernel of Keys with coefficient A, at distance d.
  double cubic(double d) const {
    const double a = cubicA_;
    d = std::abs(d);
    if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
    if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
    return 0;
  }

  bool outside(const AxisPlan& p, double s) const {
    return coordMode_ == "tf_crop_and_resize" && (s < 0 || s > static_cast<double>(p.in - 1));
  }

  // `v` resized along `axis` (of `rank`) as `p` says; the last one is the node's output.
  ImportedValue resizeAxis(const ImportedValue& v, int64_t axis, int64_t rank, const AxisPlan& p, bool last) {
    const std::string what = fmt::format("axis{}", axis);
    const ir::DType dtype = v.type().dtype;
    bool anyOutside = false;
    for (int64_t o = 0; o < p.out; ++o) anyOutside = anyOutside || outside(p, source(p, o));
    if (mode_ == "nearest" && !anyOutside) {
      ir::Tensor idx(ir::DType::I64, {p.out});
      for (int64_t o = 0; o < p.out; ++o) {
        idx.data<int64_t>()[o] = std::clamp<int64_t>(nearest(source(p, o)), 0, p.in - 1);
      }
      return finish(Op::Gather, {v, c_.constant(std::move(idx), what + "_index")}, {{"axis", axis}}, what, last);
    }
    // weights[o][i]: the share of input i in output o.
    ir::Tensor weights(dtype, {p.out, p.in});
    ir::Tensor fill(dtype, {p.out});
    for (int64_t o = 0; o < p.out; ++o) {
      const double s = source(p, o);
      if (outside(p, s)) {
        fill.setAsDouble(o, extrapolation_);
        continue;
      }
      std::vector<std::pair<int64_t, double>> taps;
      if (mode_ == "nearest") {
        taps.push_back({nearest(s), 1.0});
      } else if (mode_ == "linear") {
        const double f = std::floor(s);
        taps.push_back({static_cast<int64_t>(f), 1 - (s - f)});
        taps.push_back({static_cast<int64_t>(f) + 1, s - f});
      } else {
        const double f = std::floor(s), t = s - f;
        for (int k = -1; k <= 2; ++k) taps.push_back({static_cast<int64_t>(f) + k, cubic(t - k)});
      }
      double total = 0;
      for (auto& [i, w] : taps) {
        const bool in = i >= 0 && i < p.in;
        if (excludeOutside_ && !in) w = 0;
        total += w;
      }
      for (auto [i, w] : taps) {
        if (excludeOutside_) w /= total;
        const int64_t at = std::clamp<int64_t>(i, 0, p.in - 1);  // outside taps repeat the edge
        weights.setAsDouble(o * p.in + at, weights.getAsDouble(o * p.in + at) + w);
      }
    }
    // y = x · weightsᵀ along the axis: the last axis directly, the one before as weights · x,
    // any other moved last and back.
    ImportedValue y;
    auto transposed = [&] {  // [in, out], for x · weightsᵀ
      ir::Tensor wt(dtype, {p.in, p.out});
      for (int64_t o = 0; o < p.out; ++o) {
        for (int64_t i = 0; i < p.in; ++i) wt.setAsDouble(i * p.out + o, weights.getAsDouble(o * p.in + i));
      }
      return c_.constant(std::move(wt), what + "_weights");
    };
    if (axis == rank - 1) {
      y = c_.op(Op::MatMul, {v, transposed()}, what + "_mm");
    } else if (axis == rank - 2) {
      y = c_.op(Op::MatMul, {c_.constant(std::move(weights), what + "_weights"), v}, what + "_mm");
    } else {
      std::vector<int64_t> perm;
      for (int64_t a = 0; a < rank; ++a) {
        if (a != axis) perm.push_back(a);
      }
      perm.push_back(axis);
      std::vector<int64_t> back(static_cast<size_t>(rank));
      for (int64_t a = 0; a < rank; ++a) back[static_cast<size_t>(perm[static_cast<size_t>(a)])] = a;
      ImportedValue moved = c_.op(Op::Transpose, {v}, what + "_last", {{"perm", perm}});
      ImportedValue mm = c_.op(Op::MatMul, {moved, transposed()}, what + "_mm");
      y = c_.op(Op::Transpose, {mm}, what + "_back", {{"perm", back}});
    }
    if (!anyOutside) return last ? finish(Op::Identity, {y}, {}, what, last) : y;
    // Outputs outside the crop take the extrapolation value (their weights are all 0).
    std::vector<int64_t> fillShape(static_cast<size_t>(rank), 1);
    fillShape[static_cast<size_t>(axis)] = p.out;
    ImportedValue f = c_.op(Op::Reshape, {c_.constant(std::move(fill), what + "_fill")}, what + "_fill_shaped",
                            {{"shape", fillShape}});
    return finish(Op::Add, {y, f}, {}, what, last);
  }

  ImportedValue finish(Op op, const std::vector<ImportedValue>& ins, ir::AttrMap attrs, const std::string& what, bool last) {
    if (!last) return c_.op(op, ins, what, std::move(attrs));
    c_.result(op, ins, std::move(attrs));
    return {};
  }

  NodeContext& ctx_;
  Composer c_;
  std::string mode_, coordMode_, nearestMode_, aspect_;
  double cubicA_ = -0.75, extrapolation_ = 0;
  bool excludeOutside_ = false, antialias_ = false;
  bool upsample_ = false;
};

}  // namespace

void convertResize(NodeContext& ctx) { Resize(ctx, false).convert(); }
void convertUpsample(NodeContext& ctx) { Resize(ctx, true).convert(); }

}  // namespace policyc::frontend
