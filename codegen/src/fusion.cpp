// Fusion on the kernel program: splices pointwise bodies into each other, into template
// epilogues and into reduction prologues, then renames kernels after what they contain.
#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>
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

// What fusion asks about a kernel, kept up to date as kernels merge instead of recomputed by
// scanning bodies: a fused kernel can hold tens of thousands of instructions (a 50,000-node chain
// becomes one), and every query must stay proportional to the small side of a merge.
struct KernelFacts {
  struct Loads {
    int count = 0;
    int notIdentity = 0;  // loads whose index is not the kernel's identity map
  };
  std::unordered_map<int, Loads> bodyLoads;    // by buffer id
  std::unordered_map<int, int> prologueLoads;  // by buffer id
  std::unordered_map<int, int> stores;         // body stores by buffer id
  int totalStores = 0;
  std::unordered_set<const ir::Node*> sources;
  bool alive = true;

  static KernelFacts of(const Kernel& k) {
    KernelFacts f;
    const IndexMap id = identity(k.domain.size());
    for (const Instr& i : k.body) f.addBody(i, id);
    for (const Instr& i : k.prologue) {
      if (i.opcode == Opcode::Load) ++f.prologueLoads[i.buffer];
    }
    f.sources.insert(k.sources.begin(), k.sources.end());
    return f;
  }
  void addBody(const Instr& i, const IndexMap& id) {
    if (i.opcode == Opcode::Load) {
      Loads& l = bodyLoads[i.buffer];
      ++l.count;
      if (i.index != id) ++l.notIdentity;
    } else if (i.opcode == Opcode::Store) {
      ++stores[i.buffer];
      ++totalStores;
    }
  }
  // Adds another kernel's body facts (minus its loads of `replaced`, which a splice turns into a
  // value) to this one's.
  void absorbBody(const KernelFacts& other, int replaced) {
    for (const auto& [b, l] : other.bodyLoads) {
      if (b == replaced) continue;
      Loads& mine = bodyLoads[b];
      mine.count += l.count;
      mine.notIdentity += l.notIdentity;
    }
    for (const auto& [b, n] : other.stores) stores[b] += n;
    totalStores += other.totalStores;
  }
  void dropStore(int buffer) {
    if (--stores[buffer] == 0) stores.erase(buffer);
    --totalStores;
  }
};

// The most instructions fusion puts into one kernel body (or prologue). Beyond a few thousand
// straight-line statements the system C++ compiler's time and memory grow quadratically (a
// 10,000-op body takes a minute and 700 MB); long chains become several kernels instead.
constexpr size_t kMaxFusedInstructions = 1024;

class Fuser {
 public:
  explicit Fuser(KernelProgram& p) : p_(p) {}

  // The first fusion in kernel order, pointwise before epilogue before prologue, until none is
  // left. The scans resume where the last one stopped: a kernel found unfusable stays so until a
  // fusion touches it (see affected()), so each kernel is looked at a bounded number of times.
  FusionStats run() {
    for (const Buffer& b : p_.buffers) {
      if (b.isView()) viewRoots_.insert(b.root);
    }
    facts_.reserve(p_.kernels.size());
    for (size_t k = 0; k < p_.kernels.size(); ++k) {
      facts_.push_back(KernelFacts::of(p_.kernels[k]));
      for (int b : readsOf(k)) readers_[b].insert(k);
      for (const auto& [b, n] : facts_[k].stores) writers_[b].insert(k);
    }
    nextAlive_.resize(p_.kernels.size() + 1);
    for (size_t k = 0; k <= p_.kernels.size(); ++k) nextAlive_[k] = k;
    for (;;) {
      if (scan(0, [&](size_t k) { return fusePointwise(k); })) continue;
      if (scan(1, [&](size_t k) { return fuseEpilogue(k); })) continue;
      if (scan(2, [&](size_t k) { return fusePrologue(k); })) continue;
      break;
    }
    std::vector<Kernel> kept;
    for (size_t k = 0; k < p_.kernels.size(); ++k) {
      if (facts_[k].alive) kept.push_back(std::move(p_.kernels[k]));
    }
    p_.kernels = std::move(kept);
    return stats_;
  }

 private:
  // Scans phase `phase` from where it stopped; true after one fusion.
  template <typename Try>
  bool scan(int phase, const Try& tryAt) {
    for (size_t k = alive(start_[phase]); k < p_.kernels.size(); k = alive(k + 1)) {
      start_[phase] = k;
      if (tryAt(k)) return true;
    }
    start_[phase] = p_.kernels.size();
    return false;
  }

  // The first live kernel at or after k: a dead kernel points to a later one, and every dead kernel
  // passed is pointed straight at the answer (path compression).
  size_t alive(size_t k) {
    const size_t n = p_.kernels.size();
    size_t r = k;
    while (r < n && !facts_[r].alive) r = nextAlive_[r];
    while (k < r && k < n) {
      const size_t next = nextAlive_[k];
      nextAlive_[k] = r;
      k = next;
    }
    return std::min(r, n);
  }

  // Kernel::reads() from the facts.
  std::vector<int> readsOf(size_t k) const {
    const Kernel& K = p_.kernels[k];
    const KernelFacts& f = facts_[k];
    std::vector<int> ids = K.anchorInputs;
    if (!K.prologue.empty() && !ids.empty()) ids.erase(ids.begin());
    for (const auto& [b, l] : f.bodyLoads) ids.push_back(b);
    for (const auto& [b, n] : f.prologueLoads) ids.push_back(b);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
  }
  std::vector<int> writesOf(size_t k) const {
    std::vector<int> ids;
    for (const auto& [b, n] : facts_[k].stores) ids.push_back(b);
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  std::vector<size_t> sorted(const std::unordered_map<int, std::set<size_t>>& index, int b) const {
    auto it = index.find(b);
    return it == index.end() ? std::vector<size_t>{} : std::vector<size_t>(it->second.begin(), it->second.end());
  }
  std::vector<size_t> readersOf(int b) const { return sorted(readers_, b); }
  std::vector<size_t> writersOf(int b) const { return sorted(writers_, b); }

  // A temporary that fusion may stop materialising: one writer, no views, not a graph output.
  bool privateTemp(int id) const {
    const Buffer& b = p_.buffer(id);
    return b.kind == BufferKind::Temp && !b.isView() && !viewRoots_.count(id) && writersOf(id).size() == 1;
  }

  // The only store of a pointwise kernel, when it writes its whole domain in order.
  const Instr* soleIdentityStore(size_t k) const {
    const Kernel& K = p_.kernels[k];
    if (facts_[k].totalStores != 1 || K.body.empty()) return nullptr;
    const Instr& last = K.body.back();
    if (last.opcode != Opcode::Store || last.index != identity(K.domain.size())) return nullptr;
    return &last;
  }

  // Every load of `id` in `k` reads it exactly where a kernel over the same domain wrote it.
  bool readsInOrder(size_t k, int id) const {
    const Kernel& K = p_.kernels[k];
    if (K.domain != p_.buffer(id).type.shape) return false;
    auto it = facts_[k].bodyLoads.find(id);
    if (it != facts_[k].bodyLoads.end() && it->second.notIdentity > 0) return false;
    if (facts_[k].prologueLoads.count(id)) return false;
    return std::find(K.anchorInputs.begin(), K.anchorInputs.end(), id) == K.anchorInputs.end();
  }

  // Buffers `k` reads, other than `except`, are all ready before kernel `at` runs.
  bool inputsReadyBefore(size_t k, int except, size_t at) const {
    for (int id : readsOf(k)) {
      int root = p_.buffer(id).root;
      if (root == except) continue;
      auto w = writers_.find(root);
      if (w != writers_.end() && !w->second.empty() && *w->second.rbegin() >= at) return false;
    }
    return true;
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
    const Instr* store = soleIdentityStore(pi);
    if (!store || !privateTemp(store->buffer) || P.domain != p_.buffer(store->buffer).type.shape) return std::nullopt;
    auto readers = readers_.find(store->buffer);
    if (readers == readers_.end() || readers->second.size() != 1) return std::nullopt;
    return Producer{store->buffer, store->args[0], *readers->second.begin()};
  }

  // Sources of `from` join those of `into` (in order, each once).
  void absorbSources(size_t into, size_t from, bool fromFirst) {
    Kernel& I = p_.kernels[into];
    Kernel& F = p_.kernels[from];
    KernelFacts& fi = facts_[into];
    KernelFacts& ff = facts_[from];
    if (fromFirst) {
      std::swap(I.sources, F.sources);
      std::swap(fi.sources, ff.sources);
    }
    for (const ir::Node* n : F.sources) {
      if (fi.sources.insert(n).second) I.sources.push_back(n);
    }
  }

  // Kernel `dead` is gone (absorbed into `survivor`, whose facts are already updated): the indexes
  // follow, and every scan restarts no later than the first kernel the change could make fusable.
  void merged(size_t survivor, size_t dead, const std::vector<int>& survivorReadsBefore,
              const std::vector<int>& survivorWritesBefore, const std::vector<int>& deadReads,
              const std::vector<int>& deadWrites) {
    for (int b : deadReads) readers_[b].erase(dead);
    for (int b : deadWrites) writers_[b].erase(dead);
    for (int b : survivorReadsBefore) readers_[b].erase(survivor);
    for (int b : survivorWritesBefore) writers_[b].erase(survivor);
    const std::vector<int> reads = readsOf(survivor), writes = writesOf(survivor);
    for (int b : reads) readers_[b].insert(survivor);
    for (int b : writes) writers_[b].insert(survivor);
    facts_[dead].alive = false;
    nextAlive_[dead] = dead + 1;

    // What the change can make fusable (docs/kernel_program.md, "Fusion"): the survivor, and the
    // writers of any buffer whose readers or writers changed (as producers or templates of those
    // readers). A template whose consumer reads a buffer that now has an earlier writer (an
    // epilogue's stores move up to its template) lies after the survivor, which every scan
    // restarts from anyway.
    size_t first = survivor;
    auto writersOfBuffers = [&](const std::vector<int>& buffers) {
      for (int b : buffers) {
        auto w = writers_.find(b);
        if (w != writers_.end() && !w->second.empty()) first = std::min(first, *w->second.begin());
      }
    };
    for (const std::vector<int>* set : {&survivorReadsBefore, &survivorWritesBefore, &deadReads, &deadWrites, &reads, &writes}) {
      writersOfBuffers(*set);
    }
    for (size_t& s : start_) s = std::min(s, first);
  }

  // A pointwise producer whose value only one pointwise consumer reads moves into that consumer.
  bool fusePointwise(size_t pi) {
    std::optional<Producer> prod = soleReaderProducer(pi);
    if (!prod) return false;
    const size_t ki = prod->reader;
    Kernel& K = p_.kernels[ki];
    if (K.kind != KernelKind::Pointwise || !readsInOrder(ki, prod->buffer)) return false;
    Kernel& P = p_.kernels[pi];
    if (P.body.size() - 1 + K.body.size() > kMaxFusedInstructions) return false;
    const std::vector<int> kReads = readsOf(ki), kWrites = writesOf(ki), pReads = readsOf(pi), pWrites = writesOf(pi);
    std::vector<Instr> prefix = std::move(P.body);
    prefix.pop_back();  // the store of the fused-away buffer
    K.body = splice(std::move(prefix), K.body, prod->buffer, prod->value);
    KernelFacts& fk = facts_[ki];
    KernelFacts& fp = facts_[pi];
    fp.dropStore(prod->buffer);
    fk.bodyLoads.erase(prod->buffer);
    fk.absorbBody(fp, -1);
    absorbSources(ki, pi, true);
    ++stats_.pointwise;
    merged(ki, pi, kReads, kWrites, pReads, pWrites);
    return true;
  }

  // A pointwise consumer of a template's result moves into the template's epilogue. The result is
  // still stored when other kernels read it.
  bool fuseEpilogue(size_t ti) {
    Kernel& T = p_.kernels[ti];
    if (T.kind == KernelKind::Pointwise || T.body.empty() || T.body.back().opcode != Opcode::Store) return false;
    const Instr last = T.body.back();
    int x = last.buffer;
    if (last.index != identity(T.domain.size()) || !privateTemp(x)) return false;
    std::vector<size_t> readers = readersOf(x);
    for (size_t ci : readers) {
      Kernel& C = p_.kernels[ci];
      if (C.kind != KernelKind::Pointwise || ci <= ti || C.domain != T.domain || !readsInOrder(ci, x)) continue;
      if (!soleIdentityStore(ci) && readers.size() > 1) continue;
      if (!inputsReadyBefore(ci, x, ti)) continue;
      if (T.body.size() + C.body.size() > kMaxFusedInstructions) continue;
      const std::vector<int> tReads = readsOf(ti), tWrites = writesOf(ti), cReads = readsOf(ci), cWrites = writesOf(ci);
      std::vector<Instr> prefix = std::move(T.body);
      const bool sole = readers.size() == 1;
      if (sole) prefix.pop_back();  // nobody else needs the intermediate
      T.body = splice(std::move(prefix), C.body, x, last.args[0]);
      KernelFacts& ft = facts_[ti];
      if (sole) ft.dropStore(x);
      ft.absorbBody(facts_[ci], x);
      absorbSources(ti, ci, false);
      ++stats_.epilogues;
      merged(ti, ci, tReads, tWrites, cReads, cWrites);
      return true;
    }
    return false;
  }

  // A pointwise producer of the operand a reduction reads becomes the reduction's prologue.
  bool fusePrologue(size_t pi) {
    std::optional<Producer> prod = soleReaderProducer(pi);
    if (!prod) return false;
    int x = prod->buffer;
    const size_t ri = prod->reader;
    Kernel& R = p_.kernels[ri];
    if (R.kind != KernelKind::Reduction || !R.prologue.empty() || R.anchorInputs.empty() || R.anchorInputs[0] != x) {
      return false;
    }
    if (std::count(R.anchorInputs.begin(), R.anchorInputs.end(), x) != 1) return false;
    if (facts_[ri].bodyLoads.count(x)) return false;
    Kernel& P = p_.kernels[pi];
    if (P.body.size() - 1 > kMaxFusedInstructions) return false;
    const std::vector<int> rReads = readsOf(ri), rWrites = writesOf(ri), pReads = readsOf(pi), pWrites = writesOf(pi);
    R.prologue = std::move(P.body);
    R.prologue.pop_back();
    R.prologueResult = prod->value;
    for (const auto& [b, l] : facts_[pi].bodyLoads) facts_[ri].prologueLoads[b] += l.count;
    absorbSources(ri, pi, true);
    ++stats_.prologues;
    merged(ri, pi, rReads, rWrites, pReads, pWrites);
    return true;
  }

  KernelProgram& p_;
  FusionStats stats_;
  std::vector<KernelFacts> facts_;                    // by kernel index (indices stay until the end)
  std::unordered_map<int, std::set<size_t>> readers_;  // buffer -> live kernels reading it
  std::unordered_map<int, std::set<size_t>> writers_;  // buffer -> live kernels storing it
  std::unordered_set<int> viewRoots_;                  // buffers that some view aliases
  std::vector<size_t> nextAlive_;
  size_t start_[3] = {0, 0, 0};                        // per phase: every kernel before it is unfusable
};

}  // namespace

bool Kernel::canFail() const {
  if (anchor && (anchor->isOp(ir::Op::Gather) || anchor->isOp(ir::Op::GatherElements))) return true;
  for (const std::vector<Instr>* instrs : {&prologue, &body}) {
    for (const Instr& in : *instrs) {
      // An integer division or remainder by zero (an error of the run).
      if (in.opcode == Opcode::Apply && (in.op == ir::Op::Div || in.op == ir::Op::Mod) && !ir::isFloat(in.dtype)) return true;
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
