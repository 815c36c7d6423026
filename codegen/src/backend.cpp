// Backend names (codegen/backend.h).
#include "policyc/codegen/backend.h"

#include "policyc/ir/error.h"

namespace policyc::codegen {

const char* backendName(Backend backend) {
  switch (backend) {
    case Backend::Interp: return "interp";
    case Backend::Cpp: return "cpp";
    case Backend::Llvm: return "llvm";
  }
  return "?";
}

bool onednnBuiltIn() {
#ifdef POLICYC_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

Backend parseBackend(std::string_view name, bool compiling) {
  const char* valid = compiling ? "cpp, llvm" : "interp, cpp, llvm";
  if (name == "cpp") return Backend::Cpp;
  if (name == "llvm") return Backend::Llvm;
  if (name == "interp" && !compiling) return Backend::Interp;
  if (name == "nofuse") fail("backend 'nofuse' is now a switch: use --no-fuse (Python: fuse=False) with backend cpp or llvm");
  fail("unknown backend '{}' (valid: {})", std::string(name), valid);
}

}  // namespace policyc::codegen
