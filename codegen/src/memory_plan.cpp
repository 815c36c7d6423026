// Memory planning: live ranges over the kernel order, in-place reuse, first-fit packing.
#include "policyc/codegen/memory_plan.h"

#include <algorithm>
#include <limits>

#include "policyc/support/sizes.h"

#include <algorithm>

#include <fmt/format.h>

#include "policyc/ir/error.h"
#include "policyc/ir/text.h"

namespace policyc::codegen {
namespace {

constexpr int64_t kAlign = 64;
int64_t alignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

IndexMap identity(size_t rank) {
  IndexMap map;
  for (size_t d = 0; d < rank; ++d) map.push_back({static_cast<int>(d), 1, 0});
  return map;
}

// A pointwise kernel may overwrite operand `in` with its result `out` when each element is read
// before the same element is written: both indexed exactly by the loop, same element size.
bool inPlaceSafe(const KernelProgram& p, const Kernel& k, int in, int out) {
  if (k.kind != KernelKind::Pointwise) return false;
  const Buffer& a = p.buffer(in);
  const Buffer& b = p.buffer(out);
  if (ir::dtypeSize(a.type.dtype) != ir::dtypeSize(b.type.dtype) || a.type.shape != b.type.shape) return false;
  if (k.domain != b.type.shape) return false;
  for (const Instr& i : k.body) {
    bool touches = (i.opcode == Opcode::Load || i.opcode == Opcode::Store) && (i.buffer == in || i.buffer == out);
    if (touches && i.index != identity(k.domain.size())) return false;
  }
  return true;
}

}  // namespace

const MemorySlot* MemoryPlan::slotOf(int buffer) const {
  for (const MemorySlot& s : slots) {
    if (s.buffer == buffer) return &s;
  }
  return nullptr;
}

int64_t MemoryPlan::offsetOf(int buffer, int64_t batch) const {
  const MemorySlot* s = slotOf(buffer);
  if (!s) fail("internal: buffer {} has no memory slot", buffer);
  return s->perBatch ? staticBytes + s->offset * batch : s->offset;
}

int64_t MemoryPlan::inPlaceCount() const {
  return std::count_if(slots.begin(), slots.end(), [](const MemorySlot& s) { return s.sharesWith >= 0; });
}

MemoryPlan planMemory(const KernelProgram& p) {
  MemoryPlan plan;
  // Live ranges of root temporaries: first writer to last reader (a view's reader reads its root).
  std::vector<int> first(p.buffers.size(), -1), last(p.buffers.size(), -1);
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    int ki = static_cast<int>(k);
    for (int id : p.kernels[k].writes()) {
      int root = p.buffer(id).root;
      if (first[static_cast<size_t>(root)] < 0) first[static_cast<size_t>(root)] = ki;
      last[static_cast<size_t>(root)] = std::max(last[static_cast<size_t>(root)], ki);
    }
    for (int id : p.kernels[k].reads()) {
      int root = p.buffer(id).root;
      if (p.buffer(root).kind != BufferKind::Temp) continue;
      if (first[static_cast<size_t>(root)] < 0) {
        fail("internal: kernel '{}' reads '{}' before any kernel writes it", p.kernels[k].name, p.buffer(root).name);
      }
      last[static_cast<size_t>(root)] = std::max(last[static_cast<size_t>(root)], ki);
    }
  }
  for (const Buffer& b : p.buffers) {
    if (b.kind != BufferKind::Temp || b.isView() || first[static_cast<size_t>(b.id)] < 0) continue;
    MemorySlot s;
    s.buffer = b.id;
    s.perBatch = !b.type.shape.empty() && b.type.shape[0].isBatch();
    int64_t elems = 1;
    for (size_t d = s.perBatch ? 1 : 0; d < b.type.shape.size(); ++d) elems *= b.type.shape[d].value();
    s.bytes = alignUp(elems * static_cast<int64_t>(ir::dtypeSize(b.type.dtype)));
    s.firstKernel = first[static_cast<size_t>(b.id)];
    s.lastKernel = last[static_cast<size_t>(b.id)];
    plan.slots.push_back(s);
  }

  // In place: a kernel's result takes over an operand whose last reader it is.
  auto slotIndex = [&](int buffer) -> int {
    for (size_t i = 0; i < plan.slots.size(); ++i) {
      if (plan.slots[i].buffer == buffer) return static_cast<int>(i);
    }
    return -1;
  };
  std::vector<int> group(plan.slots.size());
  for (size_t i = 0; i < group.size(); ++i) group[i] = static_cast<int>(i);
  for (size_t i = 0; i < plan.slots.size(); ++i) {
    MemorySlot& out = plan.slots[i];
    const Kernel& k = p.kernels[static_cast<size_t>(out.firstKernel)];
    if (k.writes().size() != 1) continue;
    for (int in : k.reads()) {
      int si = slotIndex(in);
      if (si < 0 || p.buffer(in).isView()) continue;
      MemorySlot& src = plan.slots[static_cast<size_t>(si)];
      bool viewsOfIn = std::any_of(p.buffers.begin(), p.buffers.end(), [&](const Buffer& b) { return b.id != in && b.root == in; });
      if (viewsOfIn || src.sharesWith >= 0 || src.lastKernel != out.firstKernel || src.bytes != out.bytes ||
          src.perBatch != out.perBatch || group[static_cast<size_t>(si)] != si || !inPlaceSafe(p, k, in, out.buffer)) {
        continue;
      }
      out.sharesWith = in;
      group[i] = si;
      break;
    }
  }

  // First-fit packing of each area, largest groups first; a group spans its members' lifetimes.
  struct Group {
    int slot;
    int firstKernel;
    int lastKernel;
  };
  for (bool perBatch : {false, true}) {
    std::vector<Group> groups;
    for (size_t i = 0; i < plan.slots.size(); ++i) {
      if (plan.slots[i].perBatch != perBatch) continue;
      if (group[i] == static_cast<int>(i)) {
        groups.push_back({static_cast<int>(i), plan.slots[i].firstKernel, plan.slots[i].lastKernel});
      }
    }
    for (size_t i = 0; i < plan.slots.size(); ++i) {
      if (plan.slots[i].perBatch != perBatch || group[i] == static_cast<int>(i)) continue;
      // Follow the chain to its head (a -> b -> c in place all live in a's memory).
      int head = group[i];
      while (group[static_cast<size_t>(head)] != head) head = group[static_cast<size_t>(head)];
      group[i] = head;
      for (Group& g : groups) {
        if (g.slot == head) g.lastKernel = std::max(g.lastKernel, plan.slots[i].lastKernel);
      }
    }
    std::sort(groups.begin(), groups.end(), [&](const Group& a, const Group& b) {
      int64_t sa = plan.slots[static_cast<size_t>(a.slot)].bytes, sb = plan.slots[static_cast<size_t>(b.slot)].bytes;
      return sa != sb ? sa > sb : a.firstKernel < b.firstKernel;
    });
    std::vector<const Group*> placed;
    int64_t end = 0;
    for (const Group& g : groups) {
      MemorySlot& s = plan.slots[static_cast<size_t>(g.slot)];
      std::vector<std::pair<int64_t, int64_t>> busy;
      for (const Group* o : placed) {
        if (o->lastKernel < g.firstKernel || g.lastKernel < o->firstKernel) continue;
        const MemorySlot& os = plan.slots[static_cast<size_t>(o->slot)];
        busy.emplace_back(os.offset, os.offset + os.bytes);
      }
      std::sort(busy.begin(), busy.end());
      int64_t offset = 0;
      for (const auto& [lo, hi] : busy) {
        if (offset + s.bytes <= lo) break;
        offset = std::max(offset, hi);
      }
      s.offset = offset;
      end = std::max(end, offset + s.bytes);
      placed.push_back(&g);
    }
    for (size_t i = 0; i < plan.slots.size(); ++i) {
      if (plan.slots[i].perBatch == perBatch && group[i] != static_cast<int>(i)) {
        plan.slots[i].offset = plan.slots[static_cast<size_t>(group[i])].offset;
      }
    }
    (perBatch ? plan.perBatchBytes : plan.staticBytes) = end;
  }
  return plan;
}

int64_t maxBatch(int64_t staticBytes, int64_t perBatchBytes) {
  constexpr int64_t kHalfAddressSpace = std::numeric_limits<int64_t>::max() / 2;
  if (perBatchBytes <= 0) return sizes::kMaxBatch;
  return std::min(sizes::kMaxBatch, std::max<int64_t>(0, kHalfAddressSpace - staticBytes) / perBatchBytes);
}

std::string printMemoryPlan(const KernelProgram& p, const MemoryPlan& plan) {
  std::string out = fmt::format("workspace: {} + {}*batch bytes ({} temporaries, {} in place)\n", plan.staticBytes,
                                plan.perBatchBytes, plan.slots.size(), plan.inPlaceCount());
  for (const MemorySlot& s : plan.slots) {
    out += fmt::format("  %{} {} offset {}{} size {}{} live kernels {}..{}", ir::formatName(p.buffer(s.buffer).name),
                       p.buffer(s.buffer).type.str(), s.offset, s.perBatch ? "*batch" : "", s.bytes,
                       s.perBatch ? "*batch" : "", s.firstKernel, s.lastKernel);
    if (s.sharesWith >= 0) out += fmt::format(" (in place of %{})", ir::formatName(p.buffer(s.sharesWith).name));
    out += "\n";
  }
  return out;
}

}  // namespace policyc::codegen
