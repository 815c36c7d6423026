// The backends a model runs on, by name: one enum every command, the driver and the Python
// binding share (a name is parsed once, at the edge; everything behind it switches on the enum).
#pragma once

#include <string>
#include <string_view>

#include "policyc/ir/error.h"

namespace policyc::codegen {

// interp: the reference interpreter (nothing compiled); cpp: generated C++ built by the system
// compiler into a .so; llvm: LLVM IR, JIT-compiled in-process or built into the same kind of .so.
// Fusion is not a backend: CompileRequest::fuse / --no-fuse turns it off for either compiler.
enum class Backend { Interp, Cpp, Llvm };

// The default of every command and of the Python binding.
constexpr Backend kDefaultBackend = Backend::Llvm;

const char* backendName(Backend backend);  // interp | cpp | llvm
// The backend called `name`; policyc::Error listing the valid names otherwise ("nofuse" says
// what replaced it). With compiling = true "interp" is refused too.
Backend parseBackend(std::string_view name, bool compiling = false);

// Whether this compiler was built with oneDNN (libdnnl-dev, CMake's POLICYC_ONEDNN): its
// primitives are implementations of conv and linear kernels then; without it every kernel of
// every model is generated code, whatever CodegenOptions::externKernels says.
bool onednnBuiltIn();

// Runs `emit` (lowering and emission for `backend`); an UnsupportedError from it is re-thrown
// naming the backend: "unsupported in backend llvm: node 'x' (op): ...".
template <class F>
auto inBackend(Backend backend, F&& emit) -> decltype(emit()) {
  try {
    return emit();
  } catch (const UnsupportedError& e) {
    unsupported("unsupported in backend {}: {}", backendName(backend), e.what());
  }
}

}  // namespace policyc::codegen
