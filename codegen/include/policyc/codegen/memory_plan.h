// The memory plan: one workspace per run, every temporary at an offset linear in the batch size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policyc/codegen/kernel_program.h"

namespace policyc::codegen {

// The workspace is a static area (temporaries without `batch`) followed by a per-batch area:
// a temporary whose outermost dimension is `batch` occupies `rowBytes * batch` bytes at
// `staticBytes + rowOffset * batch`. Both areas are packed by liveness over the kernel order, so
// temporaries whose lifetimes do not overlap share memory, and a pointwise kernel may write its
// result over an operand it is the last reader of (in place). All offsets are multiples of 64.
struct MemorySlot {
  int buffer = -1;       // a root temp buffer of the program
  bool perBatch = false;
  int64_t offset = 0;    // static area: bytes; per-batch area: bytes per batch row
  int64_t bytes = 0;     // likewise
  int firstKernel = 0;   // live range, inclusive
  int lastKernel = 0;
  int sharesWith = -1;   // in place: the buffer whose memory this one takes over, else -1
};

struct MemoryPlan {
  std::vector<MemorySlot> slots;  // one per root temp buffer, by buffer id
  int64_t staticBytes = 0;        // a
  int64_t perBatchBytes = 0;      // b

  int64_t workspaceBytes(int64_t batch) const { return staticBytes + perBatchBytes * batch; }
  const MemorySlot* slotOf(int buffer) const;
  // Byte offset of a root temp buffer in the workspace at this batch size.
  int64_t offsetOf(int buffer, int64_t batch) const;
  int64_t inPlaceCount() const;
};

// The largest batch a run of a model whose workspace is `staticBytes + perBatchBytes * batch` may
// have: sizes::kMaxBatch, or less where the workspace would not fit in half the address space.
// Both backends' run functions refuse a larger batch (POLICYC_ERROR_ARGUMENT) and their
// workspace_bytes return SIZE_MAX for it.
int64_t maxBatch(int64_t staticBytes, int64_t perBatchBytes);

// Plans the program's temporaries (views live in their root's memory; inputs, outputs and params
// are not in the workspace). Throws policyc::Error if a temporary is read before it is written.
MemoryPlan planMemory(const KernelProgram& program);

// "workspace: 4096 + 8192*batch bytes", then one line per slot.
std::string printMemoryPlan(const KernelProgram& program, const MemoryPlan& plan);

}  // namespace policyc::codegen
