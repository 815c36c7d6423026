// Reference kernels (hand-computed cases) and the interpreter: rounding, validation, callbacks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>

#include "policyc/ir/error.h"
#include "policyc/ir/graph.h"
#include "policyc/ir/interpreter.h"

using namespace policyc;
using namespace policyc::ir;

namespace {

using Ints = std::vector<int64_t>;
using Values = std::vector<double>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Tensor make(DType dtype, Ints shape, const Values& values) {
  Tensor t(dtype, std::move(shape));
  REQUIRE(static_cast<size_t>(t.numel()) == values.size());
  for (size_t i = 0; i < values.size(); ++i) t.setAsDouble(static_cast<int64_t>(i), values[i]);
  return t;
}
Tensor f32(Ints shape, const Values& values) { return make(DType::F32, std::move(shape), values); }
Tensor f64(Ints shape, const Values& values) { return make(DType::F64, std::move(shape), values); }
Tensor i64(Ints shape, const Values& values) { return make(DType::I64, std::move(shape), values); }

Values values(const Tensor& t) {
  Values v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.getAsDouble(i));
  return v;
}

Tensor eval(Op op, std::vector<Tensor> inputs, AttrMap attrs = {}) { return evaluateOp(op, inputs, attrs).at(0); }

// Element-wise comparison that treats NaN as equal to NaN.
bool same(const Values& got, const Values& want, double tol = 1e-6) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) != std::isnan(got[i])) return false;
    if (!std::isnan(want[i]) && std::abs(got[i] - want[i]) > tol * std::max(1.0, std::abs(want[i]))) return false;
  }
  return true;
}

// CHECK with the values printed on failure.
#define CHECK_VALUES(tensor, ...)                   \
  do {                                              \
    Values got_ = values(tensor);                   \
    Values want_ = __VA_ARGS__;                     \
    INFO("got " << Catch::Detail::stringify(got_)); \
    CHECK(same(got_, want_));                       \
  } while (0)

Values iota(int n, double from = 1) {
  Values v;
  for (int i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

}  // namespace

TEST_CASE("kernel: conv with padding, stride, dilation and group", "[kernel]") {
  Tensor x = f32({1, 1, 3, 3}, iota(9));  // [[1,2,3],[4,5,6],[7,8,9]]
  SECTION("padding and stride") {
    Tensor y = eval(Op::Conv, {x, f32({1, 1, 2, 2}, {1, 1, 1, 1}), f32({1}, {0.5})},
                    {{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}});
    CHECK(y.shape() == Ints{1, 1, 2, 2});
    // Windows: {1}, {2,3}, {4,7}, {5,6,8,9}, plus the bias.
    CHECK_VALUES(y, {1.5, 5.5, 11.5, 28.5});
  }
  SECTION("dilation") {
    Tensor y = eval(Op::Conv, {x, f32({1, 1, 2, 2}, {1, 2, 3, 4})}, {{"dilations", Ints{2, 2}}});
    CHECK(y.shape() == Ints{1, 1, 1, 1});
    CHECK_VALUES(y, {1 * 1 + 2 * 3 + 3 * 7 + 4 * 9});
  }
  SECTION("group") {
    Tensor x2 = f32({1, 2, 2, 2}, iota(8));
    Tensor y = eval(Op::Conv, {x2, f32({2, 1, 1, 1}, {2, 3})}, {{"group", int64_t{2}}});
    CHECK_VALUES(y, {2, 4, 6, 8, 15, 18, 21, 24});
  }
  SECTION("group with several channels per group") {
    // 4 input channels, 2 groups, 1 output channel per group: out g = sum of its 2 channels * w.
    Tensor x4 = f32({1, 4, 1, 1}, {1, 2, 3, 4});
    Tensor y = eval(Op::Conv, {x4, f32({2, 2, 1, 1}, {1, 10, 100, 1000})}, {{"group", int64_t{2}}});
    CHECK_VALUES(y, {1 + 20, 300 + 4000});
  }
  SECTION("1-D and 3-D") {
    Tensor y1 = eval(Op::Conv, {f32({1, 1, 5}, {1, 2, 4, 8, 16}), f32({1, 1, 3}, {1, 0, -1})});
    CHECK_VALUES(y1, {-3, -6, -12});
    Tensor y3 = eval(Op::Conv, {f32({1, 1, 2, 2, 2}, iota(8)), f32({1, 1, 2, 2, 2}, Values(8, 1.0))});
    CHECK(y3.shape() == Ints{1, 1, 1, 1, 1});
    CHECK_VALUES(y3, {36});
  }
  SECTION("batch and output channels") {
    Tensor xb = f32({2, 1, 1, 2}, {1, 2, 3, 4});
    Tensor y = eval(Op::Conv, {xb, f32({2, 1, 1, 2}, {1, 1, 1, -1}), f32({2}, {0, 100})});
    CHECK_VALUES(y, {3, 99, 7, 99});
  }
}

TEST_CASE("kernel: max_pool with ceil_mode, pads and dilation", "[kernel]") {
  Tensor x = f32({1, 1, 5}, {1, 5, 2, 4, 3});
  AttrMap k2s2{{"kernel_shape", Ints{2}}, {"strides", Ints{2}}};
  CHECK_VALUES(eval(Op::MaxPool, {x}, k2s2), {5, 4});
  AttrMap ceil = k2s2;
  ceil["ceil_mode"] = int64_t{1};
  CHECK_VALUES(eval(Op::MaxPool, {x}, ceil), {5, 4, 3});
  ceil["pads"] = Ints{1, 1};
  CHECK_VALUES(eval(Op::MaxPool, {x}, ceil), {1, 5, 4});  // padding never wins
  CHECK_VALUES(eval(Op::MaxPool, {x}, {{"kernel_shape", Ints{2}}, {"dilations", Ints{2}}}), {2, 5, 3});
  CHECK_VALUES(eval(Op::MaxPool, {f32({1, 1, 3}, {-5, -6, -7})}, {{"kernel_shape", Ints{2}}, {"pads", Ints{1, 1}}}),
               {-5, -5, -6, -7});
  Tensor x2 = f32({1, 1, 3, 3}, iota(9));
  CHECK_VALUES(eval(Op::MaxPool, {x2}, {{"kernel_shape", Ints{2, 2}}}), {5, 6, 8, 9});
}

TEST_CASE("kernel: avg_pool count_include_pad and ceil_mode follow onnxruntime", "[kernel]") {
  Tensor x = f32({1, 1, 6}, iota(6));
  AttrMap attrs{{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"ceil_mode", int64_t{1}}};
  // Windows [1,2,3], [3,4,5], and [5,6] clipped at the end: divided by 2 either way.
  CHECK_VALUES(eval(Op::AvgPool, {x}, attrs), {2, 4, 5.5});
  attrs["count_include_pad"] = int64_t{1};
  CHECK_VALUES(eval(Op::AvgPool, {x}, attrs), {2, 4, 5.5});
  // With pads 1+1: windows start at -1, 1, 3, 5; the last reaches past the padded end (7).
  attrs["pads"] = Ints{1, 1};
  attrs["count_include_pad"] = int64_t{0};
  CHECK_VALUES(eval(Op::AvgPool, {x}, attrs), {1.5, 3, 5, 6});
  attrs["count_include_pad"] = int64_t{1};
  CHECK_VALUES(eval(Op::AvgPool, {x}, attrs), {1, 3, 5, 3});
  // 2-D, pads without ceil_mode.
  Tensor x2 = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  AttrMap pad2{{"kernel_shape", Ints{2, 2}}, {"pads", Ints{1, 1, 0, 0}}};
  CHECK_VALUES(eval(Op::AvgPool, {x2}, pad2), {1, 1.5, 2, 2.5});
  pad2["count_include_pad"] = int64_t{1};
  CHECK_VALUES(eval(Op::AvgPool, {x2}, pad2), {0.25, 0.75, 1, 2.5});
  CHECK_VALUES(eval(Op::GlobalAvgPool, {f32({1, 2, 2, 1}, {1, 2, 3, 5})}), {1.5, 4});
}

TEST_CASE("kernel: gemm and matmul", "[kernel]") {
  // A^T with A = [[1,2,3],[4,5,6]] stored transposed; B = I3 columns 0..1 scaled.
  Tensor at = f32({3, 2}, {1, 4, 2, 5, 3, 6});
  Tensor b = f32({2, 3}, {1, 0, 1, 0, 1, 1});  // transposed: B^T is 3x2 [[1,0],[0,1],[1,1]]
  Tensor c = f32({2, 1}, {10, 20});
  Tensor y =
      eval(Op::Gemm, {at, b, c}, {{"trans_a", int64_t{1}}, {"trans_b", int64_t{1}}, {"alpha", 2.0}, {"beta", 0.5}});
  // A @ B^T = [[4,5],[10,11]]; *2 + 0.5*C.
  CHECK(y.shape() == Ints{2, 2});
  CHECK_VALUES(y, {13, 15, 30, 32});

  CHECK_VALUES(eval(Op::MatMul, {f32({2, 2, 3}, iota(12)), f32({3, 1}, {1, 1, 1})}), {6, 15, 24, 33});
  Tensor batched = eval(Op::MatMul, {f32({2, 1, 1, 2}, {1, 2, 3, 4}), f32({3, 2, 1}, {1, 0, 0, 1, 1, 1})});
  CHECK(batched.shape() == Ints{2, 3, 1, 1});
  CHECK_VALUES(batched, {1, 2, 3, 3, 4, 7});
  Tensor vec = eval(Op::MatMul, {f32({2}, {1, 2}), f32({2, 3}, iota(6))});
  CHECK(vec.shape() == Ints{3});
  CHECK_VALUES(vec, {9, 12, 15});
  Tensor dotp = eval(Op::MatMul, {f32({3}, {1, 2, 3}), f32({3}, {4, 5, 6})});
  CHECK(dotp.shape().empty());
  CHECK_VALUES(dotp, {32});
}

TEST_CASE("kernel: batch_norm and layer_norm", "[kernel]") {
  Tensor x = f32({1, 2, 2}, {1, 2, 3, 4});
  Tensor y = eval(Op::BatchNorm, {x, f32({2}, {2, 1}), f32({2}, {0, 1}), f32({2}, {1, 3}), f32({2}, {4, 1})},
                  {{"epsilon", 0.0}});
  CHECK_VALUES(y, {0, 1, 1, 2});  // ch0: (x-1)/2*2, ch1: (x-3)/1*1+1

  Tensor ln = eval(Op::LayerNorm, {f32({2, 2}, {1, 3, 5, 5}), f32({2}, {1, 2}), f32({2}, {0, 1})}, {{"epsilon", 0.0}});
  CHECK_VALUES(ln, {-1, 3, kNaN, kNaN});  // second row has zero variance and eps 0
  Tensor ln2 =
      eval(Op::LayerNorm, {f32({1, 2, 2}, {1, 2, 3, 4}), f32({2}, {1, 1})}, {{"axis", int64_t{1}}, {"epsilon", 0.0}});
  double s = 1 / std::sqrt(1.25);
  CHECK_VALUES(ln2, {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s});
}

TEST_CASE("kernel: binary ops broadcast, divide integers toward zero, propagate NaN", "[kernel]") {
  CHECK_VALUES(eval(Op::Add, {f32({2, 1}, {1, 2}), f32({3}, {10, 20, 30})}), {11, 21, 31, 12, 22, 32});
  CHECK_VALUES(eval(Op::Div, {i64({4}, {-7, 7, -7, 6}), i64({4}, {2, -2, -2, 4})}), {-3, -3, 3, 1});
  CHECK_THROWS_WITH(eval(Op::Div, {i64({1}, {1}), i64({1}, {0})}), Catch::Contains("division by zero"));
  CHECK_VALUES(eval(Op::Div, {f32({1}, {1}), f32({1}, {0})}), {kInf});
  CHECK_VALUES(eval(Op::Max, {f32({3}, {kNaN, 1, 2}), f32({3}, {1, kNaN, 1})}), {kNaN, kNaN, 2});
  CHECK_VALUES(eval(Op::Min, {f32({3}, {kNaN, 1, 2}), f32({3}, {1, kNaN, 1})}), {kNaN, kNaN, 1});
  CHECK_VALUES(eval(Op::Pow, {f32({3}, {2, 4, -2}), i64({}, {2})}), {4, 16, 4});
  CHECK_VALUES(eval(Op::Pow, {i64({2}, {2, 3}), i64({2}, {3, -1})}), {8, 0});
  Tensor less = eval(Op::Less, {f32({3}, {1, 2, kNaN}), f32({1}, {2})});
  CHECK(less.dtype() == DType::Bool);
  CHECK_VALUES(less, {1, 0, 0});
  CHECK_VALUES(eval(Op::Equal, {i64({2}, {1, 2}), i64({2}, {1, 3})}), {1, 0});
  CHECK_VALUES(eval(Op::Greater, {f32({2}, {1, 3}), f32({2}, {2, 2})}), {0, 1});
  Tensor cond = make(DType::Bool, {2, 1}, {1, 0});
  CHECK_VALUES(eval(Op::Where, {cond, f32({2}, {1, 2}), f32({}, {-1})}), {1, 2, -1, -1});
}

TEST_CASE("kernel: mod, logical ops and the inclusive comparisons", "[kernel]") {
  // fmod=0: the divisor's sign (Python); fmod=1: the dividend's (C).
  CHECK_VALUES(eval(Op::Mod, {i64({4}, {7, -7, 7, -7}), i64({4}, {3, 3, -3, -3})}), {1, 2, -2, -1});
  CHECK_VALUES(eval(Op::Mod, {i64({4}, {7, -7, 7, -7}), i64({4}, {3, 3, -3, -3})}, {{"fmod", int64_t{1}}}), {1, -1, 1, -1});
  CHECK_VALUES(eval(Op::Mod, {f32({2}, {5.5, -5.5}), f32({1}, {2})}, {{"fmod", int64_t{1}}}), {1.5, -1.5});
  CHECK_THROWS_WITH(eval(Op::Mod, {i64({1}, {1}), i64({1}, {0})}), Catch::Contains("division by zero"));
  CHECK_THROWS_WITH(eval(Op::Mod, {f32({1}, {1}), f32({1}, {2})}), Catch::Contains("fmod=1"));
  Tensor t = make(DType::Bool, {4}, {0, 0, 1, 1});
  Tensor u = make(DType::Bool, {4}, {0, 1, 0, 1});
  CHECK_VALUES(eval(Op::And, {t, u}), {0, 0, 0, 1});
  CHECK_VALUES(eval(Op::Or, {t, u}), {0, 1, 1, 1});
  CHECK_VALUES(eval(Op::Xor, {t, u}), {0, 1, 1, 0});
  CHECK_THROWS_WITH(eval(Op::And, {f32({1}, {1}), f32({1}, {1})}), Catch::Contains("must be bool"));
  CHECK_VALUES(eval(Op::LessOrEqual, {f32({3}, {1, 2, kNaN}), f32({1}, {2})}), {1, 1, 0});
  CHECK_VALUES(eval(Op::GreaterOrEqual, {i64({3}, {1, 2, 3}), i64({1}, {2})}), {0, 1, 1});
}

TEST_CASE("kernel: gather_elements reads along its axis at each output position", "[kernel]") {
  Tensor data = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK_VALUES(eval(Op::GatherElements, {data, i64({2, 2}, {2, 0, -1, 1})}, {{"axis", int64_t{1}}}), {3, 1, 6, 5});
  CHECK_VALUES(eval(Op::GatherElements, {data, i64({1, 3}, {1, 0, 1})}, {{"axis", int64_t{0}}}), {4, 2, 6});
  CHECK_THROWS_WITH(eval(Op::GatherElements, {data, i64({1, 1}, {3})}, {{"axis", int64_t{1}}}), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(eval(Op::GatherElements, {data, i64({3, 1}, {0, 0, 0})}, {{"axis", int64_t{1}}}), Catch::Contains("exceed"));
}

TEST_CASE("kernel: rounding and libm's functions", "[kernel]") {
  CHECK_VALUES(eval(Op::Round, {f32({5}, {0.5, 1.5, 2.5, -0.5, -1.7})}), {0, 2, 2, -0.0, -2});  // halves to even
  CHECK_VALUES(eval(Op::Floor, {f32({2}, {-1.5, 1.5})}), {-2, 1});
  CHECK_VALUES(eval(Op::Ceil, {f32({2}, {-1.5, 1.5})}), {-1, 2});
  CHECK_VALUES(eval(Op::Cos, {f64({2}, {0, 1})}), {1, std::cos(1.0)});
  CHECK_VALUES(eval(Op::Atanh, {f64({1}, {0.5})}), {std::atanh(0.5)});
  CHECK_THROWS(eval(Op::Sin, {i64({1}, {1})}));
}

TEST_CASE("kernel: unary ops", "[kernel]") {
  CHECK_VALUES(eval(Op::Relu, {f32({3}, {-1, kNaN, 2})}), {0, kNaN, 2});
  CHECK_VALUES(eval(Op::Softplus, {f32({3}, {1000, -1000, 0})}), {1000, 0, std::log(2.0)});
  CHECK_VALUES(eval(Op::Sigmoid, {f32({3}, {0, -800, 800})}), {0.5, 0, 1});
  CHECK_VALUES(eval(Op::Erf, {f32({1}, {0.5})}), {std::erf(0.5)});
  CHECK_VALUES(eval(Op::LeakyRelu, {f32({2}, {-2, 2})}, {{"alpha", 0.5}}), {-1, 2});
  CHECK_VALUES(eval(Op::Elu, {f32({2}, {-1, 2})}), {std::exp(-1.0) - 1, 2});
  double alpha = 1.67326319217681884765625;
  double gamma = 1.05070102214813232421875;
  CHECK_VALUES(eval(Op::Selu, {f32({2}, {-1, 2})}), {gamma * alpha * (std::exp(-1.0) - 1), gamma * 2});
  CHECK_VALUES(eval(Op::HardSigmoid, {f32({4}, {-10, 0, 1, kNaN})}), {0, 0.5, 0.7, kNaN});
  CHECK_VALUES(eval(Op::Clip, {f32({4}, {-10, 0.5, 10, kNaN})}, {{"min", 0.0}, {"max", 1.0}}), {0, 0.5, 1, kNaN});
  CHECK_VALUES(eval(Op::Abs, {i64({2}, {-3, 3})}), {3, 3});
  CHECK_VALUES(eval(Op::Not, {make(DType::Bool, {2}, {0, 1})}), {1, 0});

  Tensor toInt = eval(Op::Cast, {f32({5}, {-2.7, 2.7, kNaN, 1e30, -0.5})}, {{"to", std::string("i32")}});
  CHECK(toInt.dtype() == DType::I32);
  CHECK_VALUES(toInt, {-2, 2, 0, 2147483647, 0});
  CHECK_VALUES(eval(Op::Cast, {f32({3}, {300, -5, 7.9})}, {{"to", std::string("u8")}}), {255, 0, 7});
  CHECK_VALUES(eval(Op::Cast, {f32({3}, {0, -0.1, kNaN})}, {{"to", std::string("bool")}}), {0, 1, 1});
  Tensor toF32 = eval(Op::Cast, {f64({1}, {0.1})}, {{"to", std::string("f32")}});
  CHECK(toF32.getAsDouble(0) == static_cast<double>(0.1f));
}

TEST_CASE("kernel: softmax, reductions and argmax", "[kernel]") {
  Tensor sm = eval(Op::Softmax, {f32({2, 3}, {1000, 1001, 1002, -1, 0, 1})});
  Values v = values(sm);
  CHECK(v[0] + v[1] + v[2] == Approx(1.0));
  CHECK(v[3] + v[4] + v[5] == Approx(1.0));
  CHECK(v[0] == Approx(v[3]));
  CHECK(v[2] == Approx(std::exp(2.0) / (1 + std::exp(1.0) + std::exp(2.0))));
  Tensor axis0 = eval(Op::Softmax, {f32({2, 2}, {0, 0, 1, 3})}, {{"axis", int64_t{0}}});
  CHECK_VALUES(axis0, {1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(3.0)), std::exp(1.0) / (1 + std::exp(1.0)),
                       std::exp(3.0) / (1 + std::exp(3.0))});
  Tensor lsm = eval(Op::LogSoftmax, {f32({2}, {1000, 1000})});
  CHECK_VALUES(lsm, {-std::log(2.0), -std::log(2.0)});

  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK_VALUES(eval(Op::ReduceSum, {x}, {{"axes", Ints{1}}}), {6, 15});
  CHECK_VALUES(eval(Op::ReduceMean, {x}, {{"axes", Ints{0}}, {"keepdims", int64_t{0}}}), {2.5, 3.5, 4.5});
  CHECK_VALUES(eval(Op::ReduceProd, {x}, {{"axes", Ints{1}}, {"keepdims", int64_t{0}}}), {6, 120});
  Tensor all = eval(Op::ReduceMax, {x});
  CHECK(all.shape() == Ints{1, 1});
  CHECK_VALUES(all, {6});
  CHECK_VALUES(eval(Op::ReduceMax, {f32({3}, {1, kNaN, 2})}), {kNaN});
  CHECK_VALUES(eval(Op::ReduceMean, {i64({3}, {1, 2, 2})}), {1});  // 5/3 truncated

  Tensor ties = f32({2, 4}, {1, 3, 3, 2, 7, 7, 7, 0});
  Tensor first = eval(Op::ArgMax, {ties}, {{"axis", int64_t{1}}});
  CHECK(first.dtype() == DType::I64);
  CHECK(first.shape() == Ints{2, 1});
  CHECK_VALUES(first, {1, 0});
  Tensor last =
      eval(Op::ArgMax, {ties}, {{"axis", int64_t{1}}, {"select_last_index", int64_t{1}}, {"keepdims", int64_t{0}}});
  CHECK(last.shape() == Ints{2});
  CHECK_VALUES(last, {2, 2});
  CHECK_VALUES(eval(Op::ArgMax, {ties}, {{"axis", int64_t{0}}}), {1, 1, 1, 0});
  CHECK_VALUES(eval(Op::ArgMax, {f32({3}, {1, kNaN, 5})}), {1});
}

TEST_CASE("kernel: data movement", "[kernel]") {
  Tensor x = f32({2, 3}, iota(6));
  Tensor tr = eval(Op::Transpose, {x});
  CHECK(tr.shape() == Ints{3, 2});
  CHECK_VALUES(tr, {1, 4, 2, 5, 3, 6});
  Tensor x3 = f32({2, 2, 2}, iota(8));
  CHECK_VALUES(eval(Op::Transpose, {x3}, {{"perm", Ints{1, 0, 2}}}), {1, 2, 5, 6, 3, 4, 7, 8});

  Tensor cat = eval(Op::Concat, {x, f32({2, 1}, {10, 20})}, {{"axis", int64_t{-1}}});
  CHECK_VALUES(cat, {1, 2, 3, 10, 4, 5, 6, 20});
  std::vector<Tensor> parts = evaluateOp(Op::Split, {x}, {{"axis", int64_t{1}}, {"split", Ints{2, 1}}}, 2);
  REQUIRE(parts.size() == 2);
  CHECK_VALUES(parts[0], {1, 2, 4, 5});
  CHECK_VALUES(parts[1], {3, 6});

  Tensor r = f32({10}, iota(10, 0));
  CHECK_VALUES(eval(Op::Slice, {r},
                    {{"starts", Ints{-2}}, {"ends", Ints{std::numeric_limits<int64_t>::min()}}, {"steps", Ints{-3}}}),
               {8, 5, 2});
  CHECK_VALUES(eval(Op::Slice, {x}, {{"starts", Ints{1}}, {"ends", Ints{100}}, {"axes", Ints{1}}}), {2, 3, 5, 6});
  CHECK_VALUES(eval(Op::Slice, {x}, {{"starts", Ints{-1, -1}}, {"ends", Ints{-100, -100}}, {"steps", Ints{-1, -2}}}),
               {6, 4, 3, 1});

  Tensor data = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  CHECK_VALUES(eval(Op::Gather, {data, i64({2}, {-1, 0})}), {5, 6, 1, 2});
  Tensor g1 = eval(Op::Gather, {data, make(DType::I32, {1}, {-1})}, {{"axis", int64_t{1}}});
  CHECK(g1.shape() == Ints{3, 1});
  CHECK_VALUES(g1, {2, 4, 6});
  CHECK_THROWS_WITH(eval(Op::Gather, {data, i64({1}, {3})}), Catch::Contains("index 3 is out of range"));

  Tensor row = f32({3}, {1, 2, 3});
  CHECK_VALUES(eval(Op::Pad, {row}, {{"pads", Ints{2, 2}}, {"mode", std::string("reflect")}}), {3, 2, 1, 2, 3, 2, 1});
  CHECK_VALUES(eval(Op::Pad, {row}, {{"pads", Ints{2, 2}}, {"mode", std::string("edge")}}), {1, 1, 1, 2, 3, 3, 3});
  CHECK_VALUES(eval(Op::Pad, {row}, {{"pads", Ints{1, 0}}, {"value", 9.0}}), {9, 1, 2, 3});
  CHECK_VALUES(eval(Op::Pad, {row}, {{"pads", Ints{-1, 1}}}), {2, 3, 0});
  CHECK_VALUES(eval(Op::Pad, {x}, {{"pads", Ints{1, 0, 0, 1}}, {"mode", std::string("edge")}}),
               {1, 2, 3, 3, 1, 2, 3, 3, 4, 5, 6, 6});

  Tensor flat = eval(Op::Reshape, {x}, {{"shape", Ints{3, -1}}});
  CHECK(flat.shape() == Ints{3, 2});
  CHECK_VALUES(flat, iota(6));
}

namespace {

// obs: f32[batch,2] -> relu(obs @ W^T + b) -> (h, sum over features).
std::unique_ptr<Graph> tinyPolicy() {
  auto g = std::make_unique<Graph>("tiny");
  Value* obs = g->addInput("obs", {DType::F32, {Dim::batch(), 2}});
  Value* w = g->addParam("w", f32({3, 2}, {1, 0, 0, 1, 1, -1}));
  Value* b = g->addParam("b", f32({3}, {0, 0, -10}));
  Node* fc = g->addOp(Op::Gemm, {obs, w, b}, {{"trans_b", int64_t{1}}}, "fc");
  Node* act = g->addOp(Op::Relu, {fc->output()}, {}, "act");
  Node* sum = g->addOp(Op::ReduceSum, {act->output()}, {{"axes", Ints{1}}, {"keepdims", int64_t{0}}}, "sum");
  Node* again = g->addOp(Op::Add, {sum->output(), sum->output()}, {}, "again");
  g->setOutputs({{"h", act->output()}, {"total", again->output()}});
  return g;
}

}  // namespace

TEST_CASE("interpreter: runs a graph at any batch size", "[interp]") {
  auto g = tinyPolicy();
  std::vector<Tensor> out = interpret(*g, {f32({2, 2}, {1, 2, 20, -3})});
  REQUIRE(out.size() == 2);
  CHECK(out[0].dtype() == DType::F32);
  CHECK(out[0].shape() == Ints{2, 3});
  CHECK_VALUES(out[0], {1, 2, 0, 20, 0, 13});
  CHECK(out[1].shape() == Ints{2});
  CHECK_VALUES(out[1], {6, 66});

  std::vector<Tensor> empty = interpret(*g, {f32({0, 2}, {})});
  CHECK(empty[0].shape() == Ints{0, 3});
  CHECK(empty[1].shape() == Ints{0});

  std::map<std::string, Tensor> named = interpretNamed(*g, {{"obs", f32({1, 2}, {3, 4})}});
  REQUIRE(named.count("h"));
  CHECK_VALUES(named.at("total"), {2 * (3 + 4)});
}

TEST_CASE("interpreter: validates inputs and names them", "[interp]") {
  auto g = tinyPolicy();
  CHECK_THROWS_WITH(interpret(*g, {f64({2, 2}, {1, 2, 3, 4})}), "input 'obs': expected f32[batch,2], got f64[2,2]");
  CHECK_THROWS_WITH(interpret(*g, {f32({2, 3}, iota(6))}), "input 'obs': expected f32[batch,2], got f32[2,3]");
  CHECK_THROWS_WITH(interpret(*g, {f32({4}, iota(4))}), "input 'obs': expected f32[batch,2], got f32[4]");
  CHECK_THROWS_WITH(interpret(*g, {}), "graph 'tiny' takes 1 input(s) (obs), got 0");
  CHECK_THROWS_WITH(interpretNamed(*g, {}), "missing input 'obs'");
  CHECK_THROWS_WITH(interpretNamed(*g, {{"obs", f32({1, 2}, {1, 2})}, {"x", f32({1}, {1})}}),
                    Catch::Contains("unknown input 'x'"));

  Graph two("two");
  Value* a = two.addInput("a", {DType::F32, {Dim::batch(), 2}});
  Value* c = two.addInput("c", {DType::F32, {Dim::batch(), 2}});
  Node* add = two.addOp(Op::Add, {a, c}, {}, "sum");
  two.setOutputs({{"y", add->output()}});
  CHECK_THROWS_WITH(interpret(two, {f32({2, 2}, iota(4)), f32({3, 2}, iota(6))}),
                    Catch::Contains("input 'c'") && Catch::Contains("batch = 2") && Catch::Contains("got f32[3,2]"));
  CHECK_VALUES(interpret(two, {f32({1, 2}, {1, 2}), f32({1, 2}, {3, 4})})[0], {4, 6});
}

TEST_CASE("interpreter: runtime kernel errors name the node", "[interp]") {
  Graph g("gather");
  Value* idx = g.addInput("idx", {DType::I64, {Dim::batch()}});
  Value* table = g.addParam("table", f32({3, 2}, iota(6)));
  Node* gather = g.addOp(Op::Gather, {table, idx}, {}, "rows");
  g.setOutputs({{"y", gather->output()}});
  CHECK_VALUES(interpret(g, {i64({2}, {-1, 1})})[0], {5, 6, 3, 4});
  CHECK_THROWS_WITH(interpret(g, {i64({1}, {5})}),
                    Catch::Contains("node 'rows' (gather)") && Catch::Contains("index 5 is out of range"));
}

TEST_CASE("interpreter: rounds to f32 after every op unless float64", "[interp]") {
  // (x + 1e-8) - x: in f32 the sum rounds back to x.
  Graph g("round");
  Value* x = g.addInput("x", {DType::F32, {1}});
  Value* eps = g.addParam("eps", f32({1}, {1e-8}));
  Node* add = g.addOp(Op::Add, {x, eps}, {}, "add");
  Node* sub = g.addOp(Op::Sub, {add->output(), x}, {}, "sub");
  g.setOutputs({{"y", sub->output()}});
  std::vector<Tensor> rounded = interpret(g, {f32({1}, {1})});
  CHECK(rounded[0].dtype() == DType::F32);
  CHECK(rounded[0].getAsDouble(0) == 0.0);

  InterpreterOptions exact;
  exact.float64 = true;
  std::vector<Tensor> precise = interpret(g, {f32({1}, {1})}, exact);
  CHECK(precise[0].dtype() == DType::F64);
  CHECK(precise[0].getAsDouble(0) == Approx(static_cast<double>(1e-8f)).epsilon(1e-6));
}

TEST_CASE("interpreter: onNode sees every op's outputs", "[interp]") {
  auto g = tinyPolicy();
  std::vector<std::string> seen;
  InterpreterOptions options;
  options.onNode = [&](const Node& node, const std::vector<Tensor>& outs) {
    seen.push_back(node.name());
    REQUIRE(outs.size() == 1);
    if (node.name() == "fc") CHECK_VALUES(outs[0], {1, 2, -11});
  };
  interpret(*g, {f32({1, 2}, {1, 2})}, options);
  CHECK(seen == std::vector<std::string>{"fc", "act", "sum", "again"});
}

TEST_CASE("interpreter: multi-output ops and values read late", "[interp]") {
  Graph g("split");
  Value* x = g.addInput("x", {DType::F32, {Dim::batch(), 4}});
  Node* split = g.addOp(Op::Split, {x}, {{"axis", int64_t{1}}}, std::vector<std::string>{"lo", "hi"});
  Node* neg = g.addOp(Op::Neg, {split->output(1)}, {}, "neg");
  g.addOp(Op::Mul, {x, x}, {}, "unused");  // a dead value
  Node* add = g.addOp(Op::Add, {split->output(0), neg->output()}, {}, "add");
  Node* out = g.addOp(Op::Concat, {add->output(), x, neg->output()}, {{"axis", int64_t{1}}}, "out");  // x read late
  g.setOutputs({{"y", out->output()}, {"lo", split->output(0)}});
  std::vector<Tensor> r = interpret(g, {f32({1, 4}, {1, 2, 3, 4})});
  CHECK_VALUES(r[0], {-2, -2, 1, 2, 3, 4, -3, -4});
  CHECK_VALUES(r[1], {1, 2});
}

TEST_CASE("interpreter: concurrent runs give identical results", "[interp]") {
  auto g = tinyPolicy();
  Tensor in = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> want = interpret(*g, {in});
  std::vector<std::vector<Tensor>> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] { got[i] = interpret(*g, {in}); });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& r : got) {
    REQUIRE(r.size() == want.size());
    for (size_t i = 0; i < r.size(); ++i) CHECK(r[i].bitEqual(want[i]));
  }
}
