// Models and tensors in and out of the compiler: loading a model by file type, tensors to/from
// .npy, random inputs, running a loaded model on tensors and comparing tensors.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "policyc/ir/graph.h"
#include "policyc/ir/tensor.h"
#include "policyc/runtime/loader.h"

namespace policyc::driver {

// MODEL.onnx through the ONNX importer, MODEL.pir through the text parser; anything else is an
// error naming the accepted extensions.
std::unique_ptr<ir::Graph> loadModel(const std::string& path);
// Whether `path` is a compiled model to load rather than a model file to compile: a name ending
// in .so, or any ELF file (libm.so.6 is not a "model of type .6"; the loader then says what it is).
bool isSharedObject(const std::string& path);

ir::Tensor readTensor(const std::string& npyPath);
void writeTensor(const std::string& npyPath, const ir::Tensor& tensor);

// Random inputs for every graph input at the given batch size: f32/f64 standard normal, integers
// and u8 uniform in [0, 255] (bool 0/1), reproducible for a seed.
std::vector<ir::Tensor> randomInputs(const ir::Graph& graph, int64_t batch, uint64_t seed);

// Orders named inputs by the graph's signature; unknown or missing names are errors.
std::vector<ir::Tensor> orderInputs(const ir::Graph& graph, std::map<std::string, ir::Tensor> named);
std::vector<ir::Tensor> orderInputs(const std::vector<std::string>& expected, std::map<std::string, ir::Tensor> named);

// "shape=[1,12] min=-0.52 max=0.61 mean=0.013" (for integer tensors too).
std::string summarize(const ir::Tensor& tensor);

// Random inputs of these types at `batch`: floats normal(0, 1), integers and u8 uniform in
// [0, 255], bool 0/1; reproducible for a seed.
std::vector<ir::Tensor> randomTensors(const std::vector<ir::TensorType>& types, int64_t batch, uint64_t seed);

// A loaded model's input types (batch dimensions symbolic), for making inputs that fit it.
std::vector<ir::TensorType> inputTypes(const runtime::Model& model);

// Runs a loaded model on tensors in its input order; outputs shaped for the batch the inputs
// carry (the first input dimension the model declares -1).
std::vector<ir::Tensor> runModel(const runtime::Model& model, const std::vector<ir::Tensor>& inputs, int threads = 1);

struct TensorCheck {
  std::string name;   // output name, or the node's value name
  std::string type;   // "f32[1,12]"
  double maxAbs = 0, maxRel = 0;
  bool allclose = true;
  std::optional<double> rmse, refRmse;  // when the RMSE rule was consulted
  bool pass = true;
  std::string note;   // e.g. "shape [1,12] != [1,13]", "NaN where the reference has 2.5"
};

// Compares `got` with the reference `want` under allclose(rtol, atol) (integers and bools exactly,
// NaN matches NaN); fills maxAbs, maxRel, allclose, pass and note.
TensorCheck compareTensors(const std::string& name, const ir::Tensor& got, const ir::Tensor& want, double rtol, double atol);

}  // namespace policyc::driver
