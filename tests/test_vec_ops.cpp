// Vector ops around the matmuls (FP16 rows, attention, SiLU): every variant the CPU runs vs the scalar
// reference or a double-precision oracle, and the batch-independence attention promises.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "kernels/vec_ops.h"

using namespace picolm;

TEST_CASE("vec_ops: SIMD variants match the scalar reference", "[kernels]") {
  const VecOps* list[4];
  const int n_ops = available_vec_ops(list, 4);
  REQUIRE(n_ops >= 1);
  const VecOps& ref = scalar_vec_ops();
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int v = 0; v < n_ops; ++v) {
    const VecOps& ops = *list[v];
    INFO("variant " << ops.name);
    for (int n : {1, 7, 8, 15, 16, 17, 31, 64, 100, 128, 257}) {
      INFO("n = " << n);
      const size_t un = static_cast<size_t>(n);
      std::vector<float> x(un);
      std::vector<uint16_t> xh(un), xh_ref(un);
      for (int i = 0; i < n; ++i) x[size_t(i)] = nd(rng) * 3.0f;
      // f32 -> f16 must round exactly like the reference (round to nearest even).
      ref.f32_to_f16(n, x.data(), xh_ref.data());
      ops.f32_to_f16(n, x.data(), xh.data());
      CHECK(xh == xh_ref);
    }
  }
}

namespace {

// A 64-byte aligned scratch area for VecOps::attention.
struct AttentionScratch {
  std::vector<uint8_t> bytes;
  uint8_t* get(int head_dim, int n_rows) {
    bytes.assign(attention_work_bytes(head_dim, n_rows) + 64, 0xA5);  // junk: the kernels must not read it
    return bytes.data() + (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
  }
};

// First position seen from position p with a sliding window (0: unlimited), written from the
// definition (key j is seen when p - window < j <= p), independently of the kernels' helper.
int32_t first_seen(int32_t p, int32_t window) { return window == 0 ? 0 : std::max(0, p - window + 1); }

// q: [n_tok][n_head][hd]; K, V: fp16 [position][n_kv][hd]; heads kvh * group .. + group share KV head kvh.
struct AttentionCase {
  int hd, group, n_kv, n_tok;
  int32_t pos0;
  int32_t window = 0;  // sliding window of every row, 0 = unlimited
  int32_t ring = 0;    // AttentionTile::kv_ring of k_read / v_read
  std::vector<float> q;
  std::vector<uint16_t> k, v;
  // Where run() reads K and V: k / v unless pointed elsewhere (a guarded copy). Position p of KV
  // head kvh at k_read + p * kv_stride() + kvh * hd.
  const uint16_t* k_read = nullptr;
  const uint16_t* v_read = nullptr;
  int64_t q_dim() const { return int64_t(n_kv) * group * hd; }
  int64_t kv_stride() const { return int64_t(n_kv) * hd; }

  AttentionCase(int hd_, int group_, int n_tok_, int32_t pos0_, float q_scale, uint32_t seed, int32_t window_ = 0)
      : hd(hd_), group(group_), n_kv(2), n_tok(n_tok_), pos0(pos0_), window(window_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    q.resize(size_t(n_tok) * size_t(q_dim()));
    for (float& x : q) x = nd(rng) * q_scale;
    const size_t n_kv_elems = size_t(pos0 + n_tok) * size_t(kv_stride());
    k.resize(n_kv_elems);
    v.resize(n_kv_elems);
    for (auto& x : k) x = fp32_to_fp16(nd(rng));
    for (auto& x : v) x = fp32_to_fp16(nd(rng));
    k_read = k.data();
    v_read = v.data();
  }
  AttentionCase(const AttentionCase&) = delete;  // k_read / v_read point into this object
  AttentionCase& operator=(const AttentionCase&) = delete;

  // Tokens [t0, t0 + nt) x heads [g0, g0 + ng) of KV head kvh, written into out ([n_tok][q_dim]).
  void run(const VecOps& ops, AttentionScratch& scratch, int kvh, int t0, int nt, int g0, int ng, float* out) const {
    AttentionTile a;
    a.head_dim = hd;
    a.n_tok = nt;
    a.n_grp = ng;
    a.pos0 = pos0 + t0;
    a.window = window;
    a.kv_ring = ring;
    a.scale = 1.0f / std::sqrt(float(hd));
    a.q = q.data() + t0 * q_dim() + (int64_t(kvh) * group + g0) * hd;
    a.out = out + t0 * q_dim() + (int64_t(kvh) * group + g0) * hd;
    a.row_stride = q_dim();
    a.k = k_read + int64_t(kvh) * hd;
    a.v = v_read + int64_t(kvh) * hd;
    a.kv_stride = kv_stride();
    a.work = scratch.get(hd, nt * ng);
    ops.attention(a);
  }
  std::vector<float> run_all(const VecOps& ops, AttentionScratch& scratch) const {
    std::vector<float> out(q.size(), NAN);
    for (int kvh = 0; kvh < n_kv; ++kvh) run(ops, scratch, kvh, 0, n_tok, 0, group, out.data());
    return out;
  }
  // Softmax attention in double precision, with the same fp16 K/V and float q * scale.
  std::vector<double> oracle() const {
    std::vector<double> out(q.size());
    const float scale = 1.0f / std::sqrt(float(hd));
    for (int t = 0; t < n_tok; ++t)
      for (int h = 0; h < n_kv * group; ++h) {
        const int kvh = h / group;
        const float* qr = q.data() + t * q_dim() + h * hd;
        const int n_pos = pos0 + t + 1, p_first = first_seen(pos0 + t, window);
        std::vector<double> s(static_cast<size_t>(n_pos), 0.0);
        double mx = -INFINITY;
        for (int p = p_first; p < n_pos; ++p) {
          double d = 0.0;
          for (int i = 0; i < hd; ++i) d += double(qr[i] * scale) * fp16_to_fp32(k[size_t(p * kv_stride() + kvh * hd + i)]);
          s[size_t(p)] = d;
          mx = std::max(mx, d);
        }
        double sum = 0.0;
        for (int p = p_first; p < n_pos; ++p) sum += (s[size_t(p)] = std::exp(s[size_t(p)] - mx));
        for (int i = 0; i < hd; ++i) {
          double acc = 0.0;
          for (int p = p_first; p < n_pos; ++p) acc += s[size_t(p)] * fp16_to_fp32(v[size_t(p * kv_stride() + kvh * hd + i)]);
          out[size_t(t * q_dim() + h * hd + i)] = acc / sum;
        }
      }
    return out;
  }
};

}  // namespace

TEST_CASE("vec_ops: attention matches a double-precision oracle in every variant", "[kernels]") {
  const VecOps* list[4];
  const int n_ops = available_vec_ops(list, 4);
  AttentionScratch scratch;
  uint32_t seed = 1;
  for (int hd : {8, 64, 80, 128})
    for (int group : {1, 3, 7, 8})
      for (int n_tok : {1, 2, 5, 37})
        for (int32_t pos0 : {0, 1, 63, 130})
          for (float q_scale : {1.0f, 8.0f}) {  // 8: peaked weights, large jumps of the running max
            const AttentionCase c(hd, group, n_tok, pos0, q_scale, seed++);
            const std::vector<double> want = c.oracle();
            const std::vector<float> ref = c.run_all(scalar_vec_ops(), scratch);
            for (int vi = 0; vi < n_ops; ++vi) {
              const VecOps& ops = *list[vi];
              INFO("variant " << ops.name << " hd " << hd << " group " << group << " n_tok " << n_tok << " pos0 "
                              << pos0 << " q_scale " << q_scale);
              const std::vector<float> got = c.run_all(ops, scratch);
              // Outputs are convex combinations of V (|v| < ~5). With q_scale 8 the scores reach ~100,
              // and their float rounding moves the weights by ~1e-5 relative: the largest error
              // measured (reference included) is 2e-5 against the oracle; the bound is 2.5x that.
              double worst = 0.0, worst_ref = 0.0;
              for (size_t i = 0; i < got.size(); ++i) {
                worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
                worst_ref = std::max(worst_ref, std::fabs(double(got[i]) - double(ref[i])));
              }
              CHECK(std::all_of(got.begin(), got.end(), [](float x) { return std::isfinite(x); }));  // max() skips NaN
              CHECK(worst <= 5e-5);
              CHECK(worst_ref <= 5e-5);
            }
          }
}

namespace {

// One fp16 array of positions [first_block, end) placed right after PROT_NONE guard pages that
// span more than one attention block: a kernel that reads any position below first_block faults
// instead of passing. Positions [first_block, poison_end) hold NaN: a kernel that lets a masked
// position reach a result produces NaN.
class GuardedRows {
 public:
  GuardedRows(const std::vector<uint16_t>& src, int64_t row, int32_t first_block, int32_t poison_end, int32_t end) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t row_bytes = size_t(row) * sizeof(uint16_t);
    guard_ = (size_t(kAttentionBlock) * row_bytes + 1 + page - 1) / page * page;
    const size_t data = size_t(end - first_block) * row_bytes;
    size_ = guard_ + (data + page - 1) / page * page;
    void* m = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    base_ = static_cast<uint8_t*>(m);
    REQUIRE(mprotect(base_, guard_, PROT_NONE) == 0);
    auto* dst = reinterpret_cast<uint16_t*>(base_ + guard_);
    std::memcpy(dst, src.data() + size_t(first_block) * size_t(row), data);
    std::fill(dst, dst + size_t(poison_end - first_block) * size_t(row), uint16_t(0x7E00));  // fp16 NaN
    // Address of position 0 (below the mapping; only ever offset back into it by the kernels).
    origin_ = reinterpret_cast<const uint16_t*>(reinterpret_cast<uintptr_t>(dst) - size_t(first_block) * row_bytes);
  }
  ~GuardedRows() { munmap(base_, size_); }
  GuardedRows(const GuardedRows&) = delete;
  GuardedRows& operator=(const GuardedRows&) = delete;
  const uint16_t* origin() const { return origin_; }

 private:
  uint8_t* base_ = nullptr;
  size_t guard_ = 0, size_ = 0;
  const uint16_t* origin_ = nullptr;
};

}  // namespace

TEST_CASE("vec_ops: sliding-window attention matches the oracle and reads only the window's blocks", "[kernels]") {
  const VecOps* list[4];
  const int n_ops = available_vec_ops(list, 4);
  AttentionScratch scratch;
  uint32_t seed = 1000;
  for (int32_t window : {1, 7, 8, 63, 64, 65, 200})
    for (int32_t pos0 : {0, 5, 64, 130, 300})  // from inside the first window to well past it
      for (int n_tok : {1, 2, 70})  // 70 crosses a block boundary inside the tile
        for (int group : {1, 7}) {
          const int hd = seed % 3 ? 64 : 80;  // 80 leaves tails in the unrolled loops over head_dim
          const float q_scale = seed % 2 ? 8.0f : 1.0f;
          AttentionCase c(hd, group, n_tok, pos0, q_scale, seed++, window);
          const std::vector<double> want = c.oracle();
          const std::vector<float> ref = c.run_all(scalar_vec_ops(), scratch);
          // Positions below the first row's window: NaN in the block that holds its first visible
          // position, unmapped below that block.
          const int32_t first = first_seen(pos0, window), first_block = first / kAttentionBlock * kAttentionBlock;
          const GuardedRows gk(c.k, c.kv_stride(), first_block, first, pos0 + n_tok);
          const GuardedRows gv(c.v, c.kv_stride(), first_block, first, pos0 + n_tok);
          for (int vi = 0; vi < n_ops; ++vi) {
            const VecOps& ops = *list[vi];
            INFO("variant " << ops.name << " window " << window << " pos0 " << pos0 << " n_tok " << n_tok
                            << " group " << group << " hd " << hd << " q_scale " << q_scale);
            c.k_read = c.k.data();
            c.v_read = c.v.data();
            const std::vector<float> got = c.run_all(ops, scratch);
            double worst = 0.0, worst_ref = 0.0;
            for (size_t i = 0; i < got.size(); ++i) {
              worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
              worst_ref = std::max(worst_ref, std::fabs(double(got[i]) - double(ref[i])));
            }
            CHECK(std::all_of(got.begin(), got.end(), [](float x) { return std::isfinite(x); }));
            CHECK(worst <= 5e-5);  // the bounds of the unlimited case above
            CHECK(worst_ref <= 5e-5);
            c.k_read = gk.origin();
            c.v_read = gv.origin();
            const std::vector<float> guarded = c.run_all(ops, scratch);
            CHECK(std::memcmp(guarded.data(), got.data(), got.size() * sizeof(float)) == 0);
          }
          c.k_read = c.k.data();
          c.v_read = c.v.data();
        }
}

TEST_CASE("vec_ops: sliding-window attention over a ring cache gives the bits of the linear cache", "[kernels]") {
  // A ring of C slots after the K/V of positions up to `last` were written: slot s holds the latest
  // position x <= last with x % C == s. Slots whose position is below every row's window (or was
  // never written) hold NaN: they must be masked, never used.
  const VecOps* list[4];
  const int n_ops = available_vec_ops(list, 4);
  AttentionScratch scratch;
  uint32_t seed = 5000;
  for (int32_t window : {1, 8, 63, 64, 65, 200})
    for (int32_t pos0 : {0, 7, 64, 300, 1000})
      for (int n_tok : {1, 5, 64})
        for (int extra_blocks : {0, 1}) {  // the smallest legal ring, and one block more
          const int group = seed % 2 ? 4 : 1;
          AttentionCase c(64, group, n_tok, pos0, 4.0f, seed++, window);
          const int32_t C = (window + n_tok - 1 + kAttentionBlock - 1) / kAttentionBlock * kAttentionBlock +
                            extra_blocks * kAttentionBlock;
          const int32_t last = pos0 + n_tok - 1, first = first_seen(pos0, window);
          const size_t row = size_t(c.kv_stride());
          std::vector<uint16_t> rk(size_t(C) * row, uint16_t(0x7E00)), rv(size_t(C) * row, uint16_t(0x7E00));
          for (int32_t x = std::max(first, last - C + 1); x <= last; ++x) {
            std::memcpy(rk.data() + size_t(x % C) * row, c.k.data() + size_t(x) * row, row * sizeof(uint16_t));
            std::memcpy(rv.data() + size_t(x % C) * row, c.v.data() + size_t(x) * row, row * sizeof(uint16_t));
          }
          for (int vi = 0; vi < n_ops; ++vi) {
            const VecOps& ops = *list[vi];
            INFO("variant " << ops.name << " window " << window << " pos0 " << pos0 << " n_tok " << n_tok << " ring "
                            << C);
            c.k_read = c.k.data();
            c.v_read = c.v.data();
            c.ring = 0;
            const std::vector<float> linear = c.run_all(ops, scratch);
            c.k_read = rk.data();
            c.v_read = rv.data();
            c.ring = C;
            const std::vector<float> ringed = c.run_all(ops, scratch);
            CHECK(std::all_of(linear.begin(), linear.end(), [](float x) { return std::isfinite(x); }));
            CHECK(std::memcmp(linear.data(), ringed.data(), linear.size() * sizeof(float)) == 0);
          }
          c.k_read = c.k.data();
          c.v_read = c.v.data();
          c.ring = 0;
        }
}

TEST_CASE("vec_ops: an attention row does not depend on the rest of its tile", "[kernels]") {
  // The prompt cache relies on this: a token's logits must be bit-identical whether it was
  // evaluated in a big prefill batch, a small one, or alone.
  const VecOps* list[4];
  const int n_ops = available_vec_ops(list, 4);
  AttentionScratch scratch;
  // Windows: a row's first block differs from its neighbours' and whole blocks drop out for later rows.
  for (int hd : {64, 80})
    for (int group : {1, 2, 7, 8})
      for (int32_t pos0 : {0, 50, 150})
        for (int32_t window : {0, 1, 8, 65}) {
          const int n_tok = 70;  // crosses block boundaries inside the batch
          const uint32_t seed = uint32_t(hd * 100 + group * 10 + pos0 + window * 7);
          const AttentionCase c(hd, group, n_tok, pos0, 4.0f, seed, window);
          for (int vi = 0; vi < n_ops; ++vi) {
            const VecOps& ops = *list[vi];
            INFO("variant " << ops.name << " hd " << hd << " group " << group << " pos0 " << pos0 << " window "
                            << window);
            const std::vector<float> whole = c.run_all(ops, scratch);
            std::vector<float> split(whole.size(), NAN);
            for (int kvh = 0; kvh < c.n_kv; ++kvh) {
              // Uneven token tiles, each token alone, each (token, head) alone, and head slices.
              int t = 0;
              for (int nt : {3, 1, 17, 5}) {
                c.run(ops, scratch, kvh, t, nt, 0, group, split.data());
                t += nt;
              }
              for (; t < 40; ++t) c.run(ops, scratch, kvh, t, 1, 0, group, split.data());
              for (; t < 50; ++t)
                for (int g = 0; g < group; ++g) c.run(ops, scratch, kvh, t, 1, g, 1, split.data());
              for (int g = 0; g < group; g += 3)
                c.run(ops, scratch, kvh, t, n_tok - t, g, std::min(3, group - g), split.data());
            }
            CHECK(std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)) == 0);
          }
        }
}

TEST_CASE("vec_ops: silu_mul matches the scalar reference and ignores position", "[kernels]") {
  const VecOps* list[4];
  const int n_ops = available_vec_ops(list, 4);
  const VecOps& ref = scalar_vec_ops();
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int n : {1, 7, 8, 15, 16, 17, 100, 1000}) {
    std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      gate[size_t(i)] = nd(rng) * 6.0f;
      up[size_t(i)] = nd(rng);
    }
    // Ends of the range: exp(-g) overflows or underflows; signed zeros.
    const float special[] = {0.0f, -0.0f, 88.0f, -88.0f, 100.0f, -100.0f, 1e-30f, -1e-30f};
    for (int i = 0; i < n && i < 8; ++i) gate[size_t(i) * size_t(n) / 8] = special[i];
    std::vector<float> want = gate;
    ref.silu_mul(n, want.data(), up.data());
    for (int vi = 0; vi < n_ops; ++vi) {
      const VecOps& ops = *list[vi];
      INFO("variant " << ops.name << " n " << n);
      std::vector<float> got = gate;
      ops.silu_mul(n, got.data(), up.data());
      // exp within a few ulp, then one add, one divide, one multiply: 2e-7 relative measured, 1e-6
      // allowed; the absolute term covers g <= -88, where the reference gives 0 and the clamped
      // exp ~1e-37.
      for (int i = 0; i < n; ++i)
        CHECK(std::fabs(got[size_t(i)] - want[size_t(i)]) <= 1e-6f * std::fabs(want[size_t(i)]) + 1e-30f);
      // Element by element (every one a vector tail) must give the same bits as the whole row.
      std::vector<float> single = gate;
      for (int i = 0; i < n; ++i) ops.silu_mul(1, &single[size_t(i)], &up[size_t(i)]);
      CHECK(std::memcmp(single.data(), got.data(), size_t(n) * sizeof(float)) == 0);
    }
  }
}
