// Extern kernels of the generated C++: convolution and inner product run as oneDNN 2.x primitives.
// Included into output_code.cpp (after the prelude) only when a kernel calls oneDNN; the model then
// links libdnnl. The compiled model keeps the graph's plain (C-order) layout in its own buffers;
// oneDNN convolutions run on copies in the workspace, NHWC or in the layout oneDNN prefers (the
// reorders are part of the kernel's measured time, so the autotuner weighs them).
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

extern "C" int omp_get_max_threads(void);
extern "C" void omp_set_num_threads(int);

namespace pc {
namespace dnnl_ext {

using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

// The engine and stream every extern kernel of the model shares (one CPU engine per process).
inline dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// oneDNN (Debian's build) runs a primitive on an OpenMP team, whose threads spin-wait at every
// barrier: on a machine where another process wants a core (rollout workers share cores as a
// rule), a team thread that is not running stalls the whole call for a scheduler quantum, and
// the team's spinning competes with policyc's own pool. So oneDNN never gets more than one
// thread: every primitive is created and run with the calling thread's OpenMP thread count at 1
// (restored afterwards), and a run with threads > 1 splits the batch into contiguous slices that
// policyc's pool runs, each slice a primitive of its own batch size (pc::parallelFor's chunks:
// whoever is running claims the next one, so a thread the machine does not run costs no wait).
// A primitive also sizes its work split by omp_get_max_threads() when created and when run, so
// running it under the count it was made for is what keeps its results right.
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// Runs f(lo, hi) over the batch's rows [0, batch) in the slices described above (on the calling
// thread alone when threads is 1 or the batch one row); rethrows the first exception a slice threw.
template <class F>
inline void forSlices(int64_t batch, int threads, const F& f) {
  std::exception_ptr failed;
  std::mutex mu;
  pc::parallelFor(threads, batch, 1.0, 0.0, [&](int64_t lo, int64_t hi) {
    try {
      OneThread one;
      f(lo, hi);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!failed) failed = std::current_exception();
    }
  });
  if (failed) std::rethrow_exception(failed);
}
// The calling thread's stream: created on its first extern call, not on every call.
inline dnnl::stream& stream() {
  static thread_local dnnl::stream s(engine());
  return s;
}

// Every primitive takes its scratchpad from the caller (scratchpad_mode::user): oneDNN's own
// (library) mode keeps one process-wide scratchpad unless the library was built for concurrent
// execution, which Debian's is not, so two slices running primitives with a scratchpad at once
// (the bf16 and brgemm convolutions have one) overwrote each other's: results changed with the
// thread count. Each thread has its own buffer, grown to the largest scratchpad it ran.
inline dnnl::primitive_attr userScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// One element of a post-op chain: eltwise (alg, alpha, beta) or, with sum = true, dst += result.
struct PostOp {
  dnnl::algorithm alg;
  float alpha, beta;
  bool sum;
};

inline dnnl::primitive_attr attrOf(const std::vector<PostOp>& ops) {
  dnnl::post_ops po;
  for (const PostOp& p : ops) {
    if (p.sum) {
      po.append_sum(1.0f);
    } else {
      po.append_eltwise(1.0f, p.alg, p.alpha, p.beta);
    }
  }
  dnnl::primitive_attr attr = userScratchpad();
  attr.set_post_ops(po);
  return attr;
}

// The calling thread's scratchpad in layout `d` (userScratchpad).
inline dnnl::memory scratchpadFor(const dnnl::memory::desc& d) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  static thread_local Buffer buf;
  const size_t need = d.get_size();
  if (need > buf.size) {
    std::free(buf.p);
    buf.p = nullptr;
    buf.size = 0;
    if (posix_memalign(&buf.p, 64, need) != 0) throw std::bad_alloc();
    buf.size = need;
  }
  return dnnl::memory(d, engine(), buf.p);
}
// Runs `p` (whose scratchpad is `pad`) on the calling thread's stream with `args` and its scratchpad.
inline void execute(const dnnl::primitive& p, const dnnl::memory::desc& pad, std::unordered_map<int, dnnl::memory> args) {
  if (pad.get_size() > 0) args.insert({DNNL_ARG_SCRATCHPAD, scratchpadFor(pad)});
  p.execute(stream(), args);
}
// A reorder from `from` to `to` with a user scratchpad, and its run.
struct Reorder {
  dnnl::reorder prim;
  dnnl::memory::desc pad;
  Reorder() = default;
  Reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
    dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, userScratchpad());
    prim = dnnl::reorder(pd);
    pad = pd.scratchpad_desc();
  }
  void run(const dnnl::memory& from, const dnnl::memory& to) const { execute(prim, pad, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}); }
};

// What every extern kernel keeps: its weight (reordered into each layout a primitive asks for,
// once) and bias, and its primitives per batch size (of one thread), created on first use. A weight that
// set_weights may replace comes with the model's update count (pc::WeightsLock::generation): when
// it moved, the reordered copies are made again from the weight, before the run that sees it
// (runs and updates exclude each other, so no update is under way then). The bias is read where
// it lies, at every run.
template <class Entry>
class Primitives {
 public:
  Primitives(const float* weight, const float* bias, int64_t biasLength, const uint64_t* generation)
      : weight_(weight), bias_(bias), biasLength_(biasLength), generation_(generation) {}

 protected:
  // The entry of `batch`; `create(entry)` fills a new one.
  template <class Create>
  Entry& entry(int64_t batch, const Create& create) {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation_) {
      const uint64_t now = __atomic_load_n(generation_, __ATOMIC_ACQUIRE);
      if (now != seen_) {
        for (auto& [desc, packed] : weights_) reorderInto(desc, packed);
        seen_ = now;
      }
    }
    for (auto& e : entries_) {
      if (e->batch == batch) return *e;
    }
    auto e = std::make_unique<Entry>();
    e->batch = batch;
    create(*e);
    entries_.push_back(std::move(e));
    return *entries_.back();
  }
  // The weight in layout `want`, given its plain layout `plain` (called under the entry lock).
  dnnl::memory weights(const dnnl::memory::desc& want, const dnnl::memory::desc& plain) {
    for (auto& [d, m] : weights_) {
      if (d == want) return m;
    }
    plain_ = plain;
    dnnl::memory packed(want, engine());
    reorderInto(want, packed);
    weights_.emplace_back(want, packed);
    return packed;
  }
  dnnl::memory biasMemory() const {
    return dnnl::memory(dnnl::memory::desc({biasLength_}, dnnl::memory::data_type::f32, tag::x), engine(),
                        const_cast<float*>(bias_));
  }

 private:
  // The weight, from its plain layout, into `packed` (of layout `want`).
  void reorderInto(const dnnl::memory::desc& want, dnnl::memory& packed) {
    dnnl::memory user(plain_, engine(), const_cast<float*>(weight_));
    Reorder(plain_, want).run(user, packed);
    stream().wait();
  }

  const float* weight_;
  const float* bias_;
  int64_t biasLength_;
  const uint64_t* generation_;  // null: a constant weight
  uint64_t seen_ = 0;
  dnnl::memory::desc plain_;
  std::vector<std::pair<dnnl::memory::desc, dnnl::memory>> weights_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

// A 2-D convolution with a constant weight [M, C, KH, KW] and bias [M]; src and dst are plain
// NCHW arrays with the given batch strides (elements), possibly views.
struct ConvShape {
  int64_t C, H, W, M, KH, KW, OH, OW;
  int64_t strideH, strideW, dilH, dilW, padT, padL, padB, padR;
  int64_t srcBatchStride;
  std::vector<PostOp> post;  // empty: conv + bias only
  // true: src and dst in the layouts oneDNN prefers (format_tag::any: nChw16c, or NCHW for a
  // first layer with 3 channels), within a workspace of channels rounded up to 16; false: NHWC,
  // the result then reordered to NCHW over the source copy for the generated epilogue, which
  // reads it a row at a time (NHWC, each channel's values lay a cache line apart).
  bool anyLayout = false;
  // --precision bf16 on a target with AVX512_BF16 (WeightStorage::Bf16Dot): the source copy and
  // the weights in bf16 (the copy's reorder rounds them), products in bf16 with f32 accumulation
  // (oneDNN's bf16 convolutions: avx512_core_bf16, AMX), the result and post-ops in f32.
  bool bf16 = false;
};

struct ConvEntry {
  int64_t batch;
  dnnl::memory::desc userSrc, convSrc, convDst, userDst;
  dnnl::convolution_forward conv;
  dnnl::memory::desc convPad;  // the convolution's scratchpad
  Reorder srcReorder, dstIn, dstOut;
  dnnl::memory weights, bias;
};

class Conv : Primitives<ConvEntry> {
 public:
  Conv(ConvShape s, const float* weight, const float* bias, const uint64_t* generation = nullptr)
      : Primitives(weight, bias, s.M, generation), s_(std::move(s)) {}

  // Workspace floats per batch row reserved for the copies of src and dst (the emitter reserves as much).
  static int64_t srcPerRow(const ConvShape& s) {
    return s.anyLayout ? (s.C + 15) / 16 * 16 * s.H * s.W : std::max(s.C * s.H * s.W, s.M * s.OH * s.OW);
  }
  static int64_t dstPerRow(const ConvShape& s) { return (s.anyLayout ? (s.M + 15) / 16 * 16 : s.M) * s.OH * s.OW; }

  // conv(src) with the post-ops into the workspace (`scratch`); with a sum post-op the residual
  // `sumSrc` (plain NCHW, dense) is first copied there. With `dst` (plain NCHW, dense) the result
  // is reordered into it; without, and without anyLayout, it is reordered to plain NCHW at
  // `scratch`, over the source copy; returns where the result is. Each batch slice has its own
  // part of every workspace region (rows [lo, hi) of each), so slices never share memory.
  const float* run(const float* src, const float* sumSrc, float* dst, int64_t batch, int threads, float* scratch) {
    const int64_t srcRow = srcPerRow(s_), dstRow = dstPerRow(s_), userRow = s_.M * s_.OH * s_.OW;
    float* convOut = scratch + batch * srcRow;
    const bool plain = !dst && !s_.anyLayout;
    forSlices(batch, threads, [&](int64_t lo, int64_t hi) {
      ConvEntry& e = entry(hi - lo);
      dnnl::stream& st = stream();
      dnnl::memory userSrc(e.userSrc, engine(), const_cast<float*>(src + lo * s_.srcBatchStride));
      dnnl::memory convSrc(e.convSrc, engine(), scratch + lo * srcRow);
      dnnl::memory convDst(e.convDst, engine(), convOut + lo * dstRow);
      e.srcReorder.run(userSrc, convSrc);
      if (sumSrc) {
        dnnl::memory userSum(e.userDst, engine(), const_cast<float*>(sumSrc + lo * userRow));
        e.dstIn.run(userSum, convDst);
      }
      execute(e.conv, e.convPad, {{DNNL_ARG_SRC, convSrc}, {DNNL_ARG_WEIGHTS, e.weights}, {DNNL_ARG_BIAS, e.bias}, {DNNL_ARG_DST, convDst}});
      if (dst) {
        dnnl::memory to(e.userDst, engine(), dst + lo * userRow);
        e.dstOut.run(convDst, to);
      }
      st.wait();
    });
    if (plain) {
      // NCHW over the source copies: only once every slice is done reading its own (a slice's
      // rows of the result overlap an earlier slice's copy when the output is smaller per row).
      forSlices(batch, threads, [&](int64_t lo, int64_t hi) {
        ConvEntry& e = entry(hi - lo);
        dnnl::memory from(e.convDst, engine(), convOut + lo * dstRow);
        dnnl::memory to(e.userDst, engine(), scratch + lo * userRow);
        e.dstOut.run(from, to);
        stream().wait();
      });
    }
    return plain ? scratch : convOut;
  }
  // Creates the primitives a run of (batch, threads) uses ahead of it (they JIT their code; the
  // same slices as run's).
  void prepare(int64_t batch, int threads) {
    forSlices(batch, threads, [&](int64_t lo, int64_t hi) { entry(hi - lo); });
  }

 private:
  ConvEntry& entry(int64_t batch) {
    return Primitives::entry(batch, [&](ConvEntry& e) {
      const auto f32 = dnnl::memory::data_type::f32;
      const dims src = {batch, s_.C, s_.H, s_.W}, dst = {batch, s_.M, s_.OH, s_.OW};
      e.userSrc = dnnl::memory::desc(src, f32, dims{s_.srcBatchStride, s_.H * s_.W, s_.W, 1});
      e.userDst = dnnl::memory::desc(dst, f32, tag::nchw);
      const auto operands = s_.bf16 ? dnnl::memory::data_type::bf16 : f32;
      const dnnl::memory::desc w({s_.M, s_.C, s_.KH, s_.KW}, operands, tag::any), b({s_.M}, f32, tag::x);
      auto make = [&](tag layout) {
        auto d = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                                 dnnl::memory::desc(src, operands, layout), w, b, dnnl::memory::desc(dst, f32, layout),
                                                 {s_.strideH, s_.strideW}, {s_.dilH - 1, s_.dilW - 1}, {s_.padT, s_.padL},
                                                 {s_.padB, s_.padR});
        return dnnl::convolution_forward::primitive_desc(d, attrOf(s_.post), engine());
      };
      auto pd = make(s_.anyLayout ? tag::any : tag::nhwc);
      const size_t f = sizeof(float);
      if (s_.anyLayout && (pd.src_desc().get_size() > static_cast<size_t>(batch * srcPerRow(s_)) * f ||
                           pd.dst_desc().get_size() > static_cast<size_t>(batch * dstPerRow(s_)) * f)) {
        pd = make(tag::nhwc);  // a layout larger than the workspace reserves
      }
      e.convSrc = pd.src_desc();
      e.convDst = pd.dst_desc();
      e.conv = dnnl::convolution_forward(pd);
      e.convPad = pd.scratchpad_desc();
      e.weights = weights(pd.weights_desc(), dnnl::memory::desc({s_.M, s_.C, s_.KH, s_.KW}, f32, tag::oihw));
      e.bias = biasMemory();
      e.srcReorder = Reorder(e.userSrc, e.convSrc);
      e.dstIn = Reorder(e.userDst, e.convDst);
      e.dstOut = Reorder(e.convDst, e.userDst);
    });
  }

  ConvShape s_;
};

// An inner product y[rows, N] = x[rows, K] W^T + b with a constant weight [N, K]; x rows may be
// strided (xRowStride elements apart), y is dense. With post-ops they apply before the store; a
// sum post-op adds what y holds (the caller copies the residual there first).
struct LinearShape {
  int64_t K, N, xRowStride;
  std::vector<PostOp> post;
};

struct LinearEntry {
  int64_t batch;
  dnnl::memory::desc src, dst;
  dnnl::inner_product_forward ip;
  dnnl::memory::desc pad;  // its scratchpad
  dnnl::memory weights, bias;
};

class Linear : Primitives<LinearEntry> {
 public:
  Linear(LinearShape s, const float* weight, const float* bias, const uint64_t* generation = nullptr)
      : Primitives(weight, bias, s.N, generation), s_(std::move(s)) {}

  void run(const float* x, float* y, int64_t batch, int threads) {
    forSlices(batch, threads, [&](int64_t lo, int64_t hi) {
      LinearEntry& e = entry(hi - lo);
      dnnl::memory src(e.src, engine(), const_cast<float*>(x + lo * s_.xRowStride));
      dnnl::memory dst(e.dst, engine(), y + lo * s_.N);
      execute(e.ip, e.pad, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, e.weights}, {DNNL_ARG_BIAS, e.bias}, {DNNL_ARG_DST, dst}});
      stream().wait();
    });
  }
  void prepare(int64_t batch, int threads) {
    forSlices(batch, threads, [&](int64_t lo, int64_t hi) { entry(hi - lo); });
  }

 private:
  LinearEntry& entry(int64_t batch) {
    return Primitives::entry(batch, [&](LinearEntry& e) {
      const auto f32 = dnnl::memory::data_type::f32;
      e.src = dnnl::memory::desc({batch, s_.K}, f32, dims{s_.xRowStride, 1});
      e.dst = dnnl::memory::desc({batch, s_.N}, f32, tag::nc);
      const dnnl::memory::desc w({s_.N, s_.K}, f32, tag::any), b({s_.N}, f32, tag::x);
      auto d = dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, e.src, w, b, e.dst);
      auto pd = dnnl::inner_product_forward::primitive_desc(d, attrOf(s_.post), engine());
      e.ip = dnnl::inner_product_forward(pd);
      e.pad = pd.scratchpad_desc();
      e.weights = weights(pd.weights_desc(), dnnl::memory::desc({s_.N, s_.K}, f32, tag::oi));
      e.bias = biasMemory();
    });
  }

  LinearShape s_;
};

}  // namespace dnnl_ext
}  // namespace pc

// An extern kernel that throws (oneDNN cannot create or run a primitive) makes run() return
// POLICYC_ERROR_EXTERN; what oneDNN said goes to stderr, once per kernel and process.
static inline void pc_extern_failed(const char* kernel, const char* what) {
  static std::mutex mu;
  static std::vector<const char*> reported;
  std::lock_guard<std::mutex> lock(mu);
  for (const char* k : reported) {
    if (k == kernel) return;
  }
  reported.push_back(kernel);
  std::fprintf(stderr, "policyc model: oneDNN failed in kernel %s: %s\n", kernel, what);
}
