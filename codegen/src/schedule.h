// The schedule of a post-fusion kernel program: what both emitters print, decided once — the
// implementation of every GEMM/conv kernel per batch range (and the candidates, the heuristic and
// the oneDNN post-op plans behind it), the weights blob (raw params and packed panels, with their
// offsets), the workspace (the memory plan's, then the oneDNN kernels' scratch), the C names of the
// typed wrappers and the model's C header. The emitters decide only how to print it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "policyc/codegen/codegen.h"
#include "policyc/codegen/kernel_program.h"
#include "policyc/codegen/memory_plan.h"

namespace policyc::codegen {

// ---- implementations of GEMM/conv kernels (cpp_backend.h lists them)

// ConvRows: a 2-D conv by output rows, a block of output channels at a time (ConvRowTiles).
// Gemm6x16: a conv's implicit GEMM by tiles of six output positions times one panel (twelve
// 8-lane accumulators with AVX2, where gemm4x16's eight leave the FMA pipes waiting on their latency).
// Gemm8x32: a conv's implicit GEMM by tiles of eight output positions times two panels (sixteen
// 16-lane accumulators with AVX-512, for its two 512-bit FMA pipes).
// DotRows: a linear layer of at most kDotRowsMaxN outputs (a value or small action head) as dot
// products along k, dotRowsTile(N) rows at a time: sixteen lanes of k per multiply-add where a
// panel's tile used N lanes of sixteen (a 256 -> 1 value head at batch 64 took 5.5 us on gemm4x32).
// WinogradF23: a 3x3 stride-1 conv as Winograd's F(2x2, 3x3) (WinogradTiles): 16 multiplies per
// 2 x 2 outputs and channel pair where the direct conv takes 36.
enum class Impl : int { Gemm4x32, Gemm4x16, Onednn, OnednnPostOps, ConvRows, Gemm6x16, Gemm8x32, DotRows, WinogradF23 };
inline constexpr int64_t kDotRowsMaxN = 12;
// The rows of a dot_rows tile: four by up to 4 outputs, two by up to 8, one by up to 12 (at most
// sixteen accumulators). Past 12 outputs a panel's lanes are mostly used: a 256 -> 16 layer at
// batch 64 took 4.4 us either way, 256 -> 12 3.1 against 4.3 on gemm4x32.
constexpr int64_t dotRowsTile(int64_t N) { return N <= 4 ? 4 : N <= 8 ? 2 : 1; }
const char* implName(Impl i);
bool isExtern(Impl i);  // a oneDNN primitive: the model links libdnnl
bool usesPanels(Impl i);  // reads the weight packed as panels (gemm4x32, gemm4x16, gemm6x16, gemm8x32)
bool readsRawWeight(Impl i);  // reads the weight as the model has it (conv_rows, dot_rows, oneDNN's; not winograd_f23's own)
int64_t panelsPerTile(Impl i);  // the panels a microkernel tile spans: 2 for gemm4x32 and gemm8x32, else 1
int64_t rowsPerTile(Impl i);  // the rows (conv output positions) a microkernel tile spans: 6 for gemm6x16, 8 for gemm8x32, else 4
// The rows of the one tile on gathered patches that takes the positions past an image's last
// whole tile of R (P positions): 8 where R is 8 and 6 or 7 remain (all of them; the tile's rows
// past them repeat the last one, computed and dropped: cheaper than a tile of 4 and the rest one
// by one, rma_conv1d's 7 positions 1.4x), 4 where R > 4 leaves 4 or 5 (the first four; the
// rest one by one), else 0 (all one by one). The positions it computes: convTailCovered.
int64_t convTailTile(int64_t P, int64_t R);
int64_t convTailCovered(int64_t P, int64_t R);
std::optional<Impl> implByName(const std::string& name);
std::string implNames();  // "gemm4x32, gemm4x16, onednn, onednn_postops, conv_rows, gemm6x16, gemm8x32"

// The precision a layer's weights and products get: `precision`, or fp32 for a layer `keepFp32`
// names (a kernel's, its node's or the model file's name) and for the convs kMinBf16ConvWindow
// leaves in fp32, bf16-weights for a conv under bf16 unless `bf16Convs` (bf16Convs below). The
// candidates (candidatesOf) and the heuristic take it per layer.
Precision layerPrecision(const KernelProgram& p, const Kernel& k, Precision precision, const std::vector<std::string>& keepFp32,
                         bool bf16Convs);
// Whether --precision bf16 multiplies convs in bf16: on oneDNN's AMX kernels only (the target's
// bf16Tiles, oneDNN built in, extern kernels allowed).
bool bf16Convs(const TargetTraits& target, bool allowExtern);
// The implementations kernel `k` has (none: it is not a packed linear/conv kernel). conv_rows
// reads the f32 weight as it is, so it is one only with f32 weights (`precision` fp32, or a
// layer too small for bf16/int8 weights to narrow it).
std::vector<Impl> candidatesOf(const KernelProgram& p, const Kernel& k, bool allowExtern,
                               const std::optional<InjectedFault>& fault = std::nullopt, Precision precision = Precision::Fp32);

// The epilogue as oneDNN post-ops: eltwise ops and x*a+b on the running value, at most one
// residual add (a sum post-op: the residual is copied into the destination first), then one
// plain store.
struct PostOp {
  std::string alg;  // dnnl::algorithm enumerator; empty: sum
  double alpha = 0, beta = 0;
  const ir::Node* node = nullptr;
};
struct PostOpPlan {
  std::vector<PostOp> ops;
  int store = -1;      // the buffer the result goes to
  int residual = -1;   // the buffer a sum post-op adds (-1: none)
};
std::optional<PostOpPlan> postOpPlan(const KernelProgram& p, const Kernel& k);

// ---- names and attributes

// A negative axis attribute counted from the end.
inline int64_t normalizeAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

const char* ctype(ir::DType t);        // the C type of a value of dtype t (bool: bool)
const char* storageType(ir::DType t);  // of an element in memory (bool is one byte, 0 or 1: uint8_t)

// A window attribute (strides, dilations, pads) with `count` values, `fallback` each when absent.
std::vector<int64_t> spatialList(const ir::Node& n, const char* name, size_t count, int64_t fallback);

// A name a generated identifier must not take: C and C++ keywords and alternative tokens, the
// types and macros the model header and wrappers use, the wrappers' own locals, and policyc's
// prefixes (pc_, PC_, policyc, POLICYC) and the compiler's (__, _X).
bool reservedCName(const std::string& name);

// ---- the loop nest of each kernel and its split between threads

// The loop nest an emitter prints for a kernel that runs generated code (an extern
// implementation is a oneDNN call instead, with the epilogue over its result).
enum class Form : uint8_t {
  Pointwise,     // the domain's loops around the body
  Gemm,          // linear/gemm/matmul: a dot product per output element
  PackedGemm,    // linear with a constant weight: 4-row microkernels over packed panels
  DirectConv,    // grouped, depthwise, 1-D and 3-D convs: a dot product per output element
  PackedConv,    // 2-D conv: implicit GEMM, 4 output positions by the packed panels
  Pool,          // max/avg pooling: a window per output element
  MaxPoolRows,   // 2-D f32 max pooling: row maxima, then column maxima (NaN flags beside)
  AvgPoolRows,   // 2-D f32 average pooling: an output row's sums, a loop per window tap
  RowReduction,  // softmax, log_softmax, layer_norm: rows along the trailing axes
  AxisReduction, // reduce_*, argmax, global_avg_pool: loops over the operand's kept axes
  Copy,          // pad, gather
};
Form formOf(const KernelProgram& p, const Kernel& k);

// An output row at a time (a 2-D Form::DirectConv kernel: grouped, depthwise, dilated; a
// Form::AvgPoolRows one): a row of accumulators, and for each channel, window row and window
// column k1 one loop over the output columns [lo[k1], hi[k1]) whose input column i3 * stride +
// k1 * dilation - pad lies inside the input — contiguous in the row, so it vectorises, where a dot
// product per output element with a bounds check per tap does not. Every output sums its taps in
// the same order either way.
struct RowTaps {
  std::vector<int64_t> lo, hi;  // per window column
  // > 0: the row is kept as this many chunks of 16 columns in registers, each tap added on the
  // lanes it reaches with a masked load and FMA (unit column stride, f32, rows up to 256 columns;
  // a pool's taps have weight 1);
  // 0: the row in memory, a loop per tap.
  int64_t chunks = 0;
  struct Lanes {
    int64_t chunk, first, last;  // lanes [first, last) of that chunk
  };
  // Every weight is a finite constant (a pool's 1, a conv's param): a tap may load its lanes
  // past the row as the zero with the sign of -w, so that their products are -0 and leave every
  // sum as it is (acc + -0 is acc, -0 included), and skip the select of the reached lanes (the
  // LLVM backend's blend after each FMA, on the accumulator's chain: the grouped conv ran 2x
  // behind GCC's masked FMA).
  bool finiteWeights = false;
  // The chunks window column k1 reaches, and on which lanes (chunks > 0).
  std::vector<Lanes> lanesOf(size_t k1) const;
  // Window column k1's input column minus its output column (stride 1): k1 * dilation - pad.
  int64_t dilation = 1, pad = 0;
  int64_t offset(size_t k1) const { return static_cast<int64_t>(k1) * dilation - pad; }
};
// 8 lanes gathered from 8-lane registers by shuffles (lanes numbered as __builtin_shufflevector and
// shufflevector number them: 0-7 the first operand's, 8-15 the second's). The first step picks
// from two registers; each further one keeps the previous result's lanes and adds a register's.
struct LaneShuffle {
  static constexpr int kFill = -1;  // a splat of the fill value (a max pool's -inf; no NaN)
  static constexpr int kPrev = -2;  // the previous step's result
  int a = 0, b = 0;                 // a register, kFill or kPrev
  std::array<int, 8> mask{};
};
struct ShuffledLanes {
  int whole = -1;                  // >= 0: that register as it is (no step)
  std::vector<LaneShuffle> steps;  // otherwise
};
// The shuffles that put source `sources[l]` in lane l (register * 8 + lane, or LaneShuffle::kFill).
ShuffledLanes shuffledLanes(const std::array<int, 8>& sources);

// Impl::ConvRows: a unit is an output row of one image and a block of `channels` output channels
// (the last block may be narrower). A pass over the input keeps one accumulator per channel of
// the block and chunk of 16 output columns it covers (passChunks; without AVX-512 one chunk, 12
// of AVX2's 16 vector registers with two per chunk); per input channel, window row and window
// column, the input's lanes of each chunk are loaded once (masked where the window reaches past
// the row: those lanes read 0, and the weights are finite, so their products add only zeros) and
// multiplied by each channel's weight. Each accumulator sums in the same order whatever the
// blocks, so every target's blocks give the same bits. The implicit GEMM gathers and packs
// windows and its microkernel broadcasts one input per FMA pair; here an input vector serves 6 to
// 16 FMAs and the output row stays NCHW (no layout copies, as around oneDNN's convolutions).
// Rows of at most 8 columns go two to a chunk (`rows` 2): lanes 0-7 hold output row oh, lanes
// 8-15 row oh + 1, each half loaded from its own input row (a row past the image or the output
// reads zeros); a unit is then a pair of output rows.
struct ConvRowTiles {
  RowTaps taps;          // the columns each window column reaches, chunks of 16
  int64_t channels = 0;  // output channels a block: kConvRowsChannels, or with AVX-512 16 / passChunks
  // Chunks of the row a pass over the input keeps (channels x passChunks accumulators): 1 with
  // AVX2 (a chunk is two of its 16 registers), up to 2 with AVX-512 (32 registers).
  int64_t passChunks = 1;
  int64_t blocks = 0;    // ceil(M / channels)
  int64_t rows = 1;      // output rows per chunk (1, or 2 for rows of at most 8 columns)
  int64_t rowUnits = 0;  // ceil(OH / rows): units per block and image
  // The conv's geometry both printers read: input channels and rows, window rows, output
  // channels, rows and columns; the row axis's stride, dilation and top pad; a bias or not.
  int64_t C = 0, H = 0, KH = 0, M = 0, OH = 0, OW = 0;
  int64_t strideH = 1, dilationH = 1, padTop = 0;
  bool bias = false;
};
constexpr int64_t kConvRowsChannels = 6;
// With AVX-512 (`wideVectors`) a pass keeps 16 accumulators: 8 channels by 2 chunks, or 16
// channels by one chunk (rows of at most 16 columns, or pairs of rows of 8): the two 512-bit FMA
// pipes need 8 independent chains to cover the FMA's latency, and each input vector then feeds
// 8 or 16 FMAs. Six channels by one chunk left the chains short (IMPALA's 16-channel 32 x 32
// convs at half the FMA peak).
constexpr int64_t kConvRowsWideAccumulators = 16;
// nullopt where conv_rows cannot run `k` (not a 2-D group-1 conv with f32 operands and finite
// weights, column stride 1, rows of at most 256 columns).
std::optional<ConvRowTiles> convRowTiles(const KernelProgram& p, const Kernel& k, bool wideVectors);

// Impl::WinogradF23 (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks"): each
// 2 x 2 block of output positions (a tile) of a 3 x 3, stride-1 conv from the 4 x 4 input values
// under it. The weights are transformed once, at compile time (U = G g G^T, 16 values per output
// and input channel, in double, rounded to f32: winogradWeights); a unit of work, `bandRows` rows
// of tiles of one image, copies the rows it reads with their padding (`band`), transforms every
// tile's input (V = B^T d B: additions only) into 16 matrices of C rows by its T tiles (tile
// ty * TW + tx; vectors of 16 tiles, the last one's lanes past T zero), multiplies each by its U
// (the GEMM microkernel: `rows` output channels by one or two 16-tile vectors, U's values
// broadcast), and transforms the 16 products back (Y = A^T M A, additions only) plus the bias
// into output rows, whose epilogue runs on vectors of 8 columns. The transforms take a run of up
// to 8 tiles of a tile row at a time (16 with AVX-512 where 16 lie in one vector), a tile a
// vector lane. The order of every addition is fixed (winogradInput, winogradOutput in both
// printers), so both backends give the same bits; the values differ from the direct conv's in
// the last bits (docs/performance.md gives the error). Where a tile's window holds an infinity,
// the transforms' differences make NaN of outputs the direct conv leaves finite; NaN inputs
// propagate as they do there.
struct WinogradTiles {
  int64_t C = 0, H = 0, W = 0;     // the input: channels, rows, columns
  int64_t M = 0, OH = 0, OW = 0;   // the output: channels, rows, columns
  int64_t padTop = 0, padLeft = 0;
  int64_t TW = 0, TH = 0;          // tiles across and down: ceil(OW / 2), ceil(OH / 2)
  int64_t bandRows = 0;            // rows of tiles a unit
  int64_t bands = 0;               // units per image: ceil(TH / bandRows)
  int64_t panels = 0;              // vectors of 16 of the unit's T = bandRows * TW tiles: 1 to 4
  int64_t rows = 0;                // output channels a GEMM tile: 8 with AVX-512, 6 without
  bool wideRuns = false;           // runs of 16 tiles (AVX-512)
  bool bias = false;
  // Products in bf16 (--precision bf16 where vdpbf16ps makes twice the FMA's products,
  // TargetTraits::fastBf16Dot): U rounded to bf16 at compile time; after the input transform each
  // of V's panels is rewritten in place as bf16 pairs along the channels (row c2 of a panel holds
  // channels 2c2 and 2c2 + 1 in each 32-bit lane, pc::winogradPairs), and the GEMMs are the
  // bf16-dot tiles (pc::gemmDot, Emitter::gemmDotTile) with U's rows as their rows.
  bool bf16 = false;
  int64_t tiles() const { return bandRows * TW; }
  int64_t bandH() const { return 2 * bandRows + 2; }  // the band's input rows
  int64_t bandW() const { return 2 * TW + 2; }        // and columns (padding included)
  // Floats of the band, of the 16 transformed inputs (V[16][panels][C][16], value (i, j) from
  // (i*4 + j) * inputStride()) and of one channel group's 16 products (M[16][rows][panels * 16],
  // from (i*4 + j) * productStride()), each a stack buffer. The strides are 16 floats longer than
  // the matrices: at 4 KiB apart (2 x 32 x 16 floats) the transform's 16 stores of a tile went to
  // one set of the L1 cache (12 ways), and the input transform took as long as the GEMMs.
  int64_t inputStride() const { return panels * C * 16 + 16; }
  int64_t productStride() const { return rows * panels * 16 + 16; }
  int64_t bandFloats() const { return C * bandH() * bandW(); }
  int64_t inputFloats() const { return 16 * inputStride(); }
  int64_t productFloats() const { return 16 * productStride(); }
  // A run of `count` tiles of a tile row from column x0: for the input transform, its first
  // tile's vector and lane in V (a run never leaves its vector).
  struct Run {
    int64_t x0 = 0, count = 0, panel = 0, lane = 0;
  };
  std::vector<Run> inputRuns(int64_t ty) const;  // tile row ty of the band
  std::vector<Run> outputRuns() const;           // any tile row (the products' tiles are contiguous)
};
inline constexpr int64_t kMaxWinogradTiles = 64;  // tiles a band, and across (outputs of 128 columns)
// nullopt where WinogradF23 cannot run `k`: not a 2-D group-1 3 x 3 conv of stride and dilation
// 1 with f32 operands, finite fixed (not updatable) weights and an output of at most 128 columns,
// or no band whose buffer and transformed input fit kMaxWinogradFloats together (128 KiB of stack,
// as a padded image's). The band is the one whose GEMMs multiply the fewest vector lanes over the
// image. An odd output's last tile row and column compute outputs past it (from zeroed band
// values), not stored.
std::optional<WinogradTiles> winogradTiles(const KernelProgram& p, const Kernel& k, bool wideVectors);
inline constexpr int64_t kMaxWinogradFloats = 32768;

// A Form::MaxPoolRows or AvgPoolRows kernel's geometry: window, strides, dilations and pads of
// its two spatial axes, its sizes, and the padded input row both emitters hold on the stack for
// a max pool (input columns -padL .. span - padL - 1).
// The even-lanes order of the stride-2 pools (evenColumnPool, RowPoolGeometry::evenOrder): a
// stride-2 tap's 8 inputs are lanes kEvenLanes of 16 loaded (a shuffle within 128-bit lanes),
// which hold outputs kEvenOrder of the 8; the same mask puts such a vector back in order (it is
// its own inverse). The C++ prelude's pc::evenLanes and pc::evenOrder are these masks.
inline constexpr std::array<int, 8> kEvenLanes = {0, 2, 8, 10, 4, 6, 12, 14};
inline constexpr std::array<int, 8> kEvenOrder = {0, 1, 4, 5, 2, 3, 6, 7};

struct RowPoolGeometry {
  std::vector<int64_t> kernel, strides, dilations, pads;
  int64_t C = 0, OH = 0, OW = 0, H = 0, W = 0, padL = 0, span = 0;
  RowTaps taps;  // an average pool's (it has no dilations)
  // An average pool's window is clipped to the padded input, rows below rowsEnd and columns
  // below colsEnd (as onnxruntime), and divided by its clipped size or its count of inputs.
  int64_t rowsEnd = 0, colsEnd = 0;
  bool includePad = false;
  // > 0 (rows up to 256 columns): the column maxima of a window row are kept in this many
  // registers of 8 columns (the last one's columns past the row read as -inf), stored once the
  // window's rows are done; 0: a loop per input row over the columns in memory. colSize: the
  // column array's length (the input columns at [padL, padL + W), the chunks' stores fit).
  int64_t chunks = 0, colSize = 0;
  // Not empty (a max pool with chunks, window columns of at most three registers): the window
  // step runs on the registers too — per 8 outputs (window[o]) and window column (window[o][kw]),
  // the column maxima it takes, shuffled out of the registers (-inf past the row), maxima taken in
  // window order, the NaN flags shuffled alike. Through memory, the step's reads of single
  // columns straddle the registers' stores (store forwarding) and GCC does not vectorise it.
  std::vector<std::vector<ShuffledLanes>> window;
  // With column stride 2, the window step's lanes hold outputs 0 1 4 5 2 3 6 7 of its 8 (as
  // pc::evenLanes): a window column at an even offset from the chunk is then one in-lane shuffle
  // of two registers (vshufps) where the natural order took two lane-crossing permutes and a
  // blend; the step's result is put in order once (pc::evenOrder; maxima are lane by lane).
  bool evenOrder = false;
};
RowPoolGeometry rowPoolGeometry(const KernelProgram& p, const Kernel& k);


// How a kernel's work is split between threads (pc::parallelFor in the C++ backend's run
// function, policyc_rt_parallel_for in the LLVM one): `units(batch)` units of work, whole units
// per chunk, each costing about `cost(batch)` multiply-adds (CodegenOptions::minChunkCost is the
// least a chunk holds). A unit always does the same work whichever chunk it falls in, so 1 and N
// threads compute bit for bit the same.
struct ThreadSplit {
  // The loop over this axis runs a chunk [lo, hi) of its extent (-1: the units are tiles of
  // rows, see below, or the kernel runs whole). It indexes the kernel's domain, except in
  // Form::AxisReduction, where the loops walk the operand's shape.
  int axis = -1;
  // units = ceil(rows / tile) * mult, rows = rowsPerBatch * batch + rowsFixed.
  int64_t rowsPerBatch = 0, rowsFixed = 1, tile = 1, mult = 1;
  // cost = (costPerBatch * batch + costFixed) * (tileCost ? min(rows, tile) : 1)
  int64_t costPerBatch = 0, costFixed = 1;
  bool tileCost = false;
  bool whole() const { return rowsPerBatch == 0 && rowsFixed == 1 && tile == 1 && mult == 1; }
  int64_t units(int64_t batch) const;
  double cost(int64_t batch) const;
};

// The split of kernel `k` run by implementation `impl` (none: the kernel's generated form); for
// an extern implementation, its epilogue's over the result (whole with post-ops). wideVectors: a
// target with AVX-512 (conv_rows' blocks).
ThreadSplit threadSplit(const KernelProgram& p, const Kernel& k, std::optional<Impl> impl, bool wideVectors);

// nullopt when `k` is not computed by rows: not 2-D, or its thread split is over the columns.
std::optional<RowTaps> convRowTaps(const KernelProgram& p, const Kernel& k, const ThreadSplit& split);

// A constant-mode pad by rows (every axis but the last is a loop): a row is either all padding,
// or a padded head [0, head), the input row at [head, head + width), and a padded tail; three
// branch-free loops, the middle one a contiguous copy. nullopt for other modes, negative (cropping)
// pads on the last axis, or a thread split over it.
struct PadRows {
  int64_t head = 0, width = 0;
};
std::optional<PadRows> padRows(const KernelProgram& p, const Kernel& k, const ThreadSplit& split);

// ---- vectorisation and loop shapes (loop_shapes.cpp), read by scheduleProgram

// Whether `k`'s body computes a transcendental function (exp, log, erf, tanh and the activations
// made of them): some twenty operations a value, so that its loop pays vectorised even where its
// loads and stores gather and scatter.
bool mathHeavy(const Kernel& k);
bool mathHeavy(const std::vector<Instr>& instrs);  // a body's or a prologue's instructions
// Whether `k`'s body calls libm for each value: a trigonometric or hyperbolic function, or a pow
// (both printers call libm for those; KernelSchedule::unrollCalls).
bool callsLibm(const Kernel& k);
// Whether a load or store of `k`'s body walks domain axis `axis` with a stride other than 0 or 1.
bool stridedAlong(const KernelProgram& p, const Kernel& k, size_t axis);
// A Form::Pointwise kernel's axis to vectorise when its last axis has fewer than 16 values and
// not 8 (a row of 8 is a vector of its own), no axes collapse and its body is mathHeavy: the
// innermost axis with 16 values or more, or the batch (KernelSchedule::vectorAxis; -1: none).
int vectorAxis(const Kernel& k, size_t collapseFrom);
// Whether the temporaries kernel `k` touches occupy disjoint workspace memory.
bool disjointTemps(const KernelProgram& p, const MemoryPlan& plan, const Kernel& k);
// A Form::Pointwise kernel's first trailing domain axis of the run every access walks
// contiguously, or not at all (KernelSchedule::collapseFrom; the rank: none).
size_t collapseFrom(const KernelProgram& p, const Kernel& k, const ThreadSplit& split);
// A Form::Pointwise kernel that only moves 4-byte values between layouts whose contiguous axes
// differ (a transpose: its load walks `loadAxis` with unit stride, its store the last axis): tiles
// of tile x tile values, each loaded as `tile` vectors along loadAxis, transposed in registers and
// stored as `tile` vectors along the last axis; the values outside whole tiles one at a time.
// Either loop order moves one side a value at a time (LLVM's loop vectorizer keeps the stores'
// interleaving of 16 scalar, 1.8x behind GCC's permutes on an NCHW -> NHWC transpose).
struct TransposeTiles {
  size_t loadAxis = 0;
  int64_t tile = 8;  // 8, or 4 where an axis has fewer than 8 values
  // Values a tile spans along loadAxis: `tile`, or 16 for tiles of 8 with AVX-512 where that axis
  // has 16 or more (eight 16-lane loads turned into sixteen 8-lane stores by Emitter::transpose8x16:
  // 24 shuffles where two 8 x 8 tiles take 48; transformer_window's [b,8,4,16] -> [b,4,16,8]
  // transposes at batch 64 5.8 -> 4.3 and 5.7 -> 3.9 us).
  int64_t across = 8;
};
// wideVectors: a target with AVX-512 (the 16 x 8 tiles).
std::optional<TransposeTiles> transposeTiles(const KernelProgram& p, const Kernel& k, const ThreadSplit& split, bool wideVectors);
// Whether every window of a pooling kernel lies inside its input (KernelSchedule::windowInside).
bool windowInside(const KernelProgram& p, const Kernel& k);

// Whether `k`'s body can run on 16 consecutive values of the domain's last axis: f32 values only,
// no operator without a vector form (pow, casts, comparisons, where, not), and every load or
// store either ignores that axis or walks it with unit stride (a store always walks it).
bool vectorBody(const KernelProgram& p, const Kernel& k);
// Whether a rank-4 `k`'s loads and stores that walk the last axis walk the plane of the last two
// densely (one row after another: position oh * W + ow at offset oh * W + ow, W the last axis's
// extent) and the others neither of those axes: a run of positions crossing into the next row is
// one run in memory (KernelSchedule::tileEpilogue).
bool planeDense(const KernelProgram& p, const Kernel& k);

// ---- the schedule

struct ScheduleOptions {
  std::string name;  // C identifier prefix of the typed wrappers; empty: the program's name
  bool externKernels = true;
  std::optional<InjectedFault> fault;
  std::optional<ImplChoice> choice;  // kernels it names run what it says; others the heuristic's
  std::vector<int64_t> tuneBatches = {1, 16, 64};
  std::string forceImpl;             // empty: off
  bool tuning = false;               // every candidate of every tunable kernel, chosen at run time
  // The CPU's traits: vector width (narrowVectors: gemm4x32's 8 accumulators of 16 floats would
  // spill, the heuristic's concern), bf16 products (bf16Dot: WeightStorage::Bf16Dot; bf16Tiles).
  TargetTraits target;
  Precision precision = Precision::Fp32;  // CodegenOptions::precision and keepFp32
  std::vector<std::string> keepFp32;
  int64_t streamedWeights = kStreamedWeights;                // CodegenOptions::streamedWeights
  int64_t rowBlockBytes = CodegenOptions::kRowBlockBytes;  // CodegenOptions::rowBlockBytes
};

struct KernelSchedule {
  Form form = Form::Pointwise;  // the generated loop nest (formOf)
  ThreadSplit split;            // of the generated form (threadSplit without an implementation)
  std::vector<Impl> impls;  // the implementations emitted (tunable kernels; empty otherwise)
  std::vector<ThreadSplit> implSplits;  // per impls entry
  ImplDispatch dispatch;    // which one runs for which batch sizes (empty in tuning builds)
  // POLICYC_INJECT_FAULT's accuracy kind hits this template kernel's anchor: its accumulated
  // value is miscompiled (plus one) where the epilogue reads it.
  bool anchorFault = false;
  // Vectorisation, decided here for both printers. A Form::PackedGemm kernel's epilogue runs on
  // whole 16-column panels, a direct conv's kept in registers (RowTaps::chunks) on its chunks (a
  // partial last one by vectors of 8, the last one's first lanes only: its stack row and scalar
  // epilogue were a fifth of a depthwise conv's time; the LLVM printer leaves the loop over the
  // row to its loop vectoriser), a conv_rows one's (ConvRowTiles) on whole chunks of their rows, a max pool's whose window step runs on registers (RowPoolGeometry::window)
  // on whole 8-column chunks of its output rows, an f32 pad by rows (PadRows) on the copied part of a row 16 values at a
  // time, a stride-2 average pool's (evenColumnPool) on 8 output columns at a time, each window
  // tap's inputs the even lanes of 16 loaded, in an in-lane order put back once for the sum
  // (pc::evenLanes; through the scalar loop GCC left a 2x2 pool of stride 2 scalar, and LLVM's
  // vectoriser deinterleaved every tap with a lane-crossing permute: 1.4x and 1.35x this time),
  // a matmulRowQuads matmul's on each row's vectors of 8 or 16 columns
  // (vectorBody on an f32 result, no injected accuracy fault on the anchor, which the scalar
  // epilogue carries). The C++ printer leaves the pad's plain loop to GCC's vectoriser.
  bool vectorEpilogue = false;
  // A packed linear layer whose last panel is partial (N % 16 columns: a policy head) and whose
  // epilogue vectorises (vectorBody, no injected accuracy fault): the LLVM printer runs that
  // panel's epilogue on the first N % 16 lanes of a vector (the others neither read nor written),
  // whole panels on whole vectors. Column by column, a head's tanh took 3.2x the C++ backend's
  // time (simba_actor at batch 64), whose scalar loop over the 16 columns GCC vectorises.
  bool vectorTail = false;
  // Per domain axis: some load or store walks it with a stride other than 0 or 1 (a transpose's
  // read or write). Loops over it stay scalar: vectorised, they gather or scatter (measured 2.6x
  // slower than scalar code in a pointwise kernel). Not so where the body is mathHeavy.
  std::vector<bool> stridedAxes;
  // >= 0: a Form::Pointwise kernel whose last axis is shorter than a vector (a [batch, 1] value
  // head, a [batch, 6] action head) and whose body is mathHeavy loops over this axis innermost
  // (loopOrder), and the LLVM printer asks its vectorizer to take it: the transcendental math
  // outweighs the strided loads and stores. Left innermost, GCC kept a [batch, 6] softplus chain
  // scalar (6.6x slower than across the rows), and LLVM's cost model a log over a [batch, 1]
  // column (6x behind GCC's vector loop). Only where that loop runs at least kVectorAxisMin times
  // (its chunk's length on the split axis); otherwise the domain's order, whose results are the
  // same bits (at batch 1 LLVM's scalar remainder took 4x its masked row). Not over rows of 8,
  // each an 8-lane vector: across the rows their strided loads took longer (brax_ppo_silu's
  // [batch, 8] softplus at batch 64 2.8 -> 0.9 us in C++, its tanh 1.5 -> 0.65).
  int vectorAxis = -1;
  static constexpr int64_t kVectorAxisMin = 16;
  // A Form::Pointwise body that calls libm for each value (sin, cos, pow, ...; callsLibm): its
  // innermost loop unrolled this many times by both printers (0: left to the compiler). libm's
  // sinf branches on each value's quadrant; through one call site in a rolled loop the branch
  // predictor missed where through eight it did not: sin over [64, 256] took 113 us rolled
  // (GCC's choice) against 47 unrolled by 8 (LLVM's), the same libm.
  int unrollCalls = 0;
  static constexpr int kUnrollCalls = 8;
  // An argmax's scan for the first index holding the row's maximum (after the maximum itself):
  // this many values a step compared as one vector and their mask tested (pc::findEqual,
  // Emitter::findEqual), where a compare and a branch per value made the scan five times slower
  // than the maximum before it (argmin over 4096 values: 2.1 us at batch 1).
  static constexpr int kScanLanes = 16;
  // A transpose's tiles (transposeTiles): the LLVM printer transposes them in registers; the C++
  // printer leaves its loop nest to GCC, whose vectoriser permutes the interleaved stores itself.
  std::optional<TransposeTiles> transpose;
  // The workspace buffers the kernel reads and writes lie in disjoint memory (not so where a
  // pointwise kernel writes in place of an operand): the C++ printer declares their pointers
  // restrict, so that GCC may reorder an epilogue's stores to two of them (and vectorise it).
  bool disjointTemps = false;
  // A sum of f32 values (reduce_sum, reduce_mean, global_avg_pool; Form::AxisReduction): the
  // reduced axes [first, last] (the innermost one, or, without a prologue, the trailing reduced
  // axes contiguous in memory) taken as one run of `count` values through sixteen partial sums in
  // double (value j into lane j % 16, the lanes added pairwise at the end: pc::sumOf,
  // Emitter::sumOf), the same in both backends; the other reduced axes stay loops around it. A
  // single running sum is a chain of dependent adds (4 cycles a value). Runs under 16 values keep it.
  struct SumRun {
    size_t first = 0, last = 0;
    int64_t count = 0;
    // The values come from a mathHeavy prologue (reduce_log_sum_exp's exps): the C++ printer has
    // pc::sumOf compute each 16 of them in a loop of their own first, which GCC vectorises; it
    // did not vectorise the sixteen lanes' inlined calls (1.3x slower). The same values and sums.
    bool staged = false;
  };
  std::optional<SumRun> sumRun;
  // A softmax over at most 4096 values: the first pass keeps each exp(x - max) of the row (this
  // many doubles on the stack) and the second divides them, where it computed them again (two
  // libm exps a value, the kernel's whole time at small widths). 0: computed twice. A
  // log_softmax's too (f32Exps: its sum from f32 exps, where a libm exp in double a value took
  // 3.2 us at batch 64 over rows of 8, 0.84 so).
  int64_t keptExps = 0;
  // With keptExps over f32 values: the row's exps computed in f32 (the Cephes polynomial both
  // backends share, within 1.5e-6 relative) in a loop of their own, which vectorises, and summed
  // through sumOf; a libm exp in double a value took the kernel's whole time (8 values: 54 ns a row).
  bool f32Exps = false;
  // A softmax or log_softmax over short rows (f32Exps, at most kShortRow values) along the last
  // axis, split by the first axis: both printers take its rows eight at a time, a row a vector lane (pc::softmaxRows8,
  // Emitter::softmaxRows8; the same bits as one row at a time, which takes the rows past the last
  // eight). The rows an index of the first axis holds (the static axes between it and the row's
  // multiplied); 0: one row at a time. Left to LLVM's loop vectoriser, rows of 4 after a fused
  // prologue took 1.4x the C++ time, and rows of 8 under two outer axes 1.6x.
  int64_t rowsAcross = 0;
  // A short row: at most this many f32 values. Both printers take an argmax over one in a
  // single branch-free vector pass (pc::argmaxShort, Emitter::argmaxShort); the C++ printer also
  // its maximum (pc::maxShort) and a kept softmax row's exps as vectors of 8 (pc::expFull: GCC
  // left a loop of 4 exps scalar, multi_input's softmax over rows of 4 1.7x LLVM's time, whose
  // SLP vectoriser takes the 4 at once).
  static constexpr int64_t kShortRow = 16;
  // A layer norm over one axis of at least 16 f32 values: the mean and the variance each one
  // sumOf run (sixteen partial sums in double, as SumRun), the variance over the centred values
  // rounded to f32 and squared there, the same in both backends. 0: two running sums in double,
  // a chain of dependent adds (a row of 64 took 150 ns).
  int64_t normRow = 0;
  // A normRow layer norm of at most kMaxStagedRow values with a mathHeavy epilogue (SiLU, tanh,
  // Mish): the row normalised into a buffer first, then the epilogue over it in a loop of its own,
  // in both printers. In one loop the epilogue ran at the width of the normalisation's doubles
  // (8 lanes), half a float vector: tdmpc2's layer norm + Mish 1.5x the time of the two apart.
  bool normStaged = false;
  static constexpr int64_t kMaxStagedRow = 4096;
  // A Form::Pointwise kernel's trailing domain axes [collapseFrom, rank) that every load and store
  // walks as one contiguous run (or not at all) run as one loop (loopExtents): a 21x21 map is one
  // loop of 441, not 21 loops of 21 each with a vector tail. rank: none.
  size_t collapseFrom = 0;
  // A Form::Pool kernel whose every window lies inside its input (no padding reached): fixed
  // window loops without bounds checks, an average divided by the window's size. The checks kept
  // LLVM from vectorising across the outputs (a 2x2 average pool of stride 2 ran 1.8x behind GCC's).
  bool windowInside = false;
  // A matmul (Form::Gemm) whose last output axis is N = 4j <= 64 static columns, contiguous in B,
  // all of it f32: N, else 0. The C++ printer sums each output row's columns as vectors
  // (pc::matmulRow: GCC left the short column loop scalar).
  int64_t matmulColumns = 0;
  // Such a matmul's output rows four at a time in both printers (pc::matmulRows; the LLVM
  // printer's emitMatmulRowQuads): for each k, B's row loaded once for four rows' FMAs, four
  // independent chains where one row waited K FMA latencies (an attention's 8 x 16 by 16 x 8
  // scores at batch 64 13.98 -> 10.81 us in C++). Where the row axis (before the columns) is
  // static, a multiple of 4 and not the threads' axis, and N is at most two vectors (32 floats
  // with AVX-512, 16 without), so the four rows' accumulators and B's row stay in registers.
  bool matmulRowQuads = false;
  bool rawWeight = false;   // an extern implementation or conv_rows reads the plain weight (oneDNN reorders it)
  std::optional<ConvRowTiles> convRows;  // where conv_rows is among impls: its tiles, for both printers
  // Where winograd_f23 is among impls: its tiles, and the offset in the weights blob of its
  // transformed weights (winogradWeights: U[16][M][C] floats).
  std::optional<WinogradTiles> winograd;
  int64_t winogradWeight = -1;
  // A Form::PackedConv kernel with padding (paddedImage): the implicit GEMM's whole tiles read a
  // zero-padded copy of the image (the rows a chunk's tiles read, once per image it meets), through the
  // padded image's window offsets, where they gathered every window that reached the padding into
  // a patch one value at a time. The same values in the same order, so the same bits. Where the
  // output is narrow every tile has a position in the first column (gap_cnn's 3x3/2 convs on 12
  // and 6 columns gathered half and all their tiles). C x H x W: the padded image (a stack buffer
  // of at most kMaxPaddedFloats); top, left: the padding before the first row and column.
  struct PaddedImage {
    int64_t C = 0, H = 0, W = 0, top = 0, left = 0;
    int64_t floats() const { return C * H * W; }
  };
  std::optional<PaddedImage> paddedImage;
  static constexpr int64_t kMaxPaddedFloats = 32768;
  // A Form::PackedConv kernel's taps along a window row as one group of its implicit GEMM's k
  // (pc::gemm_rxp_by's G, the LLVM gemmTile's group): where consecutive taps are consecutive
  // floats of the image read in place (unit column stride and dilation), one offset a group of KW
  // values of k and the others constant displacements from it, where every k loaded its own
  // offset (the table's load and the loop's instructions were a tenth of a tile's body: gap_cnn's
  // 3x3 convs at batch 64 2-5% faster, LLVM). 1: every k its offset. The same sums in the same order:
  // the same bits. (The C++ four-row tiles, pc::gemm_4x16_by and gemm_4x2v_by, read every offset.)
  int64_t tapGroup = 1;
  // A Form::PackedConv kernel's implicit GEMM tiles (R <= 8 output positions by a panel of
  // channels): the epilogue transposes the tile in registers (8 x 16 blocks with AVX-512, the
  // LLVM printer's always; else 8 x 8) and runs on the R
  // positions of one channel at a time as one vector, stored as R consecutive floats, where it ran
  // once per value with the value's address computed each time. Where the body is a vectorBody
  // whose loads and stores walk the output plane densely (planeDense: a tile's positions may go on
  // into the next row) and no accuracy fault is injected into the anchor. Lane by lane the same
  // operations: the same bits.
  bool tileEpilogue = false;
  int64_t packedWeight = -1, packedBias = -1;  // the packed panels' offsets in the weights blob
  // The packed weight's element type (CodegenOptions::precision, the rule in codegen.h); Int8's
  // per-column scales are f32 panels at packedScale (the microkernels multiply each tile's
  // accumulators by them once, at its end), -1 otherwise.
  WeightStorage weightStorage = WeightStorage::F32;
  int64_t packedScale = -1;
  // Elements of the storage type from one packed panel to the next: K * 16, or for Bf16 and
  // Bf16Dot (read as 32-bit pairs along k) bf16PairRows(K) * 16.
  int64_t panelStride = 0;
  // A Form::PackedGemm linear with narrowed panels, where a run has at least widenRows rows
  // (0: never):
  // - widenBuffer (the unit's one or two panels, K x 16 values each, fit kMaxWidenedFloats, a
  //   stack buffer of at most 64 KiB): each chunk widens its unit's panels to f32 once, and every
  //   quad of rows multiplies those. For Bf16 and Int8 (its scales still applied at each tile's
  //   end) the same products and sums as widening inside each tile, so the same bits; widened
  //   inside each tile, the conversion is repeated for every quad of rows (ppo_mlp at batch 64
  //   ran 0.83-0.9x as fast with narrowed weights as with f32).
  // - Bf16Dot: from that many rows the layer multiplies the bf16 weights by its f32 activations
  //   with f32 FMAs, as bf16-weights does — through the buffer, or, where the panels do not fit
  //   it, widening its bf16 pairs inside each tile (the Bf16 microkernels: the same layout) —
  //   since vdpbf16ps issues half the FMA's products per cycle on Sapphire Rapids (ppo_mlp at
  //   batch 64 ran 0.67x as fast in bf16 as in f32 there). Fewer rows round them to bf16 and
  //   use vdpbf16ps. Not where vdpbf16ps makes twice the FMA's products (TargetTraits::fastBf16Dot,
  //   AMD Zen 4: wide_mlp at batch 64 1.66x, ppo_mlp 1.54x as fast in bf16 as in f32, widened
  //   1.0x): there every run multiplies in bf16 (widenRows 0).
  int64_t widenRows = 0;
  bool widenBuffer = false;
  // A widenBuffer layer with fewer than ScheduleOptions::streamedWeights weights (its f32 panels
  // stay in L2): the model widens its panels once, at its first run of at least widenRows rows,
  // into its region of f32 panels (Schedule::loadWidened, pc::widenAtLoad), and every such run
  // reads them from there, this float of the region on, in place of the chunks' stack buffers: the
  // same values, so the same bits. -1: none.
  int64_t loadWidened = -1;
  // A Form::PackedConv kernel with loadWidened: its tiles read the region's f32 panels at every
  // batch (panelStride their stride; the model widens them at its first run): a conv uses each
  // weight at many positions even in a run of one row, and atari_cnn's two bf16 convs of 32K and
  // 37K weights, widened inside each tile, took 1.09-1.11x their f32 time at batch 64 (1.06-1.15x
  // at batch 1).
  bool widenedTiles = false;
  static constexpr int64_t kWidenRows = 16, kMaxWidenedFloats = 16384;
  // Whether gemm8x32's eight-row tiles read this layer's panels as stored: not bf16 pairs for
  // vdpbf16ps, which run as quads (below widenRows rows; from there the widened panels take the
  // eight-row tiles at every storage).
  bool octetsOnStored() const { return weightStorage != WeightStorage::Bf16Dot; }
  // A Form::PackedGemm kernel whose epilogue only stores its f32 result densely into an output
  // whose rows (the domain's leading axes flattened) lie `directRows` elements apart: the C++
  // printer has the microkernel write each tile's rows there, where it went through a stack tile
  // and a copy (a 256 x 16 by 16 x 48 linear layer at batch 64: 11.7 -> 9.1 us; the LLVM
  // printer's tile is registers, stored where the epilogue stores). 0: through the tile.
  int64_t directRows = 0;
  // A Form::PackedGemm kernel whose packed weights take at least kAlternateUnitsBytes: every other
  // run walks its units from the last to the first (Schedule::countsCalls), so that a run starts
  // on the panels the run before ended on, which are still in the core's L2, where a layer larger
  // than the L2 streams all of its weights from L3 again every run in one direction
  // (atari_cnn's 6.4 MB 3136 -> 512 layer at batch 1, docs/performance.md). Each unit still sums
  // its outputs in the same order: the same bits either way.
  bool alternateUnits = false;
  static constexpr int64_t kAlternateUnitsBytes = 512 * 1024;
  const ThreadSplit& splitOf(std::optional<Impl> impl) const;
};

struct Schedule {
  std::string cName;                    // NAME of NAME_run, NAME_descriptor, NAME.h
  std::vector<std::string> paramNames;  // the typed wrappers' parameters: inputs, then outputs
  std::vector<KernelSchedule> kernels;  // per kernel of the program
  std::vector<int64_t> tuneBatches;     // sorted, unique, positive
  // The weights blob: every param the kernels read raw (paramOffset, by root buffer), then each
  // packable kernel's panels; 64-byte aligned pieces.
  std::vector<unsigned char> weights;
  std::map<int, int64_t> paramOffset;
  // A model with updatable weights (KernelProgram::weights): the byte offset in `weights` of the
  // table pc::setWeights reads (the raw weights and every region's sources are in the blob too),
  // and the blob must be writable; -1 otherwise.
  int64_t weightTable = -1;
  // The workspace: staticBytes + perBatchBytes * batch; with oneDNN kernels, their scratch of
  // externPerBatch bytes per row after the memory plan's buffers (at the 64-byte rounded end).
  bool usesExtern = false;
  int64_t externPerBatch = 0;
  int64_t workspaceStatic = 0, workspacePerBatch = 0;
  // The layers widened once for runs of many rows (KernelSchedule::loadWidened), as the jobs of
  // pc::widenAtLoad: the region holds loadWidenedFloats floats (zeroed memory of the loaded model,
  // not bytes of its file), all of them filled by the first kernel that runs such a layer on
  // widenRows rows or more (the others wait for it).
  struct LoadWidening {
    size_t kernel = 0;
    int64_t from = 0, to = 0, K = 0, stride = 0, count = 0;  // pc::WidenJob's
  };
  std::vector<LoadWidening> loadWidened;
  int64_t loadWidenedFloats = 0;
  int64_t maxBatch = 0;  // the largest batch the workspace arithmetic allows (codegen::maxBatch)
  // The target has AVX-512 (!TargetTraits::narrowVectors): a compare's lanes stay in a mask
  // register, so a row maximum's NaN flags are 16 mask bits a step, not 8 i32 lanes of the two
  // halves compared at once (the form AVX2 needs, which AVX-512 pays two extracts a step for).
  bool maskRegisters = false;
  // Row blocks: a run of more than rowBlock rows runs every kernel on rowBlock rows at a time,
  // each input's and output's pointer advanced by its rows' bytes (inputRowBytes, outputRowBytes;
  // the workspace reused), so that a CNN's activations stay in the core's cache from one kernel
  // to the next instead of a whole batch's going out to L3 and memory (IMPALA's first conv and
  // pool at batch 64: 2.5x and 5x their per-image time at batch 1). A multiple of 4: a linear
  // layer's rows fall in the same quads of its microkernel as without blocks, so the outputs are
  // the same bits. 0: the whole batch at once (rows not independent, oneDNN kernels, tuning).
  int64_t rowBlock = 0;
  std::vector<int64_t> inputRowBytes, outputRowBytes;
  // Some kernel alternates its units' order (KernelSchedule::alternateUnits): the run entry
  // counts the runs (pc_calls, a relaxed atomic add: concurrent runs only change which way a
  // kernel walks, never a value), and such a kernel reads the count's parity. With row blocks
  // each block is a run.
  bool countsCalls = false;
};

// Whether every row of the batch is computed from the same row of every input alone (so the
// rows may run in blocks), with every input and output batch-major: no buffer has the batch
// anywhere but its first dimension, no node reduces, normalises, gathers, slices, pads, splits
// or concatenates along it or moves it (rowBlocksOf, Schedule::rowBlock).
bool rowsIndependent(const KernelProgram& p);

// A sum's run of partial sums (KernelSchedule::sumRun; loop_shapes.cpp).
std::optional<KernelSchedule::SumRun> sumRun(const KernelProgram& p, const Kernel& k);

// The extents of the loops both printers write for a Form::Pointwise kernel: its domain, the
// collapsed axes (KernelSchedule::collapseFrom) 1 but the last, which takes their product.
std::vector<ir::Dim> loopExtents(const Kernel& k, const KernelSchedule& ks);

// The order of the loops both printers write for a Form::Pointwise kernel, outermost first: the
// domain's, or with `vectorInner` KernelSchedule::vectorAxis moved innermost.
std::vector<size_t> loopOrder(const Kernel& k, const KernelSchedule& ks, bool vectorInner);

// The schedule options of a backend's CodegenOptions.
ScheduleOptions scheduleOptions(const CodegenOptions& options);

// policyc::Error for a bad choice (an implementation a kernel does not have, no range for every
// batch) or bad tuning batch sizes.
Schedule scheduleProgram(const KernelProgram& program, const MemoryPlan& plan, const ScheduleOptions& options);

// NAME.h: the C interface of the model (the same for both backends).
std::string cHeader(const KernelProgram& program, const Schedule& schedule, const std::string& target);

}  // namespace policyc::codegen
