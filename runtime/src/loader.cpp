// The model loader: dlopen, descriptor validation, checked runs and per-thread workspaces.
#include "policyc/runtime/loader.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policyc/support/escape.h"
#include "policyc/support/sizes.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

namespace policyc::runtime {
namespace {

constexpr const char* kDTypeNames[] = {"f32", "f64", "i32", "i64", "u8", "i8", "bool"};
constexpr size_t kDTypeSizes[] = {4, 8, 4, 8, 1, 1, 1};
constexpr int32_t kNumDTypes = 7;

bool validDType(int32_t dtype) { return dtype >= 0 && dtype < kNumDTypes; }

std::string shapeStr(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += shape[i] == -1 ? std::string("batch") : std::to_string(shape[i]);
  }
  return s + "]";
}

std::string quote(const std::string& text) { return "'" + escape::message(text) + "'"; }

// Closes the handle unless released: load() must not leak it on a failed check.
struct DlHandle {
  void* handle = nullptr;
  ~DlHandle() {
    if (handle) dlclose(handle);
  }
  void* release() { return std::exchange(handle, nullptr); }
};

[[noreturn]] void invalid(const std::string& path, const std::string& what) {
  throw ModelError(quote(path) + ": invalid descriptor: " + what);
}

std::vector<TensorSpec> readSpecs(const std::string& path, const char* kind, int32_t count,
                                  const policyc_tensor_desc* descs) {
  if (count < 0 || count > sizes::kMaxNodes) invalid(path, std::string("the number of ") + kind + "s is " + std::to_string(count));
  if (count > 0 && !descs) invalid(path, std::string(kind) + "s are null");
  std::vector<TensorSpec> specs;
  for (int32_t i = 0; i < count; ++i) {
    const policyc_tensor_desc& d = descs[i];
    std::string which = std::string(kind) + " " + std::to_string(i);
    if (!d.name) invalid(path, which + " has no name");
    which = std::string(kind) + " " + quote(d.name);
    if (!validDType(d.dtype)) invalid(path, which + " has dtype " + std::to_string(d.dtype));
    if (d.rank < 0 || d.rank > sizes::kMaxRank) invalid(path, which + " has rank " + std::to_string(d.rank));
    if (d.rank > 0 && !d.shape) invalid(path, which + " has a null shape");
    TensorSpec spec{d.name, static_cast<policyc_dtype>(d.dtype), {}};
    for (int32_t k = 0; k < d.rank; ++k) {
      if ((d.shape[k] < 1 && d.shape[k] != -1) || d.shape[k] > sizes::kMaxElements) {
        invalid(path, which + " has dimension " + std::to_string(d.shape[k]));
      }
      spec.shape.push_back(d.shape[k]);
    }
    if (!sizes::numel(spec.shapeAt(1))) invalid(path, which + " has more than 2^31-1 elements per batch row");
    for (const TensorSpec& earlier : specs) {
      if (earlier.name == spec.name) invalid(path, "two " + std::string(kind) + "s are named " + quote(spec.name));
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

// One thread's workspace for one model, plus the pointer arrays a run passes to the model.
struct Workspace {
  void* data = nullptr;
  size_t capacity = 0;
  std::vector<const void*> inputPtrs;
  std::vector<void*> outputPtrs;

  Workspace(size_t numInputs, size_t numOutputs) : inputPtrs(numInputs), outputPtrs(numOutputs) {}
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { std::free(data); }

  // Allocates only when `bytes` exceeds what this workspace already holds.
  void* reserve(size_t bytes) {
    if (data && bytes <= capacity) return data;
    if (bytes > SIZE_MAX / 2) throw std::bad_alloc();
    size_t rounded = (std::max<size_t>(bytes, 1) + POLICYC_WORKSPACE_ALIGNMENT - 1) /
                     POLICYC_WORKSPACE_ALIGNMENT * POLICYC_WORKSPACE_ALIGNMENT;
    void* fresh = std::aligned_alloc(POLICYC_WORKSPACE_ALIGNMENT, rounded);
    if (!fresh) throw std::bad_alloc();
    std::free(data);
    data = fresh;
    capacity = rounded;
    return data;
  }
};

// The last few (model, workspace) pairs this thread used: a run finds its workspace here without a
// lock. Models are identified by a never-reused id, so an entry of a destroyed model never matches.
struct CacheEntry {
  uint64_t modelId = 0;
  Workspace* workspace = nullptr;
};
constexpr size_t kCacheSize = 8;
thread_local CacheEntry tCache[kCacheSize];
thread_local size_t tCacheNext = 0;

std::atomic<uint64_t> gNextModelId{1};

}  // namespace

const char* dtypeName(policyc_dtype dtype) { return validDType(dtype) ? kDTypeNames[dtype] : "?"; }
size_t dtypeSize(policyc_dtype dtype) { return validDType(dtype) ? kDTypeSizes[dtype] : 0; }

std::vector<int64_t> TensorSpec::shapeAt(int64_t batch) const {
  std::vector<int64_t> dims = shape;
  for (int64_t& d : dims) {
    if (d == -1) d = batch;
  }
  return dims;
}

int64_t TensorSpec::numelAt(int64_t batch) const {
  std::optional<int64_t> n = sizes::numel(shapeAt(batch), std::numeric_limits<int64_t>::max());
  if (!n) throw ModelError(name + ": " + str() + " at batch " + std::to_string(batch) + " has more elements than fit in 64 bits");
  return *n;
}

std::string TensorSpec::str() const { return std::string(dtypeName(dtype)) + shapeStr(shape); }

struct Model::State {
  std::string path;
  void* handle = nullptr;
  std::shared_ptr<void> owner;                    // adopt(): what keeps the code in memory
  std::function<void*(const char*)> symbols;      // adopt(): symbol lookup
  const policyc_model* desc = nullptr;
  const policyc_profile* profile = nullptr;
  std::string name;
  std::string target;
  std::string sourceHash;
  std::string precision = "fp32";
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<TensorSpec> weights;
  uint64_t id = gNextModelId.fetch_add(1);

  std::mutex mutex;  // guards perThread
  std::map<std::thread::id, std::unique_ptr<Workspace>> perThread;

  ~State() {
    perThread.clear();  // the workspaces go before the code that used them
    if (handle) dlclose(handle);
  }

  Workspace& workspaceOfThisThread() {
    for (const CacheEntry& e : tCache) {
      if (e.modelId == id) return *e.workspace;
    }
    std::lock_guard<std::mutex> lock(mutex);
    std::unique_ptr<Workspace>& slot = perThread[std::this_thread::get_id()];
    if (!slot) slot = std::make_unique<Workspace>(inputs.size(), outputs.size());
    tCache[tCacheNext++ % kCacheSize] = {id, slot.get()};
    return *slot;
  }
};

Model::Model(std::unique_ptr<State> state) : state_(std::move(state)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

// The checked state of a model from its descriptor (load() and adopt() share the checks).
std::unique_ptr<Model::State> Model::describe(const std::string& soPath, const policyc_model* desc, const policyc_profile* profile) {
  if (!desc) throw ModelError(quote(soPath) + ": policyc_model_descriptor() returned null");
  if (desc->abi_version != POLICYC_ABI_VERSION) {
    throw ModelError(quote(soPath) + " was built for policyc ABI version " + std::to_string(desc->abi_version) +
                     ", this runtime reads version " + std::to_string(POLICYC_ABI_VERSION));
  }
  if (desc->struct_size < POLICYC_MODEL_STRUCT_SIZE_V1) {
    invalid(soPath, "struct_size is " + std::to_string(desc->struct_size) + ", ABI version " +
                        std::to_string(POLICYC_ABI_VERSION) + " needs at least " + std::to_string(POLICYC_MODEL_STRUCT_SIZE_V1));
  }
  if (!desc->name) invalid(soPath, "no model name");
  if (!desc->target) invalid(soPath, "no target");
  if (!desc->workspace_bytes) invalid(soPath, "no workspace_bytes function");
  if (!desc->run) invalid(soPath, "no run function");

  auto state = std::make_unique<State>();
  state->path = soPath;
  state->desc = desc;
  state->name = desc->name;
  state->target = desc->target;
  // Models built before the field existed have no source hash.
  if (desc->struct_size >= POLICYC_MODEL_STRUCT_SIZE_V1_HASH && desc->source_hash) state->sourceHash = desc->source_hash;
  if (desc->struct_size >= sizeof(policyc_model) && desc->precision) {
    const std::string_view given(desc->precision, strnlen(desc->precision, 16));
    bool known = false;
    for (const char* name : {"fp32", "bf16-weights", "bf16", "int8-weights"}) known = known || given == name;
    if (!known) invalid(soPath, "its precision is none of fp32, bf16-weights, bf16, int8-weights");
    state->precision = given;
  }
  state->inputs = readSpecs(soPath, "input", desc->num_inputs, desc->inputs);
  state->outputs = readSpecs(soPath, "output", desc->num_outputs, desc->outputs);
  // Models built before the weights existed have none to replace.
  if (desc->struct_size >= POLICYC_MODEL_STRUCT_SIZE_V1_WEIGHTS && desc->num_weights != 0) {
    if (!desc->set_weights || !desc->get_weights) invalid(soPath, "weights without set_weights and get_weights functions");
    state->weights = readSpecs(soPath, "weight", desc->num_weights, desc->weights);
    for (const TensorSpec& w : state->weights) {
      for (int64_t d : w.shape) {
        if (d < 0) invalid(soPath, "weight " + quote(w.name) + " has a batch dimension");
      }
    }
  }
  state->profile = profile;
  return state;
}

Model Model::adopt(const std::string& path, const policyc_model* descriptor, const policyc_profile* profile,
                   std::shared_ptr<void> owner, std::function<void*(const char*)> symbols) {
  auto state = describe(path, descriptor, profile);
  state->owner = std::move(owner);
  state->symbols = std::move(symbols);
  return Model(std::move(state));
}

namespace {

// The checks of sharedObjectProblem over a file of `size` bytes that `read(offset, dst, n)` reads
// from (only the ELF header and the program and section header tables are read).
template <typename Read>
std::string elfProblem(uint64_t size, const Read& read) {
  // [offset, offset + count * entry) inside the file, in checked arithmetic.
  auto inside = [&](uint64_t offset, uint64_t count, uint64_t entry) {
    uint64_t bytes = 0, end = 0;
    return !__builtin_mul_overflow(count, entry, &bytes) && !__builtin_add_overflow(offset, bytes, &end) && end <= size;
  };
  if (size < sizeof(Elf64_Ehdr)) return "not an ELF file (" + std::to_string(size) + " bytes)";
  Elf64_Ehdr eh;
  if (!read(0, &eh, sizeof eh)) return "cannot read the ELF header";
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return "not an ELF file";
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) return "not a 64-bit little-endian ELF file";
#if defined(__x86_64__)
  constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
  constexpr uint16_t kMachine = EM_AARCH64;
#else
  constexpr uint16_t kMachine = EM_NONE;
#endif
  if (kMachine != EM_NONE && eh.e_machine != kMachine) return "an ELF file for another machine (e_machine " + std::to_string(eh.e_machine) + ")";
  if (eh.e_type != ET_DYN) return "not a shared object (ELF type " + std::to_string(eh.e_type) + ")";
  if (eh.e_phnum == 0 || eh.e_phentsize != sizeof(Elf64_Phdr) || !inside(eh.e_phoff, eh.e_phnum, sizeof(Elf64_Phdr))) {
    return "truncated or corrupt (program headers outside the file)";
  }
  std::vector<Elf64_Phdr> phdrs(eh.e_phnum);
  if (!read(eh.e_phoff, phdrs.data(), phdrs.size() * sizeof(Elf64_Phdr))) return "cannot read the program headers";
  for (size_t i = 0; i < phdrs.size(); ++i) {
    const Elf64_Phdr& ph = phdrs[i];
    if ((ph.p_type == PT_LOAD || ph.p_type == PT_DYNAMIC) && !inside(ph.p_offset, 1, ph.p_filesz)) {
      return "truncated (segment " + std::to_string(i) + " ends at byte " + std::to_string(ph.p_offset + ph.p_filesz) + " of a " +
             std::to_string(size) + "-byte file)";
    }
    if (ph.p_type == PT_LOAD && ph.p_filesz > ph.p_memsz) return "corrupt (segment " + std::to_string(i) + " is larger in the file than in memory)";
  }
  // The segments the dynamic loader reads through their addresses must lie in loaded memory.
  for (size_t i = 0; i < phdrs.size(); ++i) {
    const Elf64_Phdr& ph = phdrs[i];
    if (ph.p_type != PT_DYNAMIC && ph.p_type != PT_TLS && ph.p_type != PT_NOTE && ph.p_type != PT_GNU_PROPERTY) continue;
    uint64_t end = 0;
    if (__builtin_add_overflow(ph.p_vaddr, ph.p_memsz, &end)) return "corrupt (segment " + std::to_string(i) + " wraps around)";
    bool loaded = false;
    for (const Elf64_Phdr& load : phdrs) {
      uint64_t loadEnd = 0;
      if (load.p_type == PT_LOAD && !__builtin_add_overflow(load.p_vaddr, load.p_memsz, &loadEnd) && ph.p_vaddr >= load.p_vaddr &&
          end <= loadEnd) {
        loaded = true;
      }
    }
    if (!loaded) return "corrupt (segment " + std::to_string(i) + " is outside every loaded segment)";
  }
  if (eh.e_shnum != 0) {
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || !inside(eh.e_shoff, eh.e_shnum, sizeof(Elf64_Shdr))) {
      return "truncated (section headers outside the file)";
    }
    std::vector<Elf64_Shdr> shdrs(eh.e_shnum);
    if (!read(eh.e_shoff, shdrs.data(), shdrs.size() * sizeof(Elf64_Shdr))) return "cannot read the section headers";
    for (size_t i = 0; i < shdrs.size(); ++i) {
      const Elf64_Shdr& sh = shdrs[i];
      if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL && !inside(sh.sh_offset, 1, sh.sh_size)) {
        return "truncated (section " + std::to_string(i) + " outside the file)";
      }
    }
  }
  return "";
}

}  // namespace

std::string sharedObjectProblem(std::span<const std::byte> image) {
  return elfProblem(image.size(), [&](uint64_t offset, void* dst, size_t n) {
    if (offset > image.size() || n > image.size() - offset) return false;
    std::memcpy(dst, image.data() + offset, n);
    return true;
  });
}

void checkSharedObject(const std::string& soPath) {
  std::error_code ec;
  auto status = std::filesystem::status(soPath, ec);
  if (ec || !std::filesystem::exists(status)) throw ModelError(quote(soPath) + ": no such file");
  if (!std::filesystem::is_regular_file(status)) throw ModelError(quote(soPath) + ": not a regular file");
  const int fd = ::open(soPath.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ModelError(quote(soPath) + ": cannot open the file for reading");
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0) {
    problem = "cannot read the file";
  } else {
    // Only the headers are read (a model's .so can hold gigabytes of weights).
    problem = elfProblem(static_cast<uint64_t>(st.st_size), [&](uint64_t offset, void* dst, size_t n) {
      size_t done = 0;
      while (done < n) {
        ssize_t got = ::pread(fd, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        done += static_cast<size_t>(got);
      }
      return true;
    });
  }
  ::close(fd);
  if (!problem.empty()) throw ModelError(quote(soPath) + " is not a loadable shared object: " + problem);
}

Model Model::load(const std::string& soPath) {
  // The file's structure is checked before dlopen maps it: a truncated file would fault (SIGBUS)
  // when touched past its end.
  checkSharedObject(soPath);
  // A name without a slash would be searched on the library path instead of read as a file.
  std::string openPath = soPath.find('/') == std::string::npos ? "./" + soPath : soPath;
  DlHandle handle{dlopen(openPath.c_str(), RTLD_NOW | RTLD_LOCAL)};
  if (!handle.handle) {
    const char* err = dlerror();
    throw ModelError(err ? err : "cannot load " + quote(soPath));
  }
  dlerror();
  void* sym = dlsym(handle.handle, "policyc_model_descriptor");
  if (!sym) throw ModelError(quote(soPath) + " is not a policyc model (no symbol policyc_model_descriptor)");
  policyc_model_descriptor_fn get = nullptr;
  static_assert(sizeof(get) == sizeof(sym));
  std::memcpy(&get, &sym, sizeof(sym));
  const policyc_model* desc = get();
  void* p = dlsym(handle.handle, "policyc_profile_data");  // optional: a model without it has none
  policyc_profile_data_fn profileData = nullptr;
  std::memcpy(&profileData, &p, sizeof(p));
  auto state = describe(soPath, desc, profileData ? profileData() : nullptr);
  state->handle = handle.release();
  return Model(std::move(state));
}

const std::string& Model::path() const { return state_->path; }
const std::string& Model::name() const { return state_->name; }
const std::string& Model::target() const { return state_->target; }
const std::string& Model::sourceHash() const { return state_->sourceHash; }
const std::string& Model::precision() const { return state_->precision; }
const std::vector<TensorSpec>& Model::inputs() const { return state_->inputs; }
const std::vector<TensorSpec>& Model::outputs() const { return state_->outputs; }
const policyc_model& Model::descriptor() const { return *state_->desc; }
const policyc_profile* Model::profile() const { return state_->profile; }

void* Model::symbol(const char* name) const {
  if (state_->symbols) return state_->symbols(name);
  return state_->handle ? dlsym(state_->handle, name) : nullptr;
}

namespace {

void checkBatch(int64_t batch) {
  if (batch < 0 || batch > sizes::kMaxBatch) {
    throw ModelError("batch must be between 0 and " + std::to_string(sizes::kMaxBatch) + ", got " + std::to_string(batch));
  }
}

}  // namespace

size_t Model::workspaceBytes(int64_t batch) const {
  checkBatch(batch);
  size_t bytes = state_->desc->workspace_bytes(batch);
  if (bytes == SIZE_MAX) throw ModelError("model '" + escape::message(state_->name) + "' does not run batch " + std::to_string(batch) + " (its workspace would not fit in memory)");
  return bytes;
}

namespace {

// Whether `view` has the spec's dtype and shape at `batch`; never allocates when it matches.
void checkTensor(const char* kind, const TensorSpec& spec, const TensorView& view, int64_t batch) {
  bool sameDType = view.dtype == spec.dtype;
  bool sameRank = view.shape.size() == spec.shape.size();
  bool staticDimsMatch = sameRank;
  bool batchDimsMatch = sameRank;
  for (size_t i = 0; sameRank && i < spec.shape.size(); ++i) {
    if (spec.shape[i] == -1) {
      batchDimsMatch = batchDimsMatch && view.shape[i] == batch;
    } else {
      staticDimsMatch = staticDimsMatch && view.shape[i] == spec.shape[i];
    }
  }
  if (!sameDType || !staticDimsMatch || !batchDimsMatch) {
    std::string got = std::string(dtypeName(view.dtype)) + shapeStr(view.shape);
    std::string at = sameDType && staticDimsMatch ? " at batch " + std::to_string(batch) : "";
    throw ModelError(std::string(kind) + " " + quote(spec.name) + ": expected " + spec.str() + at + ", got " + got);
  }
  if (!view.data && spec.numelAt(batch) > 0) {  // shape matched: numelAt cannot overflow
    throw ModelError(std::string(kind) + " " + quote(spec.name) + ": the data pointer is null");
  }
}

std::string countError(const char* kind, const std::vector<TensorSpec>& specs, size_t got) {
  std::string names;
  for (const TensorSpec& s : specs) names += (names.empty() ? "" : ", ") + s.name;
  return "expected " + std::to_string(specs.size()) + " " + kind + "s (" + names + "), got " + std::to_string(got);
}

const char* codeName(int code) {
  switch (code) {
    case POLICYC_ERROR_ARGUMENT: return "invalid argument";
    case POLICYC_ERROR_WORKSPACE: return "bad workspace";
    case POLICYC_ERROR_EXTERN: return "an extern kernel (oneDNN) failed; see stderr";
    case POLICYC_ERROR_INDEX: return "an index input (gather) is outside its axis";
    case POLICYC_ERROR_DIVISION: return "an integer division by zero";
    default: return "unknown error";
  }
}

}  // namespace

void Model::run(std::span<const TensorView> inputs, std::span<TensorView> outputs, int64_t batch, int threads) const {
  const State& s = *state_;
  checkBatch(batch);
  if (threads < 1) throw ModelError("threads must be >= 1, got " + std::to_string(threads));
  if (inputs.size() != s.inputs.size()) throw ModelError(countError("input", s.inputs, inputs.size()));
  if (outputs.size() != s.outputs.size()) throw ModelError(countError("output", s.outputs, outputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) checkTensor("input", s.inputs[i], inputs[i], batch);
  for (size_t i = 0; i < outputs.size(); ++i) checkTensor("output", s.outputs[i], outputs[i], batch);
  if (batch == 0) return;

  const size_t bytes = workspaceBytes(batch);
  Workspace& ws = state_->workspaceOfThisThread();
  void* memory = nullptr;
  try {
    memory = ws.reserve(bytes);
  } catch (const std::bad_alloc&) {
    throw ModelError("cannot allocate the " + std::to_string(bytes) + " bytes of workspace model '" + escape::message(s.name) +
                     "' needs at batch " + std::to_string(batch));
  }
  for (size_t i = 0; i < inputs.size(); ++i) ws.inputPtrs[i] = inputs[i].data;
  for (size_t i = 0; i < outputs.size(); ++i) ws.outputPtrs[i] = outputs[i].data;
  int code = s.desc->run(ws.inputPtrs.data(), ws.outputPtrs.data(), batch, memory, threads);
  if (code != POLICYC_OK) {
    throw ModelError("model '" + escape::message(s.name) + "' failed: run returned " + std::to_string(code) + " (" + codeName(code) + ")");
  }
}

const std::vector<TensorSpec>& Model::weights() const { return state_->weights; }

void Model::setWeights(std::span<const std::pair<std::string, TensorView>> weights) const {
  const State& s = *state_;
  if (s.weights.empty()) {
    throw ModelError("model '" + escape::message(s.name) +
                     "' has no weights to replace: compile it with --updatable-weights (Python: updatable_weights=True)");
  }
  std::vector<policyc_tensor_desc> given;
  std::vector<const void*> data;
  for (const auto& entry : weights) {
    // Not a structured binding: clang 14 (the fuzzing build) cannot capture one in the lambda below.
    const std::string& name = entry.first;
    const TensorView& view = entry.second;
    auto spec = std::find_if(s.weights.begin(), s.weights.end(), [&](const TensorSpec& w) { return w.name == name; });
    if (spec == s.weights.end()) {
      std::string names;
      for (const TensorSpec& w : s.weights) names += (names.empty() ? "" : ", ") + quote(w.name);
      if (names.size() > 400) names = names.substr(0, 400) + "...";
      throw ModelError("model '" + escape::message(s.name) + "' has no weight " + quote(name) + " (its weights: " + names + ")");
    }
    for (const policyc_tensor_desc& g : given) {
      if (g.name == spec->name) throw ModelError("weight " + quote(name) + " is given twice");
    }
    checkTensor("weight", *spec, view, 1);
    given.push_back({spec->name.c_str(), view.dtype, static_cast<int32_t>(view.shape.size()), view.shape.data()});
    data.push_back(view.data);
  }
  const int code = s.desc->set_weights(static_cast<int32_t>(given.size()), given.data(), data.data());
  // What else the model refuses (it scans the values once, on the way in): a value not finite.
  for (size_t i = 0; code == POLICYC_ERROR_ARGUMENT && i < given.size(); ++i) {
    const float* values = static_cast<const float*>(data[i]);
    int64_t numel = 1;
    for (int64_t d : weights[i].second.shape) numel *= d;  // the shape matched the weight's
    for (int64_t e = 0; e < numel; ++e) {
      if (!std::isfinite(values[e])) {
        throw ModelError("weight " + quote(given[i].name) + " holds " + std::to_string(values[e]) + " at element " +
                         std::to_string(e) + ": weights must be finite");
      }
    }
  }
  if (code != POLICYC_OK) {
    throw ModelError("model '" + escape::message(s.name) + "' refused the weights: set_weights returned " + std::to_string(code) +
                     " (" + codeName(code) + ")");
  }
}

void Model::getWeight(size_t index, float* out) const {
  const State& s = *state_;
  if (index >= s.weights.size()) throw ModelError("weight index " + std::to_string(index) + " is out of range");
  const int code = s.desc->get_weights(static_cast<int32_t>(index), out);
  if (code != POLICYC_OK) throw ModelError("get_weights returned " + std::to_string(code) + " (" + codeName(code) + ")");
}

int Model::runUnchecked(const void* const* inputs, void* const* outputs, int64_t batch, void* workspace,
                        int threads) const {
  return state_->desc->run(inputs, outputs, batch, workspace, threads);
}

}  // namespace policyc::runtime
