// libFuzzer harness: the ONNX importer on arbitrary bytes. Anything it accepts is a verified graph
// that round-trips through .pir and interprets without crashing; anything else is an Error.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_common.h"
#include "policyc/frontend/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace policyc;
  std::unique_ptr<ir::Graph> graph;
  try {
    graph = frontend::importOnnxBytes(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size), "fuzz.onnx");
  } catch (const Error&) {
    return 0;
  }
  fuzz::checkRoundTrip(*graph);
  fuzz::interpretSmall(*graph);
  return 0;
}
