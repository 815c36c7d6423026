// The LLVM backend's machine half: target resolution and validation, the O3 pipeline, object /
// assembly / IR files, the shared object link, and the ORC LLJIT (all ORC code lives here: each
// file including LLJIT.h costs ~10 s to compile).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include <llvm/ADT/StringMap.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include "llvm_internal.h"
#include "policyc/ir/error.h"
#include "policyc/support/files.h"
#include "policyc/support/process.h"

// The run-time support (support.cpp, linked into the compiler) and its static archive, embedded
// for linking into shared objects (policyc_llvm_*_archive.S).
extern "C" {
void policyc_rt_parallel_for(int32_t, int64_t, double, double, void (*)(void*, int64_t, int64_t), void*, const void*);
void* policyc_rt_thread_workspace(int64_t);
int32_t policyc_rt_row_blocks(int (*)(const void* const*, void* const*, int64_t, void*, int32_t, int64_t), size_t (*)(int64_t), int64_t,
                              int64_t, const int64_t*, int32_t, const int64_t*, int32_t, const void* const*, void* const*, int64_t, void*,
                              int32_t);
uint64_t policyc_rt_now_ns();
void policyc_rt_profile_record(uint64_t*, uint64_t*, policyc_trace_event*, int64_t, int64_t*, int32_t, int64_t, uint64_t);
int32_t policyc_rt_set_weights(unsigned char*, int64_t, void*, const policyc_tensor_desc*, int32_t, const policyc_tensor_desc*,
                               const void* const*);
int32_t policyc_rt_get_weights(unsigned char*, int64_t, void*, const policyc_tensor_desc*, int32_t, void*);
void policyc_rt_weights_read_lock(void*);
void policyc_rt_weights_read_unlock(void*);
void policyc_rt_widen_at_load(int32_t*, const void*, int32_t, const unsigned char*, float*);
extern const unsigned char policyc_llvm_support_archive[];
extern const unsigned char policyc_llvm_support_archive_end[];
#ifdef POLICYC_HAVE_ONEDNN  // support_onednn.cpp's (codegen::onednnBuiltIn)
void* policyc_rt_onednn_conv(void**, const char*, const int64_t*, int32_t, const char*, const float*, const float*, const uint64_t*);
int32_t policyc_rt_onednn_conv_run(void*, const char*, const float*, const float*, float*, int64_t, int32_t, float*, const float**);
void* policyc_rt_onednn_linear(void**, const char*, const int64_t*, const char*, const float*, const float*, const uint64_t*);
int32_t policyc_rt_onednn_linear_run(void*, const char*, const float*, float*, int64_t, int32_t);
extern const unsigned char policyc_llvm_onednn_archive[];
extern const unsigned char policyc_llvm_onednn_archive_end[];
#endif
}

namespace policyc::codegen {

namespace fs = std::filesystem;

namespace {

void initializeLlvm() {
  static const bool once = [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
    llvm::InitializeAllAsmParsers();
    return true;
  }();
  (void)once;
}

std::string errorText(llvm::Error e) { return llvm::toString(std::move(e)); }

std::string hostFeatures() {
  llvm::StringMap<bool> map = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> f;
  for (const auto& kv : map) f.push_back((kv.second ? "+" : "-") + kv.getKey().str());
  std::sort(f.begin(), f.end());
  return fmt::format("{}", fmt::join(f, ","));
}

// The architectures this LLVM can generate code for ("x86-64, aarch64, ...").
std::string architectures() {
  std::vector<std::string> names;
  for (const llvm::Target& t : llvm::TargetRegistry::targets()) names.push_back(t.getName());
  std::sort(names.begin(), names.end());
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

std::string llvmVersion() { return LLVM_VERSION_STRING; }

std::vector<std::string> llvmTargetNames() { return {"native", "x86-64-v3", "x86-64-v4", "x86-64-v4-bf16", "x86-64-v4-amx", "generic"}; }

LlvmTarget resolveLlvmTarget(const LlvmTargetOptions& options) {
  initializeLlvm();
  LlvmTarget t;
  t.name = options.target.empty() ? "native" : options.target;
  const std::string host = llvm::sys::getProcessTriple();
  const bool hostIsX86 = llvm::Triple(host).getArch() == llvm::Triple::x86_64;
  if (t.name == "native") {
    t.triple = host;
    t.cpu = llvm::sys::getHostCPUName().str();
    t.features = hostFeatures();
  } else if (t.name == "x86-64-v3" || t.name == "x86-64-v4" || t.name == "x86-64-v4-bf16" || t.name == "x86-64-v4-amx" ||
             t.name == "generic") {
    t.triple = hostIsX86 ? host : "x86_64-unknown-linux-gnu";
    t.cpu = t.name == "generic" ? "x86-64" : t.name.rfind("x86-64-v4", 0) == 0 ? "x86-64-v4" : t.name;
    // As the C++ backend's -mavx512bf16 (and -mamx-tile -mamx-bf16).
    if (t.name == "x86-64-v4-bf16") t.features = "+avx512bf16";
    if (t.name == "x86-64-v4-amx") t.features = "+avx512bf16,+amx-tile,+amx-bf16";
  } else {
    llvm::Triple triple(llvm::Triple::normalize(t.name));
    if (triple.getArch() == llvm::Triple::UnknownArch) {
      fail("unknown target '{}': valid targets are {} or an LLVM target triple such as x86_64-linux-gnu or aarch64-linux-gnu "
           "(architectures: {})",
           t.name, fmt::join(llvmTargetNames(), ", "), architectures());
    }
    t.triple = triple.str();
  }
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(t.triple, error);
  if (!target) fail("unknown target '{}' (triple {}): {} (architectures: {})", t.name, t.triple, error, architectures());
  if (!options.cpu.empty()) t.cpu = options.cpu;
  if (!options.features.empty()) t.features = t.features.empty() ? options.features : t.features + "," + options.features;
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(t.triple, "", ""));
  if (!sti) fail("target '{}' (triple {}) has no subtarget information", t.name, t.triple);
  if (!t.cpu.empty() && !sti->isCPUStringValid(t.cpu)) {
    std::vector<std::string> cpus;
    for (const llvm::SubtargetSubTypeKV& kv : sti->getAllProcessorDescriptions()) cpus.push_back(kv.Key);
    fail("unknown CPU '{}' for target {} (valid CPUs: {})", t.cpu, t.triple, fmt::join(cpus, ", "));
  }
  if (!options.features.empty()) {
    std::vector<std::string> known;
    for (const llvm::SubtargetFeatureKV& kv : sti->getAllProcessorFeatures()) known.push_back(kv.Key);
    std::string item;
    for (size_t p = 0; p <= options.features.size(); ++p) {
      if (p < options.features.size() && options.features[p] != ',') {
        item += options.features[p];
        continue;
      }
      if (item.size() < 2 || (item[0] != '+' && item[0] != '-') ||
          std::find(known.begin(), known.end(), item.substr(1)) == known.end()) {
        fail("invalid feature '{}' in '{}': features are +NAME or -NAME, comma-separated, NAME one of {}", item, options.features,
             fmt::join(known, ", "));
      }
      item.clear();
    }
  }
  t.isHost = llvm::Triple(t.triple).getArch() == llvm::Triple(host).getArch() &&
             llvm::Triple(t.triple).getOS() == llvm::Triple(host).getOS();
  if (llvm::Triple(t.triple).isX86()) {  // (another architecture's subtarget warns about x86 feature names)
    std::unique_ptr<llvm::MCSubtargetInfo> resolved(target->createMCSubtargetInfo(t.triple, t.cpu, t.features));
    t.avx512 = resolved && resolved->checkFeatures("+avx512f");
    t.bf16Dot = resolved && resolved->checkFeatures("+avx512bf16");
    t.bf16Tiles = resolved && resolved->checkFeatures("+amx-bf16");
    // The AMD CPUs with AVX512_BF16 (Zen 4 on) issue vdpbf16ps as often as the FMA. LLVM has no
    // feature for it: this host's vendor for native code (as the C++ backend reads it, so both
    // backends schedule a native build alike), else the CPU's name.
    const bool hostCpu = t.name == "native" && options.cpu.empty();
    t.fastBf16Dot = t.bf16Dot && (hostCpu ? static_cast<bool>(__builtin_cpu_is("amd")) : t.cpu == "znver4" || t.cpu == "znver5");
  }
  return t;
}

namespace llvmbe {

std::unique_ptr<llvm::TargetMachine> createTargetMachine(const LlvmTarget& t) {
  initializeLlvm();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(t.triple, error);
  if (!target) fail("unknown target triple '{}': {}", t.triple, error);
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(t.triple, t.cpu, t.features, options, llvm::Reloc::PIC_,
                                                                      std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm) fail("LLVM cannot generate code for triple '{}' CPU '{}'", t.triple, t.cpu);
  return tm;
}

void optimizeModule(llvm::Module& module, llvm::TargetMachine& machine, const LlvmTarget& target) {
  // Every function carries the CPU and features, so any code generator (the JIT's too) honours them.
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", machine.getTargetCPU());
    if (!machine.getTargetFeatureString().empty()) f.addFnAttr("target-features", machine.getTargetFeatureString());
    // With AVX-512 the loops LLVM vectorises itself take 16 floats a vector, as the emitter's own
    // vectors and the C++ backend's (marchFlags): its tuning for Intel's AVX-512 CPUs prefers 256
    // bits (a pointwise exp at batch 64 then took 1.5x the C++ backend's time on Sapphire Rapids).
    if (target.avx512) f.addFnAttr("prefer-vector-width", "512");
  }
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder pb(&machine, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(module, mam);
}

}  // namespace llvmbe

namespace {

// Writes `bytes` to `path` whole or not at all.
void writeAtomically(const std::string& path, const std::string& bytes) {
  asError([&] { files::writeAtomic(path, bytes); });
}

std::string codegenFile(const LlvmModule& module, LlvmFileKind kind) {
  const LlvmModule::Impl& m = module.impl();
  if (kind == LlvmFileKind::Ir) return module.ir();
  // Code generation changes the module: work on a copy (the module stays usable).
  std::unique_ptr<llvm::Module> copy = llvm::CloneModule(*m.module);
  std::unique_ptr<llvm::TargetMachine> tm = llvmbe::createTargetMachine(m.target);
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  auto type = kind == LlvmFileKind::Object ? llvm::CodeGenFileType::ObjectFile : llvm::CodeGenFileType::AssemblyFile;
  if (tm->addPassesToEmitFile(pm, os, nullptr, type)) fail("LLVM cannot emit this file type for target {}", m.target.triple);
  pm.run(*copy);
  return std::string(buffer.begin(), buffer.end());
}

}  // namespace

void writeLlvmFile(const LlvmModule& module, LlvmFileKind kind, const std::string& path) {
  writeAtomically(path, codegenFile(module, kind));
}

BuildResult buildLlvmSharedObject(const LlvmModule& module, const std::string& outSo, const BuildOptions& options) {
  if (!module.target().isHost) {
    fail("a shared object needs a target of this machine ({}), not {}: use --emit=obj for other targets", llvm::sys::getProcessTriple(),
         module.target().triple);
  }
  BuildResult result;
  // A fresh temporary directory is removed on every path out; a named work directory is kept.
  std::optional<files::TempDir> temp;
  fs::path dir = options.workDir;
  if (dir.empty()) {
    temp.emplace("policyc-llvm");
    dir = temp->path();
  } else {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail("cannot create directory '{}': {}", dir.string(), ec.message());
  }
  const fs::path object = dir / "module.o", archive = dir / "libpolicyc_llvm_support.a", log = dir / "link.log";
  writeAtomically(object.string(), codegenFile(module, LlvmFileKind::Object));
  auto bytes = [](const unsigned char* begin, const unsigned char* end) {
    return std::string(reinterpret_cast<const char*>(begin), static_cast<size_t>(end - begin));
  };
  writeAtomically(archive.string(), bytes(policyc_llvm_support_archive, policyc_llvm_support_archive_end));
  const std::string tmpSo = fmt::format("{}.tmp{}", outSo, ::getpid());
  // The C++ driver links (the support archives need libstdc++: thread-local destructors, guards);
  // no shell: every path is one argument.
  std::vector<std::string> argv = {options.compiler, "-shared", "-o", tmpSo, object.string()};
  // oneDNN's support (and libdnnl) only for a model that calls it.
  if (module.impl().usesOnednn) {
#ifdef POLICYC_HAVE_ONEDNN
    const fs::path a = dir / "libpolicyc_llvm_onednn.a";
    writeAtomically(a.string(), bytes(policyc_llvm_onednn_archive, policyc_llvm_onednn_archive_end));
    argv.insert(argv.end(), {a.string(), "-ldnnl", "-lgomp"});
#else
    fail("internal error: a model calls oneDNN, but this policyc was built without it");
#endif
  }
  argv.insert(argv.end(), {archive.string(), "-lm", "-lpthread"});
  auto start = std::chrono::steady_clock::now();
  int rc = 0;
  try {
    rc = process::run(argv, log);
  } catch (const std::runtime_error& e) {
    fail("cannot link '{}': {} (set POLICYC_CXX to a C++ compiler)", outSo, e.what());
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::error_code ec;
  if (rc != 0) {
    fs::remove(tmpSo, ec);
    std::ifstream f(log);
    std::string first;
    std::getline(f, first);
    fail("linking '{}' failed ({}, exit status {}): {}{}", outSo, options.compiler, rc, first,
         temp ? "" : fmt::format(" (log: {})", log.string()));
  }
  fs::rename(tmpSo, outSo, ec);
  if (ec) {
    fs::remove(tmpSo, ec);
    fail("cannot write '{}': {}", outSo, ec.message());
  }
  if (temp && options.keepWorkDir) temp->keep();
  if (!temp || options.keepWorkDir) result.workDir = dir.string();
  return result;
}

// ---- the JIT

struct JitModel::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  const policyc_model* descriptor = nullptr;
  const policyc_profile* profile = nullptr;
  double seconds = 0;
};

JitModel::JitModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JitModel::JitModel(JitModel&&) noexcept = default;
JitModel::~JitModel() = default;
const policyc_model* JitModel::descriptor() const { return impl_->descriptor; }
const policyc_profile* JitModel::profile() const { return impl_->profile; }
double JitModel::seconds() const { return impl_->seconds; }
void* JitModel::symbol(const char* name) const {
  auto sym = impl_->jit->lookup(name);
  if (!sym) {
    llvm::consumeError(sym.takeError());
    return nullptr;
  }
  return sym->toPtr<void*>();
}

std::unique_ptr<JitModel> jitCompile(LlvmModule module) {
  LlvmModule::Impl& m = module.impl();
  if (!m.target.isHost) fail("the JIT runs code for this machine only ({}), not {}", llvm::sys::getProcessTriple(), m.target.triple);
  auto start = std::chrono::steady_clock::now();
  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(m.target.triple)};
  jtmb.setCPU(m.target.cpu);
  jtmb.addFeatures(std::vector<std::string>{});
  if (!m.target.features.empty()) {
    std::vector<std::string> features;
    std::string item;
    for (char c : m.target.features + ",") {
      if (c == ',') {
        if (!item.empty()) features.push_back(item);
        item.clear();
      } else {
        item += c;
      }
    }
    jtmb.addFeatures(features);
  }
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create();
  if (!jit) fail("cannot create the JIT: {}", errorText(jit.takeError()));
  auto impl = std::make_unique<JitModel::Impl>();
  impl->jit = std::move(*jit);
  llvm::orc::LLJIT& j = *impl->jit;
  llvm::orc::JITDylib& lib = j.getMainJITDylib();
  // The run-time support from this process; libm's functions (cold paths) from the process too.
  std::vector<std::pair<const char*, void*>> symbols = {
      {llvmbe::kParallelFor, reinterpret_cast<void*>(&policyc_rt_parallel_for)},
      {llvmbe::kThreadWorkspace, reinterpret_cast<void*>(&policyc_rt_thread_workspace)},
      {llvmbe::kRowBlocks, reinterpret_cast<void*>(&policyc_rt_row_blocks)},
      {llvmbe::kNowNs, reinterpret_cast<void*>(&policyc_rt_now_ns)},
      {llvmbe::kProfileRecord, reinterpret_cast<void*>(&policyc_rt_profile_record)},
      {llvmbe::kSetWeights, reinterpret_cast<void*>(&policyc_rt_set_weights)},
      {llvmbe::kGetWeights, reinterpret_cast<void*>(&policyc_rt_get_weights)},
      {llvmbe::kWeightsReadLock, reinterpret_cast<void*>(&policyc_rt_weights_read_lock)},
      {llvmbe::kWeightsReadUnlock, reinterpret_cast<void*>(&policyc_rt_weights_read_unlock)},
      {llvmbe::kWidenAtLoad, reinterpret_cast<void*>(&policyc_rt_widen_at_load)},
  };
#ifdef POLICYC_HAVE_ONEDNN
  symbols.insert(symbols.end(), {{llvmbe::kOnednnConv, reinterpret_cast<void*>(&policyc_rt_onednn_conv)},
                                 {llvmbe::kOnednnConvRun, reinterpret_cast<void*>(&policyc_rt_onednn_conv_run)},
                                 {llvmbe::kOnednnLinear, reinterpret_cast<void*>(&policyc_rt_onednn_linear)},
                                 {llvmbe::kOnednnLinearRun, reinterpret_cast<void*>(&policyc_rt_onednn_linear_run)}});
#endif
  llvm::orc::SymbolMap support;
  for (const auto& [name, address] : symbols) {
    support[j.mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address), llvm::JITSymbolFlags::Exported};
  }
  if (llvm::Error e = lib.define(llvm::orc::absoluteSymbols(std::move(support)))) fail("JIT: {}", errorText(std::move(e)));
  auto generator = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(j.getDataLayout().getGlobalPrefix());
  if (!generator) fail("JIT: {}", errorText(generator.takeError()));
  lib.addGenerator(std::move(*generator));
  if (llvm::Error e = j.addIRModule(llvm::orc::ThreadSafeModule(std::move(m.module), std::move(m.context)))) {
    fail("JIT: {}", errorText(std::move(e)));
  }
  auto descriptorFn = j.lookup("policyc_model_descriptor");
  if (!descriptorFn) fail("JIT: {}", errorText(descriptorFn.takeError()));
  impl->descriptor = descriptorFn->toPtr<const policyc_model* (*)()>()();
  auto profileFn = j.lookup("policyc_profile_data");
  if (!profileFn) fail("JIT: {}", errorText(profileFn.takeError()));
  impl->profile = profileFn->toPtr<const policyc_profile* (*)()>()();
  impl->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::make_unique<JitModel>(std::move(impl));
}

}  // namespace policyc::codegen
