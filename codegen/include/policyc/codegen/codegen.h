// What every backend shares: the options of code generation, fault injection, the implementations
// of GEMM/conv kernels and their choice, the planned program every emitter starts from, and the
// build options of the system compiler and linker.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/memory_plan.h"

namespace policyc::codegen {

// A deliberate miscompilation: wrong arithmetic (accuracy: the node's result plus one), C++
// that does not compile (compile), or a trap when the node's kernel runs (crash).
struct InjectedFault {
  enum class Kind { Accuracy, Compile, Crash };
  std::string op;
  Kind kind = Kind::Accuracy;
};
// Parses "<op>:accuracy|compile|crash" (POLICYC_INJECT_FAULT); Error naming the valid forms and
// ops otherwise.
InjectedFault parseInjectedFault(const std::string& spec);
// The fault POLICYC_INJECT_FAULT asks for; nullopt when it is unset or empty.
std::optional<InjectedFault> injectedFaultFromEnv();

// ---- reduced precision (--precision, docs/precision.md)
//
// How the packed weights of linear and conv layers are stored: fp32; bf16-weights (bf16, widened
// to f32 inside the microkernels, f32 arithmetic); bf16 (bf16 products with f32 accumulation on a
// target with AVX512_BF16: each tile rounds its rows' activations to bf16 and multiplies them by
// the weights with vdpbf16ps; convs only where oneDNN's AMX kernels run them, TargetTraits::
// bf16Tiles; elsewhere the same as bf16-weights); int8-weights (int8 with one f32
// scale per output channel, widened and scaled inside the microkernels). Activations stay f32
// between kernels.
enum class Precision : uint8_t { Fp32, Bf16Weights, Bf16, Int8Weights };
const char* precisionName(Precision p);  // fp32 | bf16-weights | bf16 | int8-weights
// Error naming the valid values otherwise.
Precision parsePrecision(const std::string& name);

// What the schedule needs to know of the CPU a model is compiled for.
struct TargetTraits {
  // No AVX-512: 16 vector registers of at most 256 bits (AVX2, SSE), where a tile of 8
  // accumulators of 16 floats would spill.
  bool narrowVectors = false;
  // AVX512_BF16: --precision bf16 multiplies linear layers in bf16 (vdpbf16ps).
  bool bf16Dot = false;
  // AMX-BF16: oneDNN's bf16 convolutions run on the tile unit, so --precision bf16 multiplies
  // convs in bf16 on oneDNN. Without it oneDNN's avx512_core_bf16 convs ran at half the generated
  // f32 tiles' rate (atari_cnn 1.9x slower than fp32), and such convs compute as bf16-weights.
  bool bf16Tiles = false;
  // vdpbf16ps at the FMA's instruction rate, so twice its products per cycle (AMD Zen 4 and
  // later: 235 against 117 GFLOP/s per core; on Sapphire Rapids half the FMA's products): bf16
  // linear layers keep their products in bf16 at every batch instead of widening their weights to
  // f32 from KernelSchedule::widenRows rows, and Winograd convs' GEMMs multiply in bf16 too
  // (WinogradTiles::bf16).
  bool fastBf16Dot = false;
};

// ---- implementations of GEMM and conv kernels (--mode, --no-extern, max-autotune)
//
// A linear or 2-D conv kernel with a constant f32 weight can run as one of several
// implementations, by name:
//   gemm4x32        generated microkernel, 4 rows x 2 panels of 16 columns (8 accumulators)
//   gemm4x16        generated microkernel, 4 rows x 1 panel (4 accumulators)
//   onednn          a oneDNN primitive (conv on NHWC copies), the epilogue as generated code
//   onednn_postops  a oneDNN primitive with the epilogue as oneDNN post-ops (eltwise, sum);
//                   only for epilogues that are a chain of such ops ending in a plain store
//   conv_rows       a 2-D conv only: generated, by output rows, 6 output channels at a time
//                   on the plain NCHW buffers (column stride 1, finite f32 weights, fp32 only)
//   gemm6x16        generated, 6 rows (conv positions) x 1 panel; linear layers with f32 weights
//   gemm8x32        generated, 8 rows (conv positions) x 2 panels
//   dot_rows        a linear layer of at most 12 outputs: dot products along k
//   winograd_f23    a 3x3 stride-1 conv: Winograd's F(2x2, 3x3)
// (docs/backend_cpp.md has the table.)
// The oneDNN ones are extern kernels: the model then links libdnnl. A kernel with an injected
// accuracy fault (`fault`) has no onednn_postops: the fault lives in the generated epilogue.
std::vector<std::string> implCandidates(const KernelProgram& program, const Kernel& kernel, bool allowExtern,
                                        const std::optional<InjectedFault>& fault = std::nullopt,
                                        Precision precision = Precision::Fp32, const std::vector<std::string>& keepFp32 = {},
                                        const TargetTraits& target = {});

// Which implementation a kernel runs for a range of batch sizes: `impl` up to `maxBatch`
// (inclusive; -1: every larger batch). Ranges are in increasing order, the last unbounded.
struct ImplRange {
  int64_t maxBatch = -1;
  std::string impl;
  bool operator==(const ImplRange&) const = default;
};
using ImplDispatch = std::vector<ImplRange>;
using ImplChoice = std::map<std::string, ImplDispatch>;  // by kernel name

// The upper bounds of the batch ranges that tuning at `batches` (sorted) decides: the geometric
// middle between neighbours ({1,16,64} -> 4, 32, unbounded).
std::vector<int64_t> batchRangeBounds(const std::vector<int64_t>& batches);

// `--mode default`: the cheap heuristic's choice for every tunable kernel, per range of `batches`,
// for a CPU with `target`'s traits.
ImplChoice heuristicChoice(const KernelProgram& program, const std::vector<int64_t>& batches, bool allowExtern,
                           const std::optional<InjectedFault>& fault = std::nullopt, const TargetTraits& target = {},
                           Precision precision = Precision::Fp32, const std::vector<std::string>& keepFp32 = {});
// Whether the C++ backend's target (a cppTargets() name) lacks AVX-512; "native" asks the host.
// (The LLVM backend reads it from its resolved target: LlvmTarget::avx512.)
bool narrowVectorTarget(const std::string& cppTarget);
// Whether a C++ backend target has AVX512_BF16 (vdpbf16ps: --precision bf16 multiplies in bf16
// there); "native" asks the host. The LLVM backend asks its subtarget.
bool bf16DotTarget(const std::string& cppTarget);
// The traits of a C++ backend target (x86-64-v4-amx, or "native" on a host with AMX-BF16, has
// bf16Tiles). The LLVM backend's: LlvmTarget::traits().
TargetTraits cppTargetTraits(const std::string& cppTarget);

// A linear or conv kernel as a oneDNN primitive (implementations onednn and onednn_postops): what
// the C++ backend's pc::dnnl_ext::Linear / Conv is constructed from, for backends that call the
// same primitives (the LLVM backend, through its support library).
struct ExternKernel {
  bool linear = false;  // an inner product over [batch, K] rows, else a 2-D conv
  // linear: K, N, the source's row stride (elements). conv: C, H, W, M, KH, KW, OH, OW, strideH,
  // strideW, dilationH, dilationW, padTop, padLeft, padBottom, padRight, the source's batch stride.
  std::vector<int64_t> shape;
  bool anyLayout = false;  // conv onednn_postops: oneDNN's preferred layouts
  // The epilogue as post-ops ("relu:alpha:beta;sum;linear:2:1", algorithm names without
  // "eltwise_"); empty for onednn, whose epilogue stays generated code over oneDNN's result
  // (dense [batch, N] rows, or NHWC).
  std::string postOps;
  int residual = -1;  // onednn_postops: the buffer the sum post-op adds (-1: none)
  int store = -1;     // onednn_postops: the buffer the result goes to
  // The workspace it needs per batch row: a conv's NHWC / blocked copies, onednn linear's result.
  int64_t scratchBytesPerRow = 0;
};
// nullopt when `impl` is not a oneDNN implementation of this kernel.
std::optional<ExternKernel> externKernel(const KernelProgram& program, const Kernel& kernel, const std::string& impl);

// The storage a layer's packed weight gets.
// Bf16Dot: bf16 in pairs along K (packing.h: toBf16Pairs) for products in bf16 (vdpbf16ps);
// Bf16: the same pairs along K, widened to f32. Both round so that each input channel's values
// keep their sum (packing.h); Int8 (toInt8) too, by a scale per output column.
enum class WeightStorage : uint8_t { F32, Bf16, Int8, Bf16Dot };
const char* weightStorageName(WeightStorage w);  // f32 | bf16 | int8 | bf16-dot
// A layer multiplies in bf16 (Bf16Dot) only where a tile's rows, rounded to bf16 pairs, fit the
// microkernel's stack buffer: K <= 2 * kMaxBf16DotPairs (pc::kMaxDotPairs); wider ones keep
// bf16 weights widened to f32.
inline constexpr int64_t kMaxBf16DotPairs = 2048;
// Which layers keep f32 weights whatever the precision (the rule, docs/precision.md): every layer
// oneDNN runs, every layer with updatable weights, every layer under kMinReducedWeights weights
// (they stay in cache: narrowing saves no memory traffic and widening costs instructions), every
// head (a layer no other linear/conv layer reads from: its error goes straight to the action),
// and the layers named in CodegenOptions::keepFp32.
inline constexpr int64_t kMinReducedWeights = 16384;
// A layer with at least this many weights (512 KiB of f32) is streamed: its f32 panels leave a
// core's L2 between calls. A layer narrowed by the rule above with fewer keeps its f32 panels in
// L2, so
// - under --precision int8-weights it stores bf16, not int8: int8 saves no memory traffic over
//   bf16 there, while its rounding error is about four times bf16's and widening an int8 vector
//   costs two instructions where bf16's costs one (atari_cnn's two 32-37K-weight convs in int8
//   cost 0.2 points of argmax agreement, ppo_mlp's 65K-weight layer 0.87x of fp32's speed at
//   batch 1, docs/precision.md);
// - where runs of many rows widen its panels (KernelSchedule::widenRows, widenBuffer), the model
//   widens them once, at its first such run, into f32 panels those runs read
//   (KernelSchedule::loadWidened): widening them again in every run cost ppo_mlp's bf16 build
//   0.79x of fp32's speed at batch 16 and 0.94x at batch 64, while a run of few rows still reads
//   the narrow panels (1.16x at batch 1); a bf16 conv reads widened panels at every batch
//   (KernelSchedule::widenedTiles).
inline constexpr int64_t kStreamedWeights = 131072;
// Under --precision bf16, a conv whose window holds fewer values than this (a first layer over an
// image of 3 or 4 channels, 3x3) keeps fp32 and the fp32 implementations: oneDNN's bf16
// convolution and its layout copies cost more than the products save (impala_cnn's 3-channel
// first conv at batch 1: 80 us in bf16 on oneDNN, 30 us as fp32 conv_rows).
inline constexpr int64_t kMinBf16ConvWindow = 64;

// The options both backends take (CppOptions and LlvmOptions add their own).
struct CodegenOptions {
  std::string name;  // C identifier prefix of the typed wrappers; empty: the program's name
  // With threads > 1 a kernel is split only into chunks of at least this much work (about one
  // multiply-add each): smaller ones cost more to hand to a thread than to run. 0 splits every
  // kernel as far as its units allow (tests use it to exercise every split).
  double minChunkCost = 131072.0;
  // Fault injection for testing the debugging tools (POLICYC_INJECT_FAULT=<op>:<kind>): every
  // node of operator `faultOp` (its op-table name, e.g. "relu", "conv") is miscompiled.
  std::optional<InjectedFault> fault;
  // Times every kernel of every run (policyc_profile_data(): totals and a trace); costs two clock
  // reads per kernel, so it is for `policyc bench --profile`, not for deployment.
  bool profile = false;
  static constexpr int64_t kTraceCapacity = int64_t{1} << 16;  // trace events a profiled model keeps
  // oneDNN extern kernels may be used (--no-extern: false, the artifact needs no libdnnl).
  bool externKernels = true;
  // The implementation of each tunable kernel; kernels it does not name follow the heuristic.
  std::optional<ImplChoice> choice;
  // The batch sizes the choice was made for (--tune-batch): their ranges, and the batch sizes
  // whose oneDNN primitives are created when the model is loaded.
  std::vector<int64_t> tuneBatches = {1, 16, 64};
  // Forces every tunable kernel to this implementation where the backend has it (a debugging aid
  // and the tests' way to reach every implementation); empty: off.
  std::string forceImpl;
  // The autotuner's build: every candidate of every tunable kernel, selected at run time through
  // the exported policyc_tune_select(kernel, candidate) (policyc_tune_candidates lists them).
  bool tuning = false;
  // Row blocks (Schedule::rowBlock): a run of a model whose rows are independent takes its batch
  // this many bytes of rows (activations, inputs and outputs) at a time, at least 4 rows; 0: the
  // whole batch at once. Tests set a few bytes to block every batch by 4.
  int64_t rowBlockBytes = kRowBlockBytes;
  static constexpr int64_t kRowBlockBytes = int64_t{1} << 20;
  // --precision and --keep-fp32 NODE,...: the packed weights' storage (weightStorages); a name
  // that is no linear/conv layer with packed weights is an error.
  Precision precision = Precision::Fp32;
  std::vector<std::string> keepFp32;
  // The least weights of a streamed layer (kStreamedWeights: smaller narrowed layers store bf16
  // under int8-weights and are widened once for runs of many rows). Tests lower it to reach int8
  // panels and the widening of every run on small layers.
  int64_t streamedWeights = kStreamedWeights;
  // The descriptor's source_hash: 16 hex digits naming the model and options that produced the
  // code (the compile cache checks a loaded entry against its key); empty: "".
  std::string sourceHash;
};

// Each linear/conv layer with packed weights (by the name the model file gives its node, else the
// graph node's name) and the storage its weight gets under `options` on a target with `target`'s
// traits (the schedule's decision, for reports and tests).
std::vector<std::pair<std::string, WeightStorage>> weightStorages(const KernelProgram& program, const MemoryPlan& plan,
                                                                  const CodegenOptions& options, const TargetTraits& target = {});

// What every backend starts from: the graph lowered, fused (unless `fuse` is false: one kernel
// per graph node, --no-fuse) and its memory planned. The driver runs these steps itself, to dump
// each stage.
struct PlannedProgram {
  KernelProgram program;
  MemoryPlan plan;
};
PlannedProgram planGraph(const ir::Graph& graph, bool fuse = true);

// The C++ compiler models are built with: $POLICYC_CXX when set and not empty, else "c++".
std::string defaultCompiler();

struct BuildOptions {
  std::string compiler = defaultCompiler();  // $POLICYC_CXX if set, else the system compiler c++
  // Where output_code.cpp, weights.bin and build.log go; empty: a fresh temporary directory,
  // removed on every path out (a failed build's error says to rerun with --debug-dir to keep them).
  std::string workDir;
  bool keepWorkDir = false;
};

struct BuildResult {
  std::string workDir;  // where the source, weights and log are (empty when removed)
  double seconds = 0;   // the system compiler's wall time
};

}  // namespace policyc::codegen
