// Shape functions of the op table: output types, batch propagation and the errors they give.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "../../ir/src/op_impls.h"
#include "policyc/ir/error.h"
#include "policyc/ir/ops.h"

using namespace policyc;
using namespace policyc::ir;

namespace {

const Dim B = Dim::batch();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TensorType f32(Shape s) { return {DType::F32, std::move(s)}; }
TensorType t(DType dtype, Shape s) { return {dtype, std::move(s)}; }
using Ints = std::vector<int64_t>;

std::vector<TensorType> inferAll(Op op, std::vector<TensorType> inputs, AttrMap attrs = {}, int numOutputs = 1) {
  return inferOutputTypes(op, inputs, completeAttrs(opInfo(op), std::move(attrs)), numOutputs);
}
TensorType infer(Op op, std::vector<TensorType> inputs, AttrMap attrs = {}) {
  return inferAll(op, std::move(inputs), std::move(attrs)).at(0);
}

}  // namespace

TEST_CASE("shape: broadcastShapes follows numpy and propagates batch", "[shape]") {
  using impl::broadcastShapes;
  CHECK(broadcastShapes({B, 1, 4}, {3, 1}) == Shape{B, 3, 4});
  CHECK(broadcastShapes({B, 4}, {B, 4}) == Shape{B, 4});
  CHECK(broadcastShapes({1, 4}, {B, 1}) == Shape{B, 4});
  CHECK(broadcastShapes({}, {B}) == Shape{B});
  CHECK(broadcastShapes({5, 0}, {1}) == Shape{5, 0});
  CHECK_THROWS_WITH(broadcastShapes({B, 4}, {3, 4}), Catch::Contains("do not broadcast (batch vs 3)"));
  CHECK_THROWS_WITH(broadcastShapes({2}, {3}), Catch::Contains("[2] and [3] do not broadcast"));
}

TEST_CASE("shape: normalizeAxis and sliceRange", "[shape]") {
  CHECK(impl::normalizeAxis(-1, 3) == 2);
  CHECK(impl::normalizeAxis(0, 3) == 0);
  CHECK_THROWS_WITH(impl::normalizeAxis(3, 3), "axis 3 is out of range for rank 3");
  CHECK_THROWS_AS(impl::normalizeAxis(-4, 3), Error);

  auto range = [](int64_t s, int64_t e, int64_t st, int64_t n) {
    impl::SliceRange r = impl::sliceRange(s, e, st, n);
    return std::pair{r.start, r.length};
  };
  CHECK(range(2, 8, 2, 10) == std::pair<int64_t, int64_t>{2, 3});
  CHECK(range(0, kMax, 1, 10) == std::pair<int64_t, int64_t>{0, 10});
  CHECK(range(-3, kMax, 1, 10) == std::pair<int64_t, int64_t>{7, 3});
  CHECK(range(-1, kMin, -1, 10) == std::pair<int64_t, int64_t>{9, 10});
  CHECK(range(kMax, kMin, -1, 4) == std::pair<int64_t, int64_t>{3, 4});
  CHECK(range(-2, kMin, -3, 10) == std::pair<int64_t, int64_t>{8, 3});  // 8, 5, 2
  CHECK(range(5, 2, 1, 10).second == 0);
  CHECK(range(2, 5, -1, 10).second == 0);
  CHECK(range(-100, 100, 1, 10) == std::pair<int64_t, int64_t>{0, 10});
  CHECK(range(0, 3, 1, 0).second == 0);
  CHECK(impl::isFullSlice(0, kMax, 1));
  CHECK(impl::isFullSlice(0, std::numeric_limits<int32_t>::max(), 1));
  CHECK(impl::isFullSlice(-1, -kMax, -1));
  CHECK_FALSE(impl::isFullSlice(0, 1, 1));
  CHECK_FALSE(impl::isFullSlice(0, kMax, 2));
}

TEST_CASE("shape: gemm", "[shape]") {
  CHECK(infer(Op::Gemm, {f32({B, 17}), f32({256, 17}), f32({256})}, {{"trans_b", int64_t{1}}}) == f32({B, 256}));
  CHECK(infer(Op::Gemm, {f32({17, B}), f32({17, 8})}, {{"trans_a", int64_t{1}}}) == f32({B, 8}));
  CHECK(infer(Op::Gemm, {f32({2, 3}), f32({3, 4}), f32({2, 1})}) == f32({2, 4}));
  CHECK_THROWS_WITH(infer(Op::Gemm, {f32({B, 17}), f32({256, 16})}, {{"trans_b", int64_t{1}}}),
                    Catch::Contains("gemm: inner dims differ"));
  CHECK_THROWS_WITH(infer(Op::Gemm, {f32({2, 3}), f32({3, 4}), f32({3})}),
                    Catch::Contains("gemm: C f32[3] does not broadcast to the result f32[2,4]"));
  CHECK_THROWS_WITH(infer(Op::Gemm, {f32({2, 3, 1}), f32({3, 4})}), Catch::Contains("gemm: A must have rank 2"));
  CHECK_THROWS_WITH(infer(Op::Gemm, {f32({2, 3}), t(DType::F64, {3, 4})}), Catch::Contains("same dtype"));
}

TEST_CASE("shape: matmul broadcasts batch dims and handles 1-D operands", "[shape]") {
  CHECK(infer(Op::MatMul, {f32({B, 4}), f32({4, 5})}) == f32({B, 5}));
  CHECK(infer(Op::MatMul, {f32({2, 1, 3, 4}), f32({5, 4, 6})}) == f32({2, 5, 3, 6}));
  CHECK(infer(Op::MatMul, {f32({4}), f32({4, 5})}) == f32({5}));
  CHECK(infer(Op::MatMul, {f32({B, 3, 4}), f32({4})}) == f32({B, 3}));
  CHECK(infer(Op::MatMul, {f32({4}), f32({4})}) == f32({}));
  CHECK_THROWS_WITH(infer(Op::MatMul, {f32({B, 4}), f32({3, 5})}), Catch::Contains("matmul: inner dims differ"));
  CHECK_THROWS_WITH(infer(Op::MatMul, {f32({2, 3, 4}), f32({3, 4, 5})}), Catch::Contains("do not broadcast"));
}

TEST_CASE("shape: conv in 1, 2 and 3 spatial dims", "[shape]") {
  // Atari's first layer.
  CHECK(infer(Op::Conv, {f32({B, 4, 84, 84}), f32({32, 4, 8, 8}), f32({32})}, {{"strides", Ints{4, 4}}}) ==
        f32({B, 32, 20, 20}));
  CHECK(infer(Op::Conv, {f32({B, 16, 8, 8}), f32({16, 16, 3, 3})}, {{"pads", Ints{1, 1, 1, 1}}}) == f32({B, 16, 8, 8}));
  CHECK(infer(Op::Conv, {f32({1, 1, 7, 7}), f32({1, 1, 3, 3})}, {{"dilations", Ints{2, 2}}}) == f32({1, 1, 3, 3}));
  CHECK(infer(Op::Conv, {f32({1, 8, 5, 5}), f32({4, 2, 1, 1})}, {{"group", int64_t{4}}}) == f32({1, 4, 5, 5}));
  CHECK(infer(Op::Conv, {f32({B, 2, 10}), f32({3, 2, 3})}, {{"strides", Ints{2}}, {"pads", Ints{1, 0}}}) ==
        f32({B, 3, 5}));
  CHECK(infer(Op::Conv, {f32({1, 1, 4, 4, 4}), f32({2, 1, 2, 2, 2})}, {{"kernel_shape", Ints{2, 2, 2}}}) ==
        f32({1, 2, 3, 3, 3}));
  CHECK_THROWS_WITH(infer(Op::Conv, {f32({B, 3, 8, 8}), f32({8, 4, 3, 3})}),
                    "conv: input channels 3 do not match weight's 4 x group 1");
  CHECK_THROWS_WITH(infer(Op::Conv, {f32({B, 4, 8, 8}), f32({6, 1, 3, 3})}, {{"group", int64_t{4}}}),
                    Catch::Contains("output channels 6 are not divisible by group 4"));
  CHECK_THROWS_WITH(infer(Op::Conv, {f32({B, 3, 8, 8}), f32({8, 3, 3, 3})}, {{"kernel_shape", Ints{2, 2}}}),
                    Catch::Contains("kernel_shape 2x2 does not match W"));
  CHECK_THROWS_WITH(infer(Op::Conv, {f32({B, 3, 8, 8}), f32({8, 3, 3, 3}), f32({7})}),
                    Catch::Contains("conv: B must be [8]"));
  CHECK_THROWS_WITH(infer(Op::Conv, {f32({B, 3, 2, 2}), f32({8, 3, 3, 3})}), Catch::Contains("does not fit"));
  CHECK_THROWS_WITH(infer(Op::Conv, {f32({B, 3, 8, 8}), f32({8, 3, 3, 3})}, {{"strides", Ints{1}}}),
                    Catch::Contains("strides has 1 values, expected 2"));
  CHECK_THROWS_WITH(infer(Op::Conv, {t(DType::I32, {B, 3, 8, 8}), t(DType::I32, {8, 3, 3, 3})}),
                    Catch::Contains("must be f32 or f64"));
}

TEST_CASE("shape: pools with ceil_mode, pads and dilations", "[shape]") {
  AttrMap k2s2{{"kernel_shape", Ints{2}}, {"strides", Ints{2}}};
  CHECK(infer(Op::MaxPool, {f32({B, 3, 5})}, k2s2) == f32({B, 3, 2}));
  AttrMap ceil = k2s2;
  ceil["ceil_mode"] = int64_t{1};
  CHECK(infer(Op::MaxPool, {f32({B, 3, 5})}, ceil) == f32({B, 3, 3}));
  CHECK(infer(Op::AvgPool, {f32({B, 3, 6})}, ceil) == f32({B, 3, 3}));  // exact: no extra window
  // With pads 1+1 the fourth window would start in the end padding: dropped (onnx#5741).
  ceil["pads"] = Ints{1, 1};
  CHECK(infer(Op::MaxPool, {f32({B, 3, 5})}, ceil) == f32({B, 3, 3}));
  CHECK(infer(Op::MaxPool, {f32({1, 1, 9, 9})}, {{"kernel_shape", Ints{3, 3}}, {"dilations", Ints{2, 2}}}) ==
        f32({1, 1, 5, 5}));
  CHECK(infer(Op::AvgPool, {f32({1, 1, 3, 3, 3})}, {{"kernel_shape", Ints{2, 2, 2}}}) == f32({1, 1, 2, 2, 2}));
  CHECK_THROWS_WITH(infer(Op::MaxPool, {f32({B, 3, 5})}, {{"kernel_shape", Ints{2, 2}}}),
                    Catch::Contains("max_pool: kernel_shape has 2 values, expected 1"));
  CHECK_THROWS_WITH(infer(Op::AvgPool, {f32({B, 3})}, {{"kernel_shape", Ints{2}}}),
                    Catch::Contains("at least one spatial dim"));
  CHECK_THROWS_WITH(infer(Op::MaxPool, {f32({B, 3, 5})}), Catch::Contains("requires attribute 'kernel_shape'"));
  CHECK(infer(Op::GlobalAvgPool, {f32({B, 64, 7, 7})}) == f32({B, 64, 1, 1}));
}

TEST_CASE("shape: batch_norm and layer_norm", "[shape]") {
  TensorType c16 = f32({16});
  CHECK(infer(Op::BatchNorm, {f32({B, 16, 4, 4}), c16, c16, c16, c16}) == f32({B, 16, 4, 4}));
  CHECK_THROWS_WITH(infer(Op::BatchNorm, {f32({B, 16, 4, 4}), c16, f32({8}), c16, c16}),
                    Catch::Contains("batch_norm: B must be [16], got f32[8]"));
  CHECK(infer(Op::LayerNorm, {f32({B, 10}), f32({10}), f32({10})}) == f32({B, 10}));
  CHECK(infer(Op::LayerNorm, {f32({B, 3, 10}), f32({3, 10})}, {{"axis", int64_t{1}}}) == f32({B, 3, 10}));
  CHECK_THROWS_WITH(infer(Op::LayerNorm, {f32({B, 10}), f32({5})}),
                    Catch::Contains("scale f32[5] does not broadcast to the normalized shape [10]"));
  CHECK_THROWS_AS(infer(Op::LayerNorm, {f32({B, 10}), f32({10})}, {{"axis", int64_t{2}}}), Error);
}

TEST_CASE("shape: elementwise ops check dtypes", "[shape]") {
  CHECK(infer(Op::Add, {f32({B, 4}), f32({4})}) == f32({B, 4}));
  CHECK(infer(Op::Mul, {t(DType::I64, {2, 1}), t(DType::I64, {3})}) == t(DType::I64, {2, 3}));
  CHECK_THROWS_WITH(infer(Op::Sub, {f32({4}), t(DType::F64, {4})}),
                    "sub: A and B must have the same dtype, got f32 and f64");
  CHECK_THROWS_WITH(infer(Op::Add, {t(DType::Bool, {4}), t(DType::Bool, {4})}), Catch::Contains("bool operands"));
  CHECK_THROWS_WITH(infer(Op::Add, {f32({B, 4}), f32({2, 4})}), Catch::Contains("do not broadcast"));
  CHECK(infer(Op::Pow, {f32({B, 4}), t(DType::I64, {})}) == f32({B, 4}));
  CHECK(infer(Op::Less, {f32({B, 4}), f32({1})}) == t(DType::Bool, {B, 4}));
  CHECK(infer(Op::Equal, {t(DType::Bool, {3}), t(DType::Bool, {3})}) == t(DType::Bool, {3}));
  CHECK(infer(Op::Where, {t(DType::Bool, {B, 1}), f32({4}), f32({})}) == f32({B, 4}));
  CHECK_THROWS_WITH(infer(Op::Where, {f32({4}), f32({4}), f32({4})}), Catch::Contains("condition must be bool"));

  CHECK(infer(Op::Relu, {t(DType::I64, {B})}) == t(DType::I64, {B}));
  CHECK(infer(Op::Tanh, {f32({B, 3})}) == f32({B, 3}));
  CHECK_THROWS_WITH(infer(Op::Exp, {t(DType::I32, {3})}), "exp: X must be f32 or f64, got i32");
  CHECK(infer(Op::Not, {t(DType::Bool, {3})}) == t(DType::Bool, {3}));
  CHECK_THROWS_WITH(infer(Op::Not, {f32({3})}), Catch::Contains("not: X must be bool"));
  CHECK(infer(Op::Identity, {t(DType::Bool, {3})}) == t(DType::Bool, {3}));
  CHECK(infer(Op::Cast, {f32({B, 2})}, {{"to", std::string("u8")}}) == t(DType::U8, {B, 2}));
  CHECK_THROWS_WITH(infer(Op::Cast, {f32({2})}, {{"to", std::string("float32")}}),
                    Catch::Contains("cast: unknown dtype 'float32'"));
  CHECK(infer(Op::Softmax, {f32({B, 6})}) == f32({B, 6}));
  CHECK_THROWS_WITH(infer(Op::Softmax, {f32({B, 6})}, {{"axis", int64_t{2}}}), Catch::Contains("out of range"));
}

TEST_CASE("shape: reductions and argmax", "[shape]") {
  CHECK(infer(Op::ReduceMean, {f32({B, 3, 4})}, {{"axes", Ints{-1}}}) == f32({B, 3, 1}));
  CHECK(infer(Op::ReduceSum, {f32({B, 3, 4})}, {{"axes", Ints{1, 2}}, {"keepdims", int64_t{0}}}) == f32({B}));
  CHECK(infer(Op::ReduceMax, {f32({B, 3})}) == f32({1, 1}));
  CHECK(infer(Op::ReduceMax, {f32({B, 3})}, {{"keepdims", int64_t{0}}}) == f32({}));
  CHECK(infer(Op::ReduceSum, {f32({B, 3})}, {{"axes", Ints{0}}}) == f32({1, 3}));
  CHECK(infer(Op::ReduceSum, {f32({B, 3})}, {{"axes", Ints{0}}, {"keepdims", int64_t{0}}}) == f32({3}));
  CHECK_THROWS_WITH(infer(Op::ReduceSum, {f32({B, 3})}, {{"axes", Ints{1, -1}}}), Catch::Contains("appears twice"));
  CHECK(infer(Op::ArgMax, {f32({B, 6})}, {{"axis", int64_t{1}}}) == t(DType::I64, {B, 1}));
  CHECK(infer(Op::ArgMax, {f32({B, 6})}, {{"axis", int64_t{-1}}, {"keepdims", int64_t{0}}}) == t(DType::I64, {B}));
  CHECK_THROWS_WITH(infer(Op::ArgMax, {f32({B, 0})}, {{"axis", int64_t{1}}}), Catch::Contains("has size 0"));
}

TEST_CASE("shape: flatten and reshape keep batch linear", "[shape]") {
  CHECK(infer(Op::Flatten, {f32({B, 64, 7, 7})}) == f32({B, 3136}));
  CHECK(infer(Op::Flatten, {f32({2, 3, 4})}, {{"axis", int64_t{2}}}) == f32({6, 4}));
  CHECK(infer(Op::Flatten, {f32({2, 3, 4})}, {{"axis", int64_t{3}}}) == f32({24, 1}));
  CHECK(infer(Op::Flatten, {f32({B, 1, 4})}, {{"axis", int64_t{2}}}) == f32({B, 4}));
  CHECK_THROWS_WITH(infer(Op::Flatten, {f32({B, 4})}, {{"axis", int64_t{0}}}),
                    Catch::Contains("would be 4*batch") && Catch::Contains("not linear in batch"));

  CHECK(infer(Op::Reshape, {f32({B, 64, 7, 7})}, {{"shape", Ints{-1, 3136}}}) == f32({B, 3136}));
  CHECK(infer(Op::Reshape, {f32({B, 64, 7, 7})}, {{"shape", Ints{0, -1}}}) == f32({B, 3136}));
  CHECK(infer(Op::Reshape, {f32({B, 6})}, {{"shape", Ints{0, 2, 3}}}) == f32({B, 2, 3}));
  CHECK(infer(Op::Reshape, {f32({B, 2, 3})}, {{"shape", Ints{-1, 6}}}) == f32({B, 6}));
  CHECK(infer(Op::Reshape, {f32({2, 3, 4})}, {{"shape", Ints{4, -1}}}) == f32({4, 6}));
  CHECK(infer(Op::Reshape, {f32({2, 3, 4})}, {{"shape", Ints{0, 0, 2, 2}}}) == f32({2, 3, 2, 2}));
  CHECK_THROWS_WITH(infer(Op::Reshape, {f32({B, 4})}, {{"shape", Ints{-1, 2}}}),
                    Catch::Contains("would be 2*batch") && Catch::Contains("not linear in batch"));
  CHECK_THROWS_WITH(infer(Op::Reshape, {f32({B, 4})}, {{"shape", Ints{-1}}}), Catch::Contains("not linear in batch"));
  CHECK_THROWS_WITH(infer(Op::Reshape, {f32({2, 3})}, {{"shape", Ints{-1, -1}}}), Catch::Contains("more than one -1"));
  CHECK_THROWS_WITH(infer(Op::Reshape, {f32({2, 3})}, {{"shape", Ints{4, -1}}}), Catch::Contains("cannot reshape"));
  CHECK_THROWS_WITH(infer(Op::Reshape, {f32({2, 3})}, {{"shape", Ints{5}}}),
                    Catch::Contains("cannot reshape f32[2,3] (6 elements) into [5]"));
  CHECK_THROWS_WITH(infer(Op::Reshape, {f32({B, 3})}, {{"shape", Ints{3, 0, 0}}}), Catch::Contains("has rank 2"));
  CHECK_THROWS_WITH(infer(Op::Reshape, {f32({B, 3})}, {{"shape", Ints{3, 1}}}), Catch::Contains("cannot reshape"));
}

TEST_CASE("shape: transpose, concat and split", "[shape]") {
  CHECK(infer(Op::Transpose, {f32({B, 3, 4})}) == f32({4, 3, B}));
  CHECK(infer(Op::Transpose, {f32({B, 3, 4})}, {{"perm", Ints{0, 2, 1}}}) == f32({B, 4, 3}));
  CHECK_THROWS_WITH(infer(Op::Transpose, {f32({B, 3, 4})}, {{"perm", Ints{0, 1, 1}}}),
                    Catch::Contains("not a permutation"));

  CHECK(infer(Op::Concat, {f32({B, 3}), f32({B, 4}), f32({B, 0})}, {{"axis", int64_t{1}}}) == f32({B, 7}));
  CHECK(infer(Op::Concat, {f32({B, 3}), f32({0, 3})}, {{"axis", int64_t{0}}}) == f32({B, 3}));
  CHECK_THROWS_WITH(infer(Op::Concat, {f32({B, 3}), f32({B, 3})}, {{"axis", int64_t{0}}}),
                    Catch::Contains("not linear in batch"));
  CHECK_THROWS_WITH(infer(Op::Concat, {f32({B, 3}), f32({2, 3})}, {{"axis", int64_t{1}}}),
                    Catch::Contains("differs from input 0"));
  CHECK_THROWS_WITH(infer(Op::Concat, {f32({B, 3}), t(DType::F64, {B, 3})}, {{"axis", int64_t{1}}}),
                    Catch::Contains("dtype"));

  CHECK(inferAll(Op::Split, {f32({B, 6})}, {{"axis", int64_t{1}}}, 3) == std::vector<TensorType>(3, f32({B, 2})));
  CHECK(inferAll(Op::Split, {f32({B, 6})}, {{"axis", int64_t{1}}, {"split", Ints{1, 5}}}, 2) ==
        std::vector<TensorType>{f32({B, 1}), f32({B, 5})});
  CHECK(inferAll(Op::Split, {f32({5})}, {}, 3) == std::vector<TensorType>{f32({2}), f32({2}), f32({1})});
  CHECK_THROWS_WITH(inferAll(Op::Split, {f32({B, 6})}, {{"axis", int64_t{1}}, {"split", Ints{1, 4}}}, 2),
                    Catch::Contains("sum to 5"));
  CHECK_THROWS_WITH(inferAll(Op::Split, {f32({B, 6})}, {{"axis", int64_t{1}}, {"split", Ints{6}}}, 2),
                    Catch::Contains("1 sizes for 2 outputs"));
  CHECK_THROWS_WITH(inferAll(Op::Split, {f32({B, 6})}, {}, 2), Catch::Contains("cannot split the batch dim"));
}

TEST_CASE("shape: slice clamps like ONNX and keeps full batch slices", "[shape]") {
  CHECK(infer(Op::Slice, {f32({10})}, {{"starts", Ints{2}}, {"ends", Ints{8}}, {"steps", Ints{2}}}) == f32({3}));
  CHECK(infer(Op::Slice, {f32({10})}, {{"starts", Ints{-1}}, {"ends", Ints{kMin}}, {"steps", Ints{-1}}}) == f32({10}));
  CHECK(infer(Op::Slice, {f32({B, 10})}, {{"starts", Ints{1}}, {"ends", Ints{kMax}}, {"axes", Ints{-1}}}) ==
        f32({B, 9}));
  CHECK(infer(Op::Slice, {f32({B, 10})}, {{"starts", Ints{0, -3}}, {"ends", Ints{kMax, -1}}}) == f32({B, 2}));
  CHECK(infer(Op::Slice, {f32({B, 4})}, {{"starts", Ints{-1}}, {"ends", Ints{-kMax}}, {"steps", Ints{-1}}}) ==
        f32({B, 4}));
  CHECK_THROWS_WITH(infer(Op::Slice, {f32({B, 10})}, {{"starts", Ints{0}}, {"ends", Ints{1}}}),
                    Catch::Contains("axis 0 is batch"));
  CHECK_THROWS_WITH(infer(Op::Slice, {f32({10})}, {{"starts", Ints{0}}, {"ends", Ints{1}}, {"steps", Ints{0}}}),
                    Catch::Contains("step of axis 0 is 0"));
  CHECK_THROWS_WITH(infer(Op::Slice, {f32({10})}, {{"starts", Ints{0}}, {"ends", Ints{1, 2}}}),
                    Catch::Contains("1 starts but 2 ends"));
}

TEST_CASE("shape: squeeze, unsqueeze, gather and pad", "[shape]") {
  CHECK(infer(Op::Squeeze, {f32({B, 1, 3, 1})}) == f32({B, 3}));
  CHECK(infer(Op::Squeeze, {f32({B, 1, 3, 1})}, {{"axes", Ints{1}}}) == f32({B, 3, 1}));
  CHECK_THROWS_WITH(infer(Op::Squeeze, {f32({B, 1, 3})}, {{"axes", Ints{2}}}), Catch::Contains("has size 3, not 1"));
  CHECK_THROWS_WITH(infer(Op::Squeeze, {f32({B, 1, 3})}, {{"axes", Ints{0}}}),
                    Catch::Contains("has size batch, not 1"));
  CHECK(infer(Op::Unsqueeze, {f32({B, 3})}, {{"axes", Ints{1, -1}}}) == f32({B, 1, 3, 1}));
  CHECK(infer(Op::Unsqueeze, {f32({})}, {{"axes", Ints{0}}}) == f32({1}));
  CHECK_THROWS_AS(infer(Op::Unsqueeze, {f32({B, 3})}, {{"axes", Ints{4}}}), Error);

  CHECK(infer(Op::Gather, {f32({5, 4}), t(DType::I64, {B})}) == f32({B, 4}));
  CHECK(infer(Op::Gather, {f32({B, 5, 4}), t(DType::I32, {2, 3})}, {{"axis", int64_t{1}}}) == f32({B, 2, 3, 4}));
  CHECK(infer(Op::Gather, {f32({B, 5}), t(DType::I64, {})}, {{"axis", int64_t{1}}}) == f32({B}));
  CHECK_THROWS_WITH(infer(Op::Gather, {f32({5, 4}), f32({2})}), Catch::Contains("indices must be i32 or i64"));

  CHECK(infer(Op::Pad, {f32({B, 3, 4})}, {{"pads", Ints{0, 1, 2, 0, 1, 2}}}) == f32({B, 5, 8}));
  CHECK(infer(Op::Pad, {f32({3, 4})}, {{"pads", Ints{0, -1, 0, -1}}}) == f32({3, 2}));
  CHECK_THROWS_WITH(infer(Op::Pad, {f32({B, 3})}, {{"pads", Ints{1, 0, 0, 0}}}), Catch::Contains("axis 0 is batch"));
  CHECK_THROWS_WITH(infer(Op::Pad, {f32({3})}, {{"pads", Ints{3, 0}}, {"mode", std::string("reflect")}}),
                    Catch::Contains("smaller than"));
  CHECK_THROWS_WITH(infer(Op::Pad, {f32({3})}, {{"pads", Ints{1, 0}}, {"mode", std::string("wrap")}}),
                    Catch::Contains("mode must be"));
  CHECK_THROWS_WITH(infer(Op::Pad, {f32({3})}, {{"pads", Ints{1}}}), Catch::Contains("expected 2"));
}
