// libFuzzer harness: what the runtime checks before and after dlopen. The first byte chooses:
// even, the ELF checks (runtime::sharedObjectProblem) on the rest; odd, a model descriptor built
// from the rest (counts, names, dtypes, ranks, dims, struct size, ABI version) through the
// loader's descriptor checks (runtime::Model::adopt), and a checked run of what they accept.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "policyc/runtime/loader.h"

namespace {

// Reads the fuzz input a field at a time; zeros once it runs out.
struct Reader {
  const uint8_t* p;
  size_t n;
  template <typename T>
  T take() {
    T v{};
    size_t k = std::min(sizeof v, n);
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
  std::string text() {
    size_t len = std::min<size_t>(take<uint8_t>() % 16, n);
    std::string s(reinterpret_cast<const char*>(p), len);
    p += len;
    n -= len;
    return s;
  }
};

size_t workspaceBytes(int64_t batch) { return batch > 1024 ? SIZE_MAX : static_cast<size_t>(batch) * 64; }
int run(const void* const*, void* const*, int64_t, void*, int32_t) { return POLICYC_OK; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace policyc;
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    runtime::sharedObjectProblem(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data + 1), size - 1));
    return 0;
  }
  Reader r{data + 1, size - 1};
  // The descriptor's memory is consistent (a real one lives in the model's .rodata); its contents
  // are the fuzzer's.
  struct Desc {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<Desc> descs[2];
  std::vector<policyc_tensor_desc> raw[2];
  for (int io = 0; io < 2; ++io) {
    const int count = r.take<uint8_t>() % 5;
    for (int i = 0; i < count; ++i) {
      Desc d{r.text(), {}};
      const int rank = r.take<uint8_t>() % 20;
      for (int k = 0; k < rank; ++k) d.shape.push_back(r.take<int64_t>() % 5000 - (r.take<uint8_t>() % 2 ? 1 : 0));
      descs[io].push_back(std::move(d));
    }
    for (size_t i = 0; i < descs[io].size(); ++i) {
      policyc_tensor_desc t{};
      t.name = r.take<uint8_t>() % 8 ? descs[io][i].name.c_str() : nullptr;
      t.dtype = r.take<int8_t>() % 9;
      t.rank = static_cast<int32_t>(descs[io][i].shape.size()) - (r.take<uint8_t>() % 7 == 0 ? 1 : 0);
      t.shape = descs[io][i].shape.empty() ? nullptr : descs[io][i].shape.data();
      raw[io].push_back(t);
    }
  }
  policyc_model model{};
  model.abi_version = r.take<uint8_t>() % 5 ? POLICYC_ABI_VERSION : r.take<uint32_t>();
  const uint8_t layout = r.take<uint8_t>() % 3;
  model.struct_size = layout == 0 ? sizeof(policyc_model) : layout == 1 ? POLICYC_MODEL_STRUCT_SIZE_V1 : r.take<uint32_t>() % 256;
  std::string name = r.text();
  model.name = r.take<uint8_t>() % 8 ? name.c_str() : nullptr;
  model.target = "fuzz";
  model.num_inputs = static_cast<int32_t>(raw[0].size()) - (r.take<uint8_t>() % 9 == 0 ? 7 : 0);
  model.inputs = raw[0].empty() ? nullptr : raw[0].data();
  model.num_outputs = static_cast<int32_t>(raw[1].size());
  model.outputs = raw[1].empty() ? nullptr : raw[1].data();
  model.workspace_bytes = r.take<uint8_t>() % 8 ? workspaceBytes : nullptr;
  model.run = run;
  model.source_hash = r.take<uint8_t>() % 2 ? "0123456789abcdef" : nullptr;
  try {
    runtime::Model m = runtime::Model::adopt("fuzz", &model, nullptr, nullptr, nullptr);
    const int64_t batch = r.take<uint16_t>() % 2048;
    m.workspaceBytes(batch);
  } catch (const runtime::ModelError&) {
  }
  return 0;
}
