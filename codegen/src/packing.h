// What the backends share about template kernels: which linear/conv kernels run on packed weight
// panels of kPanel output columns and the panels' contents, and a reduction's reduced axes.
#pragma once

#include <cstdint>
#include <vector>

#include "policyc/codegen/kernel_program.h"

namespace policyc::codegen {

constexpr int64_t kPanel = 16;  // output columns per packed weight panel (one 16-float vector)

// The weight as an [N, K] matrix: linear [N,K]; conv [M, C*KH*KW].
int64_t packedN(const KernelProgram& p, const Kernel& k);
int64_t packedK(const KernelProgram& p, const Kernel& k);

// Linear and (2-D, ungrouped) conv kernels with constant f32 weights run on packed weight panels.
bool packable(const KernelProgram& p, const Kernel& k);

// The weight packed into panels: panel j holds W[j*16 + c, q] at [q][c], so a microkernel streams
// one panel contiguously (zeros past N).
std::vector<float> packWeightPanels(const KernelProgram& p, const Kernel& k);
// A value as bf16 (its upper 16 bits rounded to nearest even; a NaN stays a quiet NaN): the
// rounding of the packed weights. (Activations multiplied in bf16 are rounded at run time by
// vcvtneps2bf16, the same rule except that a denormal becomes zero.)
uint16_t bf16Bits(float v);
// The values of k one input channel feeds, whose sums a narrowed column keeps (below): a conv's
// window of one channel (KH * KW), a linear layer's H * W ... positions of one channel where its
// input is a flattened feature map [batch, C, H, W ...]; else K (the column as a whole).
int64_t inputChannelGroup(const KernelProgram& p, const Kernel& k);
// Narrowed columns keep their sums. An input channel's values share a mean (a ReLU feature's, an
// observation's offset), which every rounding error of the values it meets multiplies: rounded
// one by one, a column passes that mean with about sqrt(K / 12) steps of error, kept, with half
// a step. So each column's rounding keeps the sum of each `group` of k (inputChannelGroup), then
// of the whole column, moving the fewest values to their grid neighbour on the other side.
//
// bf16 (each value first rounded by bf16Bits) as pairs along k, for both bf16 storages
// (WeightStorage::Bf16: widened by a shift or a mask, pc::loadPair; Bf16Dot: multiplied as pairs
// by vdpbf16ps): panel j's row q holds, in 32-bit lane c, W[j*16 + c, 2q] (low half) and
// W[j*16 + c, 2q + 1] (high half), a zero high half past an odd K. A panel is bf16PairRows(K) rows
// of 16 lanes. Where a range's errors add up to S, values rounded S's way move to the other
// neighbour, least added squared error first, while that lowers err^2 + S^2.
std::vector<uint16_t> toBf16Pairs(const std::vector<float>& packed, int64_t panelCount, int64_t kk, int64_t group);
inline int64_t bf16PairRows(int64_t kk) { return (kk + 1) / 2; }
// int8 takes one scale per column (per output channel), max |w| / 127, and rounds w / scale to
// nearest; where a range's errors add up to n whole steps, the |n| values rounded farthest from
// w / scale (each within half a step of the other way) are rounded the other way, so that the
// range's sum of q is the nearest integer to its sum of w / scale. Each value stays within one
// step of w / scale and inside [-127, 127]. `scales` gets panels * 16 floats (0 for a zero or
// padding column).
std::vector<int8_t> toInt8(const std::vector<float>& packed, int64_t panelCount, int64_t kk, int64_t group, std::vector<float>& scales);
// Impl::WinogradF23's weights (schedule.h, WinogradTiles): for each of the 16 values (i, j) of
// U = G g G^T (G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]) of each output channel m and input
// channel c, computed in double and rounded once to f32, at [(i*4 + j) * M + m][c].
std::vector<float> winogradWeights(const KernelProgram& p, const Kernel& k);
// The bias padded to whole panels (zeros when the layer has none).
std::vector<float> packBiasPanels(const KernelProgram& p, const Kernel& k);
// For updatable params (ir::Node::paramSource): the sources of the packed weight and bias, moved
// as their values are (0, a literal zero, for padding and a missing bias); empty when fixed.
std::vector<int64_t> packedWeightSource(const KernelProgram& p, const Kernel& k);
std::vector<int64_t> packedBiasSource(const KernelProgram& p, const Kernel& k);

// reduce_* / argmax / global_avg_pool: which axes of the operand (rank `rank`) are reduced, and
// whether the output keeps them as size-1 dimensions.
struct ReducedAxes {
  std::vector<bool> reduced;
  bool keepdims = true;
};
ReducedAxes reducedAxes(const ir::Node& node, size_t rank);

}  // namespace policyc::codegen
