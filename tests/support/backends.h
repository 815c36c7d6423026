// Test helper: a graph's LLVM JIT as a runtime::Model, and the check that two builds of one graph
// (the C++ backend's and the LLVM backend's) agree bit for bit at 1-3 threads and with the
// reference interpreter.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "policyc/codegen/llvm_backend.h"
#include "policyc/driver/model_io.h"
#include "policyc/ir/interpreter.h"
#include "policyc/runtime/loader.h"

namespace policyc::testing {

inline runtime::Model jitModel(const ir::Graph& graph, const codegen::LlvmOptions& options = {}) {
  std::shared_ptr<codegen::JitModel> jit = codegen::jitCompile(codegen::generateLlvm(graph, options));
  return runtime::Model::adopt("<jit>", jit->descriptor(), jit->profile(), jit, [jit](const char* n) { return jit->symbol(n); });
}

inline std::vector<ir::TensorType> graphInputTypes(const ir::Graph& graph) {
  std::vector<ir::TensorType> types;
  for (const ir::Value* v : graph.inputs()) types.push_back(v->type());
  return types;
}

// Both builds of `graph` at each batch size on random inputs (`seed`): each the same bits at 1, 2
// and 3 threads, the two the same bits, the C++ build within `tolerance` of the interpreter.
inline void checkBitwiseBackends(const ir::Graph& graph, runtime::Model& cppModel, runtime::Model& llvmModel,
                                 std::initializer_list<int64_t> batches, uint64_t seed, double tolerance) {
  for (int64_t batch : batches) {
    std::vector<ir::Tensor> inputs = driver::randomTensors(graphInputTypes(graph), batch, seed);
    std::vector<ir::Tensor> want = ir::interpret(graph, inputs);
    std::vector<ir::Tensor> c1 = driver::runModel(cppModel, inputs, 1), l1 = driver::runModel(llvmModel, inputs, 1);
    for (int threads : {2, 3}) {
      std::vector<ir::Tensor> cN = driver::runModel(cppModel, inputs, threads), lN = driver::runModel(llvmModel, inputs, threads);
      for (size_t o = 0; o < want.size(); ++o) {
        INFO("batch " << batch << " threads " << threads << " output " << o);
        CHECK(std::memcmp(c1[o].bytes(), cN[o].bytes(), c1[o].nbytes()) == 0);
        CHECK(std::memcmp(l1[o].bytes(), lN[o].bytes(), l1[o].nbytes()) == 0);
      }
    }
    for (size_t o = 0; o < want.size(); ++o) {
      INFO("batch " << batch << " output " << o);
      CHECK(driver::compareTensors("", c1[o], want[o], tolerance, tolerance).pass);
      CHECK(std::memcmp(c1[o].bytes(), l1[o].bytes(), c1[o].nbytes()) == 0);
    }
  }
}

}  // namespace policyc::testing
