// The Python binding (_policyc): compile or load a model and call it on numpy arrays, with the GIL
// released while the model runs. policyc/__init__.py adds from_torch and re-exports this.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "policyc/driver/model_io.h"
#include "policyc/codegen/cpp_backend.h"
#include "policyc/driver/compile.h"
#include "policyc/driver/debug_dir.h"
#include "policyc/runtime/cpu.h"
#include "policyc/ir/error.h"
#include "policyc/runtime/loader.h"
#include "policyc/support/escape.h"
#include "policyc/support/sizes.h"

namespace py = pybind11;
using namespace policyc;

namespace {

// numpy's name of a policyc dtype.
const char* numpyDType(policyc_dtype d) {
  switch (d) {
    case POLICYC_F32: return "float32";
    case POLICYC_F64: return "float64";
    case POLICYC_I32: return "int32";
    case POLICYC_I64: return "int64";
    case POLICYC_U8: return "uint8";
    case POLICYC_I8: return "int8";
    case POLICYC_BOOL: return "bool";
  }
  return "?";
}

// A model's name of a tensor as Python text: bytes that are not UTF-8 (a model file may hold any)
// become surrogates, and nameBytes gives them back, so every name round-trips (PEP 383).
py::str pyName(const std::string& name) {
  PyObject* s = PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "surrogateescape");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}
std::string nameBytes(const py::handle& key) {
  if (!py::isinstance<py::str>(key)) throw py::value_error("a name must be a str, got " + std::string(py::str(key.get_type())));
  return py::reinterpret_borrow<py::str>(key).attr("encode")("utf-8", "surrogateescape").cast<std::string>();
}

// This module's own file, for the cache key: a rebuilt binding never reuses an old compile.
std::string moduleId() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&moduleId), &info) && info.dli_fname) return driver::fileHash(info.dli_fname);
  return "unknown";
}

class Policy {
 public:
  Policy(runtime::Model model, int threads) : model_(std::move(model)), threads_(threads) {
    checkThreads(threads);
    // numpy dtypes made once: a call compares type numbers instead of building strings.
    for (const runtime::TensorSpec& s : model_.inputs()) inDTypes_.push_back(py::dtype(numpyDType(s.dtype)));
    for (const runtime::TensorSpec& s : model_.outputs()) outDTypes_.push_back(py::dtype(numpyDType(s.dtype)));
  }

  // Inputs by position and by name, in the model's order; outputs as a tuple or dict.
  py::tuple call(const py::args& args, const py::kwargs& kwargs) {
    std::vector<py::array> outs = run(args, kwargs);
    py::tuple t(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) t[i] = outs[i];
    return t;
  }
  py::dict callDict(const py::args& args, const py::kwargs& kwargs) {
    std::vector<py::array> outs = run(args, kwargs);
    py::dict d;
    for (size_t i = 0; i < outs.size(); ++i) d[pyName(model_.outputs()[i].name)] = outs[i];
    return d;
  }

  py::list describe(const std::vector<runtime::TensorSpec>& specs) const {
    py::list l;
    for (const runtime::TensorSpec& s : specs) {
      py::list shape;
      for (int64_t d : s.shape) shape.append(d == -1 ? py::object(py::none()) : py::object(py::int_(d)));
      py::dict e;
      e["name"] = pyName(s.name);
      e["dtype"] = numpyDType(s.dtype);
      e["shape"] = py::tuple(shape);
      l.append(e);
    }
    return l;
  }
  py::list inputs() const { return describe(model_.inputs()); }
  py::list weightSpecs() const { return describe(model_.weights()); }

  // {name: array} -> the model's set_weights: each a float32 array of the weight's shape (any
  // other dtype is an error, not a silent cast); checked, then packed once.
  void setWeights(const py::dict& given) {
    std::vector<py::array> arrays;
    std::vector<std::vector<int64_t>> shapes;
    arrays.reserve(given.size());
    shapes.reserve(given.size());
    std::vector<std::pair<std::string, runtime::TensorView>> views;
    for (const auto& [k, v] : given) {
      const std::string name = nameBytes(k);
      py::array a = py::isinstance<py::array>(v) ? py::reinterpret_borrow<py::array>(v) : py::array::ensure(v);
      if (!a) throw py::value_error("weight '" + escape::message(name) + "' is not an array");
      if (!a.dtype().equal(py::dtype::of<float>())) {
        throw py::value_error("weight '" + escape::message(name) + "': expected dtype float32, got " + std::string(py::str(a.dtype())));
      }
      a = py::array::ensure(a, py::array::c_style);
      if (!a) throw py::error_already_set();
      arrays.push_back(a);
      shapes.emplace_back(a.shape(), a.shape() + a.ndim());
      views.emplace_back(name, runtime::TensorView(POLICYC_F32, std::span<const int64_t>(shapes.back()), static_cast<const void*>(a.data())));
    }
    py::gil_scoped_release release;
    model_.setWeights(views);
  }

  // {name: a new float32 array} of every weight as the model now has it.
  py::dict getWeights() const {
    py::dict d;
    const auto& specs = model_.weights();
    for (size_t i = 0; i < specs.size(); ++i) {
      py::array_t<float> a(std::vector<py::ssize_t>(specs[i].shape.begin(), specs[i].shape.end()));
      model_.getWeight(i, a.mutable_data());
      d[pyName(specs[i].name)] = a;
    }
    return d;
  }
  py::list outputs() const { return describe(model_.outputs()); }
  const std::string& name() const { return model_.name(); }
  const std::string& path() const { return model_.path(); }
  const std::string& target() const { return model_.target(); }
  const std::string& precision() const { return model_.precision(); }
  int threads() const { return threads_; }
  void setThreads(int t) {
    checkThreads(t);
    threads_ = t;
  }
  static void checkThreads(int t) {
    if (t < 1 || t > 1024) throw py::value_error("threads must be between 1 and 1024, got " + std::to_string(t));
  }

  std::vector<uintptr_t> inputAddresses(const py::args& args, const py::kwargs& kwargs) {
    Call c = prepare(args, kwargs);
    std::vector<uintptr_t> a;
    for (const auto& v : c.in) a.push_back(reinterpret_cast<uintptr_t>(v.data));
    return a;
  }

  // Median nanoseconds of `calls` runs of the C ABI itself on these inputs (no Python, no checks):
  // the baseline the binding's own overhead is measured against.
  double abiCallNs(const py::tuple& inputs, int calls) {
    Call c = prepare(inputs, py::dict());
    std::vector<const void*> ip;
    std::vector<void*> op;
    for (const auto& v : c.in) ip.push_back(v.data);
    for (const auto& v : c.out) op.push_back(v.data);
    size_t bytes = (model_.workspaceBytes(c.batch) + 63) / 64 * 64;
    std::unique_ptr<void, decltype(&std::free)> ws(bytes ? std::aligned_alloc(64, bytes) : nullptr, &std::free);
    std::vector<double> ns;
    py::gil_scoped_release release;
    for (int i = 0; i < calls; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      model_.runUnchecked(ip.data(), op.data(), c.batch, ws.get(), threads_);
      ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ns.begin(), ns.end());
    return ns.empty() ? 0.0 : ns[ns.size() / 2];
  }

 private:
  // Everything one call needs, owned by the call: two Python threads may call one Policy at once
  // (the GIL is released while the model runs).
  struct Call {
    std::vector<py::array> inputs, outputs;
    std::vector<std::vector<int64_t>> shapes;  // the views point into these (reserved: never moved)
    std::vector<runtime::TensorView> in, out;
    int64_t batch = 1;
  };

  // Checks the arguments against the signature; the views use the input arrays without a copy
  // when they are C-contiguous (else one contiguous copy); the outputs are new arrays.
  Call prepare(const py::tuple& args, const py::dict& kwargs) {
    const auto& specs = model_.inputs();
    if (args.size() > specs.size()) {
      throw py::value_error(model_.name() + " takes " + std::to_string(specs.size()) + " inputs, got " + std::to_string(args.size()));
    }
    std::vector<py::object> given(specs.size());
    for (size_t i = 0; i < args.size(); ++i) given[i] = args[i];
    for (const auto& [k, v] : kwargs) {
      std::string key = nameBytes(k);
      auto it = std::find_if(specs.begin(), specs.end(), [&](const runtime::TensorSpec& s) { return s.name == key; });
      if (it == specs.end()) {
        std::string names;
        for (const auto& s : specs) names += (names.empty() ? "" : ", ") + s.name;
        throw py::value_error("unknown input '" + escape::message(key) + "' (the model's inputs: " + escape::message(names) + ")");
      }
      size_t i = static_cast<size_t>(it - specs.begin());
      if (given[i]) throw py::value_error("input '" + escape::message(key) + "' is given twice");
      given[i] = py::reinterpret_borrow<py::object>(v);
    }
    Call c;
    const size_t n = specs.size() + model_.outputs().size();
    c.shapes.reserve(n);
    c.inputs.reserve(specs.size());
    c.in.reserve(specs.size());
    c.outputs.reserve(model_.outputs().size());
    c.out.reserve(model_.outputs().size());
    int64_t batch = -1;
    for (size_t i = 0; i < specs.size(); ++i) {
      if (!given[i]) throw py::value_error("missing input '" + specs[i].name + "'");
      // An ndarray is used as it is; anything else goes through numpy's conversion.
      py::array a = py::isinstance<py::array>(given[i]) ? py::reinterpret_borrow<py::array>(given[i])
                                                        : py::array::ensure(given[i]);
      if (!a) throw py::value_error("input '" + specs[i].name + "' is not an array");
      if (!a.dtype().equal(inDTypes_[i])) {  // also catches a non-native byte order
        throw py::value_error("input '" + specs[i].name + "': expected dtype " + std::string(numpyDType(specs[i].dtype)) +
                              ", got " + std::string(py::str(a.dtype())));
      }
      std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
      for (size_t d = 0; d < specs[i].shape.size() && d < shape.size(); ++d) {
        if (specs[i].shape[d] == -1 && batch < 0) batch = shape[d];
      }
      // The shape is checked before any copy is made: a broadcast view of 2^40 rows is an error,
      // not a copy attempt.
      checkShape(specs[i], shape, batch < 0 ? 1 : batch);
      if (!(a.flags() & py::array::c_style)) {
        py::array copy = py::array::ensure(a, py::array::c_style);
        if (!copy) {
          PyErr_SetString(PyExc_MemoryError, ("cannot make a C-contiguous copy of input '" + escape::message(specs[i].name) + "'").c_str());
          throw py::error_already_set();
        }
        a = copy;
      }
      c.inputs.push_back(a);
      c.shapes.push_back(std::move(shape));
      c.in.emplace_back(specs[i].dtype, std::span<const int64_t>(c.shapes.back()), static_cast<const void*>(a.data()));
    }
    c.batch = batch < 0 ? 1 : batch;
    for (size_t o = 0; o < model_.outputs().size(); ++o) {
      const runtime::TensorSpec& s = model_.outputs()[o];
      c.shapes.push_back(s.shapeAt(c.batch));
      const std::vector<int64_t>& shape = c.shapes.back();
      c.outputs.emplace_back(outDTypes_[o], std::vector<py::ssize_t>(shape.begin(), shape.end()));
      c.out.emplace_back(s.dtype, std::span<const int64_t>(shape), c.outputs.back().mutable_data());
    }
    return c;
  }

  // An input's shape against its spec at `batch` (rank, static dims, the batch within the runtime's
  // limit); the runtime checks the same again, but only after an input has been made contiguous.
  static void checkShape(const runtime::TensorSpec& spec, const std::vector<int64_t>& shape, int64_t batch) {
    auto wrong = [&] {
      std::string got = std::string(runtime::dtypeName(spec.dtype)) + "[";  // the dtype matched already
      for (size_t d = 0; d < shape.size(); ++d) got += (d ? "," : "") + std::to_string(shape[d]);
      return "input '" + escape::message(spec.name) + "': expected " + spec.str() + ", got " + got + "]";
    };
    if (batch > sizes::kMaxBatch) {
      throw py::value_error(wrong() + " (the batch may be at most " + std::to_string(sizes::kMaxBatch) + ")");
    }
    if (shape.size() != spec.shape.size()) throw py::value_error(wrong());
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] != (spec.shape[d] == -1 ? batch : spec.shape[d])) throw py::value_error(wrong());
    }
  }

  std::vector<py::array> run(const py::tuple& args, const py::dict& kwargs) {
    Call c = prepare(args, kwargs);
    const int threads = threads_;  // read under the GIL: another thread may set it meanwhile
    {
      py::gil_scoped_release release;
      model_.run(c.in, c.out, c.batch, threads);  // ModelError (shapes) becomes ValueError
    }
    return std::move(c.outputs);
  }

  runtime::Model model_;
  int threads_;
  std::vector<py::dtype> inDTypes_, outDTypes_;
};

// backend None: llvm (codegen::kDefaultBackend), as on the command line.
std::unique_ptr<Policy> compilePolicy(const std::string& path, const std::optional<std::string>& backend, bool fuse,
                                      const std::string& mode, const std::string& target, int threads,
                                      const std::optional<std::string>& debugDir, bool externKernels,
                                      const std::vector<int64_t>& tuneBatch, bool updatableWeights,
                                      const std::string& precision, const std::vector<std::string>& keepFp32,
                                      int64_t rowBlockBytes) {
  if (!driver::isCompileMode(mode)) throw py::value_error("mode must be 'default' or 'max-autotune', got '" + mode + "'");
  driver::CompileRequest request;
  request.modelPath = path;
  if (backend) {
    try {
      request.backend = codegen::parseBackend(*backend, true);
    } catch (const Error& e) {
      throw py::value_error(escape::message(e.what()));
    }
  }
  request.fuse = fuse;
  request.mode = mode;
  request.cpp.name = "model";
  request.cpp.target = target;
  request.cpp.externKernels = externKernels;
  request.updatableWeights = updatableWeights;
  try {
    request.cpp.precision = codegen::parsePrecision(precision);
  } catch (const Error& e) {
    throw py::value_error(escape::message(e.what()));
  }
  request.cpp.keepFp32 = keepFp32;
  if (rowBlockBytes < 0) throw py::value_error("row_block_bytes must be 0 or more, got " + std::to_string(rowBlockBytes));
  request.cpp.rowBlockBytes = rowBlockBytes;
  if (!tuneBatch.empty()) request.cpp.tuneBatches = tuneBatch;
  request.debugDir = debugDir.value_or("");
  std::string so;
  {
    py::gil_scoped_release release;
    driver::validateTarget(request);
    so = driver::compileCached(request, moduleId(), [&] { return driver::loadModel(path); });
  }
  return std::make_unique<Policy>(runtime::Model::load(so), threads);
}

}  // namespace

PYBIND11_MODULE(_policyc, m) {
  m.doc() = "policyc: compiled RL policies callable on numpy arrays";
  // Debug directories name and record what compiled: here, this Python process.
  {
    std::string line = "python";
    py::module_ sys = py::module_::import("sys");
    if (py::hasattr(sys, "argv")) {  // an embedded interpreter may have none
      for (const py::handle& a : sys.attr("argv")) {
        // Bytes as the OS gave them (an argument need not be valid UTF-8); command.txt escapes them.
        py::object raw = py::str(a).attr("encode")("utf-8", "surrogateescape");
        line += " " + raw.cast<std::string>();
      }
    }
    driver::setInvocation("python", line);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const runtime::ModelError& e) {
      PyErr_SetString(PyExc_ValueError, escape::message(e.what()).c_str());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, escape::message(e.what()).c_str());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    } catch (const std::length_error& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });
  py::class_<Policy>(m, "Policy")
      .def("__call__", &Policy::call, "run the model: inputs by position or name; the outputs as a tuple of arrays")
      .def("run_dict", &Policy::callDict, "run the model; the outputs as a dict by name")
      .def_property_readonly("inputs", &Policy::inputs, "[{'name', 'dtype', 'shape' (None: batch)}] of the inputs")
      .def_property_readonly("outputs", &Policy::outputs, "the same for the outputs")
      .def_property_readonly("name", &Policy::name)
      .def_property_readonly("path", &Policy::path, "the compiled .so")
      .def_property_readonly("target", &Policy::target, "what the code was compiled for (native, x86-64-v3, ...)")
      .def_property_readonly("precision", &Policy::precision, "how its weights are stored: fp32, bf16-weights, bf16, int8-weights")
      .def_property("threads", &Policy::threads, &Policy::setThreads, "threads each call uses")
      .def_property_readonly("weights", &Policy::weightSpecs,
                             "[{'name', 'dtype', 'shape'}] of the weights set_weights may replace (compiled with "
                             "updatable_weights=True; [] otherwise)")
      .def("set_weights", &Policy::setWeights, py::arg("weights"),
           "replace weights {name: float32 array of its shape} (the others keep theirs): checked, packed once, safe "
           "against concurrent calls (each sees the old weights or the new ones)")
      .def("get_weights", &Policy::getWeights, "{name: float32 array} of every weight as the model now has it")
      .def("_input_addresses", &Policy::inputAddresses,
           "the addresses a call would read its inputs from (tests: contiguous arrays are not copied)")
      .def("_abi_call_ns", &Policy::abiCallNs, py::arg("inputs"), py::arg("calls") = 10000,
           "median ns of the C ABI run itself on these inputs (for measuring the binding's overhead)")
      .def("__repr__", [](const Policy& p) { return "<policyc.Policy " + p.name() + " from " + p.path() + ">"; });
  m.def("compile", &compilePolicy, py::arg("path"), py::arg("backend") = py::none(), py::arg("fuse") = true, py::arg("mode") = "default",
        py::arg("target") = "native", py::arg("threads") = 1, py::arg("debug_dir") = py::none(),
        py::arg("extern_kernels") = true, py::arg("tune_batch") = std::vector<int64_t>{}, py::arg("updatable_weights") = false,
        py::arg("precision") = "fp32", py::arg("keep_fp32") = std::vector<std::string>{},
        py::arg("row_block_bytes") = codegen::CodegenOptions::kRowBlockBytes,
        "compile an .onnx or .pir model (cached in POLICYC_CACHE_DIR) and load it; backend 'llvm' (default) or 'cpp'; "
        "fuse=False: one kernel per graph node; mode 'max-autotune' "
        "times every GEMM/conv implementation at tune_batch (default 1,16,64); extern_kernels=False keeps oneDNN out; "
        "updatable_weights=True: the weights can be replaced later (Policy.set_weights) without recompiling; "
        "precision 'bf16-weights', 'bf16' or 'int8-weights' stores linear/conv weights narrower, keep_fp32 names "
        "layers that stay fp32 (docs/precision.md); row_block_bytes: a large batch runs in blocks of rows whose "
        "activations fit this many bytes (0: whole)");
  // What policyc.load_bytes and Policy.to_bytes (policyc/__init__.py) build on.
  m.attr("ABI_VERSION") = POLICYC_ABI_VERSION;
  m.def("_host_cpu_features", &runtime::hostCpuFeatures, "the instruction-set extensions of this CPU that compiled code may use");
  m.def("_target_cpu_features", &runtime::targetCpuFeatures, py::arg("target"),
        "the extensions code compiled for `target` may use (native: this machine's)");
  m.def("_cache_dir", [] { return driver::cacheDir().string(); }, "the compile cache (POLICYC_CACHE_DIR, ...)");
  m.def(
      "load", [](const std::string& so, int threads) { return std::make_unique<Policy>(runtime::Model::load(so), threads); },
      py::arg("path"), py::arg("threads") = 1, "load a compiled model (.so)");
}
