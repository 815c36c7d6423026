// The kernel program's cost model: FLOPs and bytes per kernel call, for the profiler and roofline.
#include <algorithm>

#include "policyc/codegen/kernel_program.h"

namespace policyc::codegen {
namespace {

// A count that is `perRow * batch` when `dims` holds the batch, else `fixed`.
struct Count {
  double fixed = 0, perRow = 0;
};

Count countOf(const std::vector<ir::Dim>& dims) {
  double n = 1;
  bool batch = false;
  for (const ir::Dim& d : dims) {
    if (d.isBatch()) {
      batch = true;
    } else {
      n *= static_cast<double>(d.value());
    }
  }
  return batch ? Count{0, n} : Count{n, 0};
}

double staticElements(const Buffer& b) {
  double n = 1;
  for (const ir::Dim& d : b.type.shape) n *= d.isBatch() ? 1.0 : static_cast<double>(d.value());
  return n;
}

int countApplies(const std::vector<Instr>& body) {
  return static_cast<int>(std::count_if(body.begin(), body.end(), [](const Instr& i) { return i.opcode == Opcode::Apply; }));
}

}  // namespace

KernelCost kernelCost(const KernelProgram& program, const Kernel& k) {
  KernelCost c;
  const Count domain = countOf(k.domain);
  auto addFlops = [&](Count n, double perElement) {
    c.flopsStatic += n.fixed * perElement;
    c.flopsPerRow += n.perRow * perElement;
  };
  // The template's own work, per element of its domain (the output).
  switch (k.kind) {
    case KernelKind::Linear: {
      // domain [.., M, N]; the weight holds K * N elements whichever way it is laid out.
      const Buffer& w = program.buffer(k.anchorInputs.at(1));
      const double n = static_cast<double>(k.domain.back().isBatch() ? 1 : k.domain.back().value());
      addFlops(domain, 2.0 * staticElements(w) / n);
      break;
    }
    case KernelKind::Conv: {
      // weight [Cout, Cin/groups, kh, kw]: one output element reads all but the first dimension.
      const Buffer& w = program.buffer(k.anchorInputs.at(1));
      addFlops(domain, 2.0 * staticElements(w) / static_cast<double>(w.type.shape.at(0).value()));
      break;
    }
    case KernelKind::Pool: {
      double window = 1;
      if (k.anchor->attrs().count("kernel_shape")) {
        for (int64_t e : k.anchor->attrInts("kernel_shape")) window *= static_cast<double>(e);
      }
      addFlops(domain, window);
      break;
    }
    case KernelKind::Reduction: {
      const Buffer& x = program.buffer(k.anchorInputs.at(0));
      addFlops(countOf(x.type.shape), 1.0 + countApplies(k.prologue));
      break;
    }
    case KernelKind::Copy:
    case KernelKind::Pointwise:
      break;
  }
  addFlops(domain, countApplies(k.body));  // the epilogue, or the whole pointwise body
  std::vector<int> touched = k.reads();
  for (int id : k.writes()) touched.push_back(id);
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (int id : touched) {
    const Buffer& b = program.buffer(id);
    const Count n = countOf(b.type.shape);
    const double size = static_cast<double>(ir::dtypeSize(b.type.dtype));
    c.bytesStatic += n.fixed * size;
    c.bytesPerRow += n.perRow * size;
  }
  return c;
}

int64_t paramBytes(const KernelProgram& program) {
  int64_t bytes = 0;
  for (const Buffer& b : program.buffers) {
    if (b.kind == BufferKind::Param && !b.isView()) {
      bytes += static_cast<int64_t>(staticElements(b)) * static_cast<int64_t>(ir::dtypeSize(b.type.dtype));
    }
  }
  return bytes;
}

}  // namespace policyc::codegen
