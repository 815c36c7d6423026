// Fusion on the kernel program: splices pointwise bodies into each other, into template
// epilogues and into reduction prologues, then renames kernels after what they contain.
#include <algorithm>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>

#include "policyc/codegen/kernel_program.h"
#include "policyc/ir/error.h"

namespace policyc::codegen {
namespace {

bool loadsBuffer(const Instr& i, int buffer) { return i.opcode == Opcode::Load && i.buffer == buffer; }

IndexMap identity(size_t rank) {
  IndexMap map;
  for (size_t d = 0; d < rank; ++d) map.push_back({static_cast<int>(d), 1, 0});
  return map;
}

// The only store of a pointwise kernel, when it writes its whole domain in order.
const Instr* soleIdentityStore(const Kernel& k) {
  const Instr* store = nullptr;
  for (const Instr& i : k.body) {
    if (i.opcode != Opcode::Store) continue;
    if (store) return nullptr;
    store = &i;
  }
  if (!store || store != &k.body.back() || store->index != identity(k.domain.size())) return nullptr;
  return store;
}

// Appends `suffix` to `prefix`, renumbering its arguments; loads of `replaced` become `value`.
std::vector<Instr> splice(std::vector<Instr> prefix, const std::vector<Instr>& suffix, int replaced, int value) {
  std::vector<int> remap(suffix.size(), -1);
  for (size_t i = 0; i < suffix.size(); ++i) {
    if (loadsBuffer(suffix[i], replaced)) {
      remap[i] = value;
      continue;
    }
    Instr copy = suffix[i];
    for (int& a : copy.args) a = remap[static_cast<size_t>(a)];
    prefix.push_back(std::move(copy));
    remap[i] = static_cast<int>(prefix.size()) - 1;
  }
  return prefix;
}

class Fuser {
 public:
  explicit Fuser(KernelProgram& p) : p_(p) {}

  FusionStats run() {
    bool changed = true;
    while (changed) {
      changed = fusePointwise() || fuseEpilogue() || fusePrologue();
    }
    return stats_;
  }

 private:
  bool hasViews(int id) const {
    return std::any_of(p_.buffers.begin(), p_.buffers.end(), [&](const Buffer& b) { return b.id != id && b.root == id; });
  }

  std::vector<size_t> writersOf(int id) const {
    std::vector<size_t> result;
    for (size_t k = 0; k < p_.kernels.size(); ++k) {
      for (const Instr& i : p_.kernels[k].body) {
        if (i.opcode == Opcode::Store && i.buffer == id) {
          result.push_back(k);
          break;
        }
      }
    }
    return result;
  }

  // A temporary that fusion may stop materialising: one writer, no views, not a graph output.
  bool privateTemp(int id) const {
    const Buffer& b = p_.buffer(id);
    return b.kind == BufferKind::Temp && !b.isView() && !hasViews(id) && writersOf(id).size() == 1;
  }

  // Every load of `id` in `k` reads it exactly where a kernel over the same domain wrote it.
  bool readsInOrder(const Kernel& k, int id) const {
    if (k.domain != p_.buffer(id).type.shape) return false;
    for (const Instr& i : k.body) {
      if (loadsBuffer(i, id) && i.index != identity(k.domain.size())) return false;
    }
    for (const Instr& i : k.prologue) {
      if (loadsBuffer(i, id)) return false;
    }
    return std::find(k.anchorInputs.begin(), k.anchorInputs.end(), id) == k.anchorInputs.end();
  }

  // Buffers `k` reads, other than `except`, are all ready before kernel `at` runs.
  bool inputsReadyBefore(const Kernel& k, int except, size_t at) const {
    for (int id : k.reads()) {
      int root = p_.buffer(id).root;
      if (root == except) continue;
      for (size_t w : writersOf(root)) {
        if (w >= at) return false;
      }
    }
    return true;
  }

  void absorbSources(Kernel& into, const Kernel& from, bool fromFirst) {
    std::vector<const ir::Node*> merged = fromFirst ? from.sources : into.sources;
    for (const ir::Node* n : fromFirst ? into.sources : from.sources) {
      if (std::find(merged.begin(), merged.end(), n) == merged.end()) merged.push_back(n);
    }
    into.sources = std::move(merged);
  }

  // A pointwise producer whose whole result exactly one kernel reads, and nothing else: where every
  // producer-into-reader fusion starts.
  struct Producer {
    int buffer;    // what it writes
    int value;     // the body instruction holding the stored value
    size_t reader; // the kernel that reads it
  };
  std::optional<Producer> soleReaderProducer(size_t pi) const {
    const Kernel& P = p_.kernels[pi];
    if (P.kind != KernelKind::Pointwise) return std::nullopt;
    const Instr* store = soleIdentityStore(P);
    if (!store || !privateTemp(store->buffer) || P.domain != p_.buffer(store->buffer).type.shape) return std::nullopt;
    std::vector<size_t> readers = p_.readersOf(store->buffer);
    if (readers.size() != 1) return std::nullopt;
    return Producer{store->buffer, store->args[0], readers[0]};
  }

  // Removes producer `pi` once its body lives in `into`.
  void absorbProducer(Kernel& into, size_t pi, int& counter) {
    absorbSources(into, p_.kernels[pi], true);
    p_.kernels.erase(p_.kernels.begin() + static_cast<long>(pi));
    ++counter;
  }

  // A pointwise producer whose value only one pointwise consumer reads moves into that consumer.
  bool fusePointwise() {
    for (size_t pi = 0; pi < p_.kernels.size(); ++pi) {
      std::optional<Producer> prod = soleReaderProducer(pi);
      if (!prod) continue;
      Kernel& K = p_.kernels[prod->reader];
      if (K.kind != KernelKind::Pointwise || !readsInOrder(K, prod->buffer)) continue;
      const Kernel& P = p_.kernels[pi];
      K.body = splice(std::vector<Instr>(P.body.begin(), P.body.end() - 1), K.body, prod->buffer, prod->value);
      absorbProducer(K, pi, stats_.pointwise);
      return true;
    }
    return false;
  }

  // A pointwise consumer of a template's result moves into the template's epilogue. The result is
  // still stored when other kernels read it.
  bool fuseEpilogue() {
    for (size_t ti = 0; ti < p_.kernels.size(); ++ti) {
      Kernel& T = p_.kernels[ti];
      if (T.kind == KernelKind::Pointwise || T.body.empty() || T.body.back().opcode != Opcode::Store) continue;
      const Instr last = T.body.back();
      int x = last.buffer;
      if (last.index != identity(T.domain.size()) || !privateTemp(x)) continue;
      std::vector<size_t> readers = p_.readersOf(x);
      for (size_t ci : readers) {
        Kernel& C = p_.kernels[ci];
        if (C.kind != KernelKind::Pointwise || ci <= ti || C.domain != T.domain || !readsInOrder(C, x)) continue;
        if (!soleIdentityStore(C) && readers.size() > 1) continue;
        if (!inputsReadyBefore(C, x, ti)) continue;
        std::vector<Instr> prefix = T.body;
        if (readers.size() == 1) prefix.pop_back();  // nobody else needs the intermediate
        Kernel consumer = std::move(C);
        T.body = splice(std::move(prefix), consumer.body, x, last.args[0]);
        absorbSources(T, consumer, false);
        p_.kernels.erase(p_.kernels.begin() + static_cast<long>(ci));
        ++stats_.epilogues;
        return true;
      }
    }
    return false;
  }

  // A pointwise producer of the operand a reduction reads becomes the reduction's prologue.
  bool fusePrologue() {
    for (size_t pi = 0; pi < p_.kernels.size(); ++pi) {
      std::optional<Producer> prod = soleReaderProducer(pi);
      if (!prod) continue;
      int x = prod->buffer;
      Kernel& R = p_.kernels[prod->reader];
      if (R.kind != KernelKind::Reduction || !R.prologue.empty() || R.anchorInputs.empty() || R.anchorInputs[0] != x) {
        continue;
      }
      if (std::count(R.anchorInputs.begin(), R.anchorInputs.end(), x) != 1) continue;
      if (std::any_of(R.body.begin(), R.body.end(), [&](const Instr& i) { return loadsBuffer(i, x); })) continue;
      const Kernel& P = p_.kernels[pi];
      R.prologue.assign(P.body.begin(), P.body.end() - 1);
      R.prologueResult = prod->value;
      absorbProducer(R, pi, stats_.prologues);
      return true;
    }
    return false;
  }

  KernelProgram& p_;
  FusionStats stats_;
};

}  // namespace

bool Kernel::canFail() const {
  if (anchor && anchor->isOp(ir::Op::Gather)) return true;
  for (const std::vector<Instr>* instrs : {&prologue, &body}) {
    for (const Instr& in : *instrs) {
      if (in.opcode == Opcode::Apply && in.op == ir::Op::Div && !ir::isFloat(in.dtype)) return true;
    }
  }
  return false;
}

std::vector<int> Kernel::reads() const {
  std::vector<int> ids = anchorInputs;
  // With a prologue, the reduced operand is computed in place, never read from memory.
  if (!prologue.empty() && !ids.empty()) ids.erase(ids.begin());
  for (const auto* instrs : {&prologue, &body}) {
    for (const Instr& i : *instrs) {
      if (i.opcode == Opcode::Load) ids.push_back(i.buffer);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int> Kernel::writes() const {
  std::vector<int> ids;
  for (const Instr& i : body) {
    if (i.opcode == Opcode::Store) ids.push_back(i.buffer);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<size_t> KernelProgram::readersOf(int id) const {
  std::vector<size_t> result;
  for (size_t k = 0; k < kernels.size(); ++k) {
    for (int r : kernels[k].reads()) {
      if (buffer(r).root == id || r == id) {
        result.push_back(k);
        break;
      }
    }
  }
  return result;
}

void nameKernels(KernelProgram& program) {
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    Kernel& kernel = program.kernels[k];
    // The source ops in graph order; a linear or conv's own bias is part of its name.
    std::string parts;
    for (const ir::Node* n : kernel.sources) {
      parts += fmt::format("_{}", n->info().name);
      if (n == kernel.anchor && n->numInputs() == 3 && n->info().fusion == ir::FusionKind::GemmLike) parts += "_bias";
    }
    if (parts.empty()) parts = "_copy";
    if (parts.size() > 72) parts = parts.substr(0, parts.rfind('_', 72)) + "_etc";
    bool fused = kernel.sources.size() > 1;
    kernel.name = fmt::format("{}{}_{}", fused ? "fused" : "", fused ? parts : parts.substr(1), k);
  }
}

FusionStats fuseKernels(KernelProgram& program) {
  FusionStats stats = Fuser(program).run();
  nameKernels(program);
  return stats;
}

}  // namespace policyc::codegen
