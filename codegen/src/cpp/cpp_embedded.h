// Texts embedded into the compiler at build time (codegen/CMakeLists.txt reads them into
// cpp_embedded.cpp): the prelude of the generated code and the C ABI header of compiled models.
#pragma once

namespace policyc::codegen {

extern const char* const kPolicycPrelude;      // codegen/model_runtime/policyc_prelude.h
extern const char* const kPolicycOnednnPrelude;  // codegen/model_runtime/policyc_onednn.h
extern const char* const kPolicycModelHeader;  // runtime/include/policyc/runtime/policyc_model.h

}  // namespace policyc::codegen
