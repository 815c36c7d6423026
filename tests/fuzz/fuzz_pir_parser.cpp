// libFuzzer harness: the .pir parser on arbitrary text (no sidecar). Anything it accepts is a
// verified graph that prints back to text parsing to the same graph, and interprets without
// crashing; anything else is an Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace policyc;
  std::unique_ptr<ir::Graph> graph;
  try {
    graph = ir::parseGraph(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.pir");
  } catch (const Error&) {
    return 0;
  }
  fuzz::checkRoundTrip(*graph);
  fuzz::interpretSmall(*graph);
  return 0;
}
