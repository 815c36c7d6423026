// What the command line shares with tests: loading a model by file type, and tensors to/from .npy.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policyc/debug/check.h"
#include "policyc/ir/graph.h"
#include "policyc/ir/tensor.h"

namespace policyc::tools {

// MODEL.onnx through the ONNX importer, MODEL.pir through the text parser; anything else is an
// error naming the accepted extensions.
std::unique_ptr<ir::Graph> loadModel(const std::string& path);

ir::Tensor readTensor(const std::string& npyPath);
void writeTensor(const std::string& npyPath, const ir::Tensor& tensor);

// Random inputs for every graph input at the given batch size: f32/f64 standard normal, integers
// and u8 uniform in [0, 255] (bool 0/1), reproducible for a seed.
std::vector<ir::Tensor> randomInputs(const ir::Graph& graph, int64_t batch, uint64_t seed);
// The same for a list of input types (a compiled model's signature): debug::randomTensors.
using debug::randomTensors;

// Orders named inputs by the graph's signature; unknown or missing names are errors.
std::vector<ir::Tensor> orderInputs(const ir::Graph& graph, std::map<std::string, ir::Tensor> named);
std::vector<ir::Tensor> orderInputs(const std::vector<std::string>& expected, std::map<std::string, ir::Tensor> named);

// "shape=[1,12] min=-0.52 max=0.61 mean=0.013" (for integer tensors too).
std::string summarize(const ir::Tensor& tensor);

}  // namespace policyc::tools
