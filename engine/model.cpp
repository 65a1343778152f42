#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>

#include "arch/arch.h"
#include "kernels/thread_pool.h"
#include "kernels/vec_ops.h"
#include "layers.h"
#include "model_impl.h"
#include "moe.h"
#include "session_impl.h"

namespace picolm {
namespace {

// FNV-1a, 64-bit: cheap, stable across platforms; good enough for identity fingerprints.
struct Fnv64 {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
  template <class T>
  void pod(const T& v) { bytes(&v, sizeof v); }
  void str(std::string_view s) { pod(s.size()); bytes(s.data(), s.size()); }
};

// Whether the model file is small enough next to the RAM for read-ahead and repacking.
bool fits_half_ram(size_t bytes) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 && bytes < size_t(pages) * size_t(page) / 2;
}

// Repacks every matrix the kernel table has a packed form for into one anonymous mapping and
// releases the file's pages of each once it is packed.
void repack_weights(Model::Impl& I, const GgufFile& file, ThreadPool* pool) {
  std::vector<WeightView*> mats;
  for (LayerWeights& w : I.layers) for_each_matrix(w, [&](WeightView& v) { mats.push_back(&v); });
  mats.push_back(&I.output);
  if (I.ple_model_proj.data) mats.push_back(&I.ple_model_proj);
  size_t total = 0;
  for (const WeightView* v : mats) total += packed_bytes(*I.kernels, v->type, v->rows, v->cols);
  if (total == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  AnonMemory mem(total);
  if (mem.data() == nullptr) return;  // no memory for it: run on the file's rows instead
  size_t off = 0;
  for (WeightView* v : mats) {
    const size_t n = packed_bytes(*I.kernels, v->type, v->rows, v->cols);
    if (n == 0) continue;
    pack_weights(*I.kernels, pool, v->type, v->data, v->rows, v->cols, mem.data() + off);
    v->packed = mem.data() + off;
    off += n;
    // Released matrix by matrix, so the file's pages and the panels never coexist whole: the peak
    // resident set stays about the model's size instead of twice it. (A tied token_embd is released
    // too: the embedding lookup faults its few rows back in from the page cache.)
    if (!I.locked) file.release(v->data, size_t(v->rows) * row_bytes(v->type, v->cols));
  }
  if (I.locked) mlock(mem.data(), mem.size());
  I.packed = std::move(mem);
  I.pack_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

AnonMemory::AnonMemory(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
#ifdef MADV_HUGEPAGE
  madvise(p, n, MADV_HUGEPAGE);  // streamed every token: fewer TLB misses
#endif
  p_ = static_cast<uint8_t*>(p);
  n_ = n;
}
AnonMemory::AnonMemory(AnonMemory&& o) noexcept : p_(o.p_), n_(o.n_) {
  o.p_ = nullptr;
  o.n_ = 0;
}
AnonMemory& AnonMemory::operator=(AnonMemory&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) munmap(p_, n_);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}
AnonMemory::~AnonMemory() {
  if (p_ != nullptr) munmap(p_, n_);
}

std::optional<Repack> parse_repack(std::string_view s) {
  if (s == "auto") return Repack::Auto;
  if (s == "on") return Repack::On;
  if (s == "off") return Repack::Off;
  return std::nullopt;
}

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

Result<std::shared_ptr<Model>> Model::load(const std::string& path, const ModelOptions& opts) {
  auto f = GgufFile::open(path);
  if (!f) return Error{f.error()};
  return from_gguf(std::move(f.value()), opts);
}

Result<std::shared_ptr<Model>> Model::from_gguf(std::unique_ptr<GgufFile> file, const ModelOptions& opts) {
  std::shared_ptr<Model> m(new Model());
  Impl& I = *m->impl_;
  I.opts = opts;
  I.kernels = &best_kernels();
  I.vec_ops = &best_vec_ops();
  const std::string name = file->name();
  auto fail = [&](const std::string& msg) { return Error{name + ": " + msg}; };
  HParams& hp = I.hp;
  auto arch_name = file->get_string("general.architecture");
  if (!arch_name) return fail("missing general.architecture");
  hp.arch_name = std::string(*arch_name);
  I.arch = find_architecture(hp.arch_name);
  if (!I.arch)
    return fail("unsupported architecture '" + hp.arch_name + "' (supported: " + supported_architectures() + ")");
  if (Status s = read_common_hparams(*file, hp); !s) return fail(s.error());
  if (Status s = I.arch->read_hparams(*file, hp); !s) return fail(s.error());
  if (Status s = validate_hparams(hp); !s) return fail(s.error());

  auto tok = Tokenizer::create(*file);
  if (!tok) return fail(tok.error());
  I.tokenizer = std::move(tok.value());

  const GgufTensor* emb = file->tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2) return fail("missing or malformed tensor 'token_embd.weight'");
  hp.n_vocab = static_cast<int32_t>(emb->ne[1]);
  if (hp.n_vocab < I.tokenizer->n_vocab())
    return fail("token_embd has " + std::to_string(hp.n_vocab) + " rows but the vocabulary has " +
                std::to_string(I.tokenizer->n_vocab()) + " tokens");

  WeightLoader L(*file, *I.kernels);
  I.arch->load_weights(L, I);
  if (!L.errors.empty()) {
    std::string msg = "cannot load model:";
    for (size_t i = 0; i < L.errors.size() && i < 8; ++i) msg += "\n  " + L.errors[i];
    if (L.errors.size() > 8) msg += "\n  ... and " + std::to_string(L.errors.size() - 8) + " more";
    return fail(msg);
  }

  Fnv64 h;
  h.str(hp.arch_name);
  for (int32_t v : {hp.n_vocab, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff}) h.pod(v);
  for (int32_t v : {hp.n_rot, hp.dn_k_heads, hp.dn_v_heads, hp.dn_head_dim, hp.dn_conv, hp.sc_taps}) h.pod(v);
  for (int32_t v : {hp.n_expert, hp.n_expert_used, hp.n_ff_exp, hp.n_ff_shexp}) h.pod(v);
  h.pod(hp.expert_gating);
  h.pod(hp.expert_weights_norm);
  h.pod(hp.expert_weights_scale);
  for (int32_t v : {hp.m2_heads, hp.m2_head_dim, hp.m2_state, hp.m2_groups, hp.m2_conv, hp.rope_long_ctx}) h.pod(v);
  for (float v : {hp.rope_mscale, hp.embedding_scale, hp.residual_scale, hp.logit_scale}) h.pod(v);
  h.pod(hp.rms_eps);
  h.pod(hp.rope_base);
  h.pod(hp.attn_scale);
  for (float b : hp.rope_bases) h.pod(b);
  for (const LayerHParams& lp : hp.layers) {
    h.pod(lp.kind);
    h.pod(lp.moe);
    for (int32_t v : {lp.n_head_kv, lp.n_ff, lp.window, lp.rope}) h.pod(v);
    // gemma4's per-layer shapes; hashed only where used, so that the fingerprints (and prompt-cache
    // files) of the other architectures stay what they were.
    if (lp.head_dim != hp.head_dim || lp.kv_source >= 0)
      for (int32_t v : {lp.head_dim, lp.kv_source}) h.pod(v);
  }
  // Hyper-parameters only some architectures set (gemma4's today): each hashed when it is not its
  // default, as the per-layer shapes above, so that the fingerprints (and prompt-cache files) of the
  // models without it stay what they were, whatever the architecture.
  for (int32_t d : hp.rope_dims) h.pod(d);
  if (hp.n_embd_per_layer != 0) h.pod(hp.n_embd_per_layer);
  if (hp.v_norm) h.pod(hp.v_norm);
  if (hp.logit_softcap != 0.0f) h.pod(hp.logit_softcap);
  for (const GgufTensor& t : file->tensors()) {
    h.str(t.name);
    h.pod(t.type);
    h.pod(t.offset);
    for (uint64_t d : t.ne) h.pod(d);
  }
  I.fingerprint = h.h;
  const bool small = fits_half_ram(file->bytes().size());
  if (opts.mlock) {
    I.locked = file->lock_memory();
  } else if (small) {
    // Ask for read-ahead of the weights when they fit comfortably in RAM; on a small board with a
    // model close to its RAM size, leave paging to the kernel's default policy instead.
    file->advise_willneed();
  }
  if (opts.activations == ActivationMode::Quantized &&
      (opts.repack == Repack::On || (opts.repack == Repack::Auto && small)))
    repack_weights(I, *file, opts.pool);
  // A matrix left in the file's rows whose type has a many-row GEMM multiplies one row (fused
  // dots) and several rows (GEMM) with different float rounding orders.
  if (opts.activations == ActivationMode::Quantized) {
    auto invariant = [&](const WeightView& v) {
      return v.packed != nullptr || I.kernels->gemm[static_cast<uint32_t>(v.type)].run == nullptr || v.rows % 16 != 0;
    };
    I.batch_invariant = invariant(I.output) && (!I.ple_model_proj.data || invariant(I.ple_model_proj));
    for (LayerWeights& w : I.layers) for_each_matrix(w, [&](WeightView& v) { I.batch_invariant &= invariant(v); });
  }
  I.file = std::move(file);
  return m;
}

const HParams& Model::hparams() const { return impl_->hp; }
const Tokenizer& Model::tokenizer() const { return *impl_->tokenizer; }
const GgufFile& Model::gguf() const { return *impl_->file; }
const ModelOptions& Model::options() const { return impl_->opts; }
uint64_t Model::fingerprint() const { return impl_->fingerprint; }
bool Model::memory_locked() const { return impl_->locked; }
size_t Model::packed_bytes() const { return impl_->packed.size(); }
double Model::pack_seconds() const { return impl_->pack_seconds; }
bool batch_invariant(const Model& m) { return m.impl().batch_invariant; }

std::string Model::description() const {
  const HParams& hp = impl_->hp;
  size_t bytes = impl_->file->bytes().size();
  std::string d = hp.arch_name + " " + std::to_string(hp.n_layer) + "L " + std::to_string(hp.n_embd) + "d " +
                  std::to_string(hp.n_head) + "/" + std::to_string(hp.n_head_kv) + "h vocab " + std::to_string(hp.n_vocab) +
                  ", " + std::to_string(bytes / (1024 * 1024)) + " MiB";
  if (hp.n_expert > 0) {
    // The experts stay in the file's pages: only the chosen ones become resident as they are read.
    const size_t ex = expert_bytes(*impl_), per_tok = expert_bytes_per_token(*impl_);
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  ", %d of %d experts per token (%.1f MiB of experts mapped, not repacked: %.1f MiB read per token; "
                  "%.1f MiB dense)",
                  hp.n_expert_used, hp.n_expert, double(ex) / 1048576.0, double(per_tok) / 1048576.0,
                  double(bytes - std::min(bytes, ex)) / 1048576.0);
    d += buf;
  }
  return d;
}

// ------------------------------------------------------------------------------------------------
// Session

Session::Session(std::shared_ptr<const Model> model, ThreadPool& pool, const SessionOptions& opts)
    : impl_(std::make_unique<Impl>()) {
  Impl& S = *impl_;
  S.model = std::move(model);
  S.m = &S.model->impl();
  S.pool = &pool;
  S.opts = opts;
  const HParams& hp = S.m->hp;
  S.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : std::min(hp.n_ctx_train, 4096);
  if (S.opts.n_batch <= 0) S.opts.n_batch = 64;
  S.kv_row.assign(size_t(hp.n_layer), 0);
  // Window layers: a ring of window + (largest micro-batch: n_batch + 1) - 1 slots, rounded up to
  // whole attention blocks; no ring where that would not be smaller than n_ctx.
  S.kv_off.resize(size_t(hp.n_layer));
  S.kv_ring.assign(size_t(hp.n_layer), 0);
  S.kv_first.assign(size_t(hp.n_layer), 0);
  size_t kv_elems = 0;
  for (int l = 0; l < hp.n_layer; ++l) {
    const int64_t w = hp.layers[size_t(l)].window;
    const int64_t ring = (w + S.opts.n_batch + kAttentionBlock - 1) / kAttentionBlock * kAttentionBlock;
    if (S.opts.ring_kv && w > 0 && ring < S.n_ctx) S.kv_ring[size_t(l)] = int32_t(ring);
    S.kv_off[size_t(l)] = kv_elems;
    const LayerHParams& lp = hp.layers[size_t(l)];
    // A recurrent layer (hybrid models) has no K/V rows: its state is in S.rec.
    if (lp.kind != LayerKind::Attention) continue;
    if (lp.kv_source >= 0) {  // reads its source's K/V (an earlier layer of the same window)
      S.kv_off[size_t(l)] = S.kv_off[size_t(lp.kv_source)];
      S.kv_ring[size_t(l)] = S.kv_ring[size_t(lp.kv_source)];
      continue;
    }
    S.kv_row[size_t(l)] = int64_t(lp.n_head_kv) * lp.head_dim;
    kv_elems += size_t(S.kv_ring[size_t(l)] ? S.kv_ring[size_t(l)] : S.n_ctx) * size_t(S.kv_row[size_t(l)]);
  }
  init_recurrent_state(S.rec, hp);
  S.k_cache.assign(kv_elems, 0);
  S.v_cache.assign(kv_elems, 0);
  // LongRoPE (phi3): the long factors for a context beyond the original one, as llama.cpp decides.
  const std::vector<float>& factors = hp.rope_long_ctx > 0 && S.n_ctx > hp.rope_long_ctx
                                          ? S.m->rope_freq_factors_long
                                          : S.m->rope_freq_factors;
  S.rope.resize(hp.rope_bases.size());
  for (size_t r = 0; r < hp.rope_bases.size(); ++r) {
    // rotated pairs (n_rot == head_dim unless RoPE is partial)
    const int n_rot = r < hp.rope_dims.size() && hp.rope_dims[r] > 0 ? hp.rope_dims[r] : hp.n_rot;
    const int half = n_rot / 2;
    RopeTable& tab = S.rope[r];
    tab.half = half;
    tab.cos.resize(size_t(S.n_ctx) * half);
    tab.sin.resize(size_t(S.n_ctx) * half);
    for (int i = 0; i < half; ++i) {
      // theta_i = base^(-2i/n_rot), computed in double so long contexts keep their phase accurate.
      double theta = std::pow(double(hp.rope_bases[r]), -2.0 * i / n_rot);
      if (r == 0 && size_t(i) < factors.size()) theta /= double(factors[size_t(i)]);
      for (int32_t p = 0; p < S.n_ctx; ++p) {
        const double a = p * theta;
        tab.cos[size_t(p) * half + i] = static_cast<float>(std::cos(a)) * hp.rope_mscale;
        tab.sin[size_t(p) * half + i] = static_cast<float>(std::sin(a)) * hp.rope_mscale;
      }
    }
  }
  // Held once (not also in opts), so that use_count() tells whether another session shares it.
  S.ws = S.opts.workspace ? std::move(S.opts.workspace) : std::make_shared<EvalWorkspace>();
}

Session::~Session() = default;

std::shared_ptr<EvalWorkspace> make_eval_workspace() { return std::make_shared<EvalWorkspace>(); }

void EvalWorkspace::ensure(const HParams& hp, int n_workers, int64_t T) {
  const size_t t = size_t(T);
  const size_t wide = std::max<size_t>(size_t(hp.n_embd), size_t(hp.n_head) * size_t(hp.head_dim));
  size_t kv = 0;
  int min_kv_heads = hp.n_head_kv;
  for (const LayerHParams& lp : hp.layers) {
    if (lp.kind != LayerKind::Attention) continue;
    kv = std::max(kv, size_t(lp.n_head_kv) * size_t(lp.head_dim));
    min_kv_heads = std::min(min_kv_heads, lp.n_head_kv);
  }
  auto grow = [](auto& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(x, t * hp.n_embd);
  grow(xn, t * wide);
  grow(q, t * wide);
  grow(k, t * kv);
  grow(v, t * kv);
  grow(gate, t * hp.n_ff);
  grow(toks, t);
  grow(row_seg, t);
  if (hp.n_embd_per_layer > 0) {
    grow(ple, t * size_t(hp.n_layer) * size_t(hp.n_embd_per_layer));
    grow(ple_gate, t * size_t(hp.n_layer) * size_t(hp.n_embd_per_layer));  // also a token's table row
  }
  // Attention tiles of about kTileRows query rows share each K/V block converted to f32 (sized for
  // the layer with the most query heads per KV head).
  constexpr int kTileRows = 128;
  const int group = hp.n_head / std::max(1, min_kv_heads);
  attn_tile_tokens = std::max(1, kTileRows / group);
  const size_t stride = (attention_work_bytes(hp.head_dim, attn_tile_tokens * group) + 63) / 64 * 64;
  if (stride > attn_work_stride || attn_work.size() < stride * size_t(n_workers) + 64) {
    attn_work_stride = std::max(stride, attn_work_stride);
    attn_work.assign(attn_work_stride * size_t(n_workers) + 64, 0);
    attn_work_base = (64 - reinterpret_cast<uintptr_t>(attn_work.data()) % 64) % 64;
  }
}

size_t EvalWorkspace::bytes() const {
  auto b = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  return b(x) + b(xn) + b(q) + b(k) + b(v) + b(gate) + b(ple) + b(ple_gate) + b(toks) + b(row_seg) + b(logits) +
         b(attn_work) + rec.bytes() + moe.bytes();
}

namespace {

// One item of eval_batch while it runs: its tokens and how many are done.
struct ItemRun {
  Session::Impl* s;
  std::span<const int32_t> toks;
  bool all_logits;
  size_t done = 0;
};

Status check_items(std::span<const SeqBatch> items, std::vector<ItemRun>& run) {
  if (items.empty()) return Error{"eval_batch: no sequences"};
  const Session::Impl* first = nullptr;
  for (size_t i = 0; i < items.size(); ++i) {
    const SeqBatch& it = items[i];
    if (!it.session) return Error{"eval_batch: item " + std::to_string(i) + " has no session"};
    Session::Impl& S = it.session->impl();
    const HParams& hp = S.m->hp;
    if (it.tokens.empty()) return Error{"eval: no tokens"};
    if (first == nullptr) {
      first = &S;
    } else {
      if (S.m != first->m) return Error{"eval_batch: the sessions do not share one model"};
      if (S.pool != first->pool) return Error{"eval_batch: the sessions do not share one thread pool"};
    }
    for (const ItemRun& r : run)
      if (r.s == &S) return Error{"eval_batch: a session appears twice (item " + std::to_string(i) + ")"};
    if (S.tokens.size() + it.tokens.size() > size_t(S.n_ctx))
      return Error{"context is full: " + std::to_string(S.tokens.size()) + " + " + std::to_string(it.tokens.size()) +
                   " tokens exceed n_ctx " + std::to_string(S.n_ctx)};
    for (int32_t t : it.tokens)
      if (t < 0 || t >= hp.n_vocab) return Error{"token id " + std::to_string(t) + " is out of range"};
    run.push_back({&S, it.tokens, it.all_logits});
  }
  return Ok{};
}

Status run_batch(std::span<const SeqBatch> items, const std::function<void(size_t, size_t)>& progress) {
  std::vector<ItemRun> run;
  run.reserve(items.size());
  if (Status st = check_items(items, run); !st) return st;
  Session::Impl& S0 = *run[0].s;
  const Model::Impl& m = *S0.m;
  const HParams& hp = m.hp;
  ThreadPool& pool = *S0.pool;
  EvalWorkspace& W = *S0.ws;
  const size_t nv = size_t(hp.n_vocab);
  size_t total = 0;
  int32_t cap = S0.opts.n_batch;
  for (ItemRun& r : run) {
    total += r.toks.size();
    cap = std::min(cap, r.s->opts.n_batch);
    r.s->n_logit_rows = r.all_logits ? r.toks.size() : 1;
    r.s->logits.resize(r.s->n_logit_rows * nv);
  }
  // n_batch bounds a prefill's micro-batch; one decode row per sequence always fits in one step
  // (every session's segment stays within its n_batch + 1 rows, which its KV rings are sized for).
  cap = std::max(cap, int32_t(run.size()));
  std::vector<Segment> segs;
  std::vector<OutputRow> out;
  size_t done_total = 0;
  while (done_total < total) {
    // Rows of this micro-batch: items in order, at most cap in all (cap + 1 to take an item's
    // last token along). An item never keeps a single token back for the next micro-batch: a
    // micro-batch of one row runs the decode kernels, and every token of a multi-token item must
    // get the same arithmetic whatever the split (for tables without batch_invariant it is the
    // rule that keeps a prompt's split from mattering; the prompt cache restores prefixes
    // bit-exactly).
    segs.clear();
    out.clear();
    int64_t T = 0;
    for (ItemRun& r : run) {
      const size_t rem = r.toks.size() - r.done;
      if (rem == 0) continue;
      const int64_t room = int64_t(cap) - T;
      if (room <= 0) break;
      // Within the session's own n_batch (+1) too: its KV rings hold window + n_batch positions.
      size_t n = std::min({rem, size_t(room), size_t(r.s->opts.n_batch)});
      if (rem - n == 1) ++n;  // n <= room, so the micro-batch stays within cap + 1
      segs.push_back({r.s, T, int64_t(n), int32_t(r.s->tokens.size())});
      T += int64_t(n);
    }
    W.ensure(hp, pool.size(), T);
    size_t ri = 0;
    for (size_t si = 0; si < segs.size(); ++si) {
      const Segment& sg = segs[si];
      while (run[ri].s != sg.seq) ++ri;
      const ItemRun& r = run[ri];
      std::copy_n(r.toks.begin() + ptrdiff_t(r.done), sg.n, W.toks.begin() + sg.row0);
      std::fill_n(W.row_seg.begin() + sg.row0, sg.n, int32_t(si));
      float* logits = sg.seq->logits.data();
      if (r.all_logits) {
        for (int64_t j = 0; j < sg.n; ++j) out.push_back({sg.row0 + j, logits + (r.done + size_t(j)) * nv});
      } else if (r.done + size_t(sg.n) == r.toks.size()) {
        out.push_back({sg.row0 + sg.n - 1, logits});
      }
    }
    Forward f{m, pool, W, W.toks.data(), T, segs, out};
    m.arch->forward(f);
    ri = 0;
    for (const Segment& sg : segs) {
      while (run[ri].s != sg.seq) ++ri;
      ItemRun& r = run[ri];
      Session::Impl& S = *sg.seq;
      S.tokens.insert(S.tokens.end(), r.toks.begin() + ptrdiff_t(r.done), r.toks.begin() + ptrdiff_t(r.done) + sg.n);
      for (size_t l = 0; l < S.kv_ring.size(); ++l)  // this batch reused the slots of older positions
        if (S.kv_ring[l]) S.kv_first[l] = std::max(S.kv_first[l], int32_t(S.tokens.size()) - S.kv_ring[l]);
      r.done += size_t(sg.n);
    }
    done_total += size_t(T);
    if (progress) progress(done_total, total);
  }
  return Ok{};
}

}  // namespace

Status Session::eval(std::span<const int32_t> toks, bool all_logits, const std::function<void(size_t, size_t)>& progress) {
  const SeqBatch item{this, toks, all_logits};
  return run_batch(std::span(&item, 1), progress);
}

std::span<const float> Session::logits() const {
  const Impl& S = *impl_;
  const size_t nv = size_t(S.m->hp.n_vocab);
  if (S.n_logit_rows == 0) return {};
  return {S.logits.data() + (S.n_logit_rows - 1) * nv, nv};
}

std::span<const float> Session::logits_at(size_t i) const {
  const Impl& S = *impl_;
  const size_t nv = size_t(S.m->hp.n_vocab);
  if (i >= S.n_logit_rows) return {};
  return {S.logits.data() + i * nv, nv};
}

int32_t Session::n_past() const { return int32_t(impl_->tokens.size()); }
int32_t Session::n_ctx() const { return impl_->n_ctx; }
const std::vector<int32_t>& Session::tokens() const { return impl_->tokens; }

void Session::truncate(int32_t n) {
  Impl& S = *impl_;
  if (n < 0) n = 0;
  // Evaluating position n on a window layer reads positions [n - window + 1, n).
  for (size_t l = 0; l < S.kv_ring.size(); ++l)
    if (S.kv_ring[l] && n > 0 && std::max(0, n - S.m->hp.layers[l].window + 1) < S.kv_first[l]) n = 0;
  if (!S.rec.empty() && size_t(n) < S.tokens.size()) {
    // The recurrent state is that of position n_past(): go back to the latest snapshot at or before
    // n (the caller reads n_past() and evaluates from there), or to the start.
    auto& snaps = S.rec.snapshots;
    const StateSnapshot* best = nullptr;
    for (const StateSnapshot& s : snaps)
      if (s.n_past <= n && s.n_past > 0 && (!best || s.n_past > best->n_past)) best = &s;
    n = best ? best->n_past : 0;
    if (best) std::memcpy(S.rec.data.data(), best->bytes.data(), best->bytes.size());
    std::erase_if(snaps, [&](const StateSnapshot& s) { return s.n_past > n; });
  }
  if (size_t(n) < S.tokens.size()) S.tokens.resize(size_t(n));
  if (n == 0) {
    std::fill(S.kv_first.begin(), S.kv_first.end(), 0);  // nothing left to lose
    S.rec.clear();
    S.rec.snapshots.clear();
  }
  S.n_logit_rows = 0;
}

namespace {
uint64_t hash_tokens(std::span<const int32_t> toks) {
  Fnv64 h;
  h.bytes(toks.data(), toks.size() * sizeof(int32_t));
  return h.h;
}
}  // namespace

bool Session::has_recurrent_state() const { return !impl_->rec.empty(); }
size_t Session::recurrent_state_bytes() const { return impl_->rec.data.size() * sizeof(float); }

StateSnapshot Session::save_state() const {
  const Impl& S = *impl_;
  StateSnapshot snap;
  snap.n_past = int32_t(S.tokens.size());
  snap.tokens_hash = hash_tokens(S.tokens);
  snap.bytes.resize(recurrent_state_bytes());
  if (!snap.bytes.empty()) std::memcpy(snap.bytes.data(), S.rec.data.data(), snap.bytes.size());
  return snap;
}

void Session::keep_state_snapshot() {
  Impl& S = *impl_;
  if (S.rec.empty() || S.opts.max_state_snapshots <= 0) return;
  auto& snaps = S.rec.snapshots;
  std::erase_if(snaps, [&](const StateSnapshot& s) { return s.n_past == int32_t(S.tokens.size()); });
  if (int32_t(snaps.size()) >= S.opts.max_state_snapshots) snaps.pop_back();  // keep the earliest
  snaps.push_back(save_state());  // positions only grow between truncations: the list stays ascending
}

std::optional<StateSnapshot> Session::state_at(int32_t n) const {
  const Impl& S = *impl_;
  if (n == int32_t(S.tokens.size())) return save_state();
  for (const StateSnapshot& s : S.rec.snapshots)
    if (s.n_past == n) return s;
  return std::nullopt;
}

std::vector<int32_t> Session::state_snapshot_positions() const {
  std::vector<int32_t> out;
  for (const StateSnapshot& s : impl_->rec.snapshots) out.push_back(s.n_past);
  return out;
}

Status Session::restore_state(const StateSnapshot& snap) {
  Impl& S = *impl_;
  if (snap.bytes.size() != recurrent_state_bytes()) return Error{"state snapshot of another model shape"};
  if (snap.n_past < 0 || size_t(snap.n_past) > S.tokens.size() ||
      hash_tokens(std::span<const int32_t>(S.tokens.data(), size_t(snap.n_past))) != snap.tokens_hash)
    return Error{"state snapshot of another token prefix"};
  if (!snap.bytes.empty()) std::memcpy(S.rec.data.data(), snap.bytes.data(), snap.bytes.size());
  S.tokens.resize(size_t(snap.n_past));
  std::erase_if(S.rec.snapshots, [&](const StateSnapshot& s) { return s.n_past > snap.n_past; });
  S.n_logit_rows = 0;
  return Ok{};
}

size_t Session::kv_bytes_per_position_per_layer() const {
  return size_t(*std::max_element(impl_->kv_row.begin(), impl_->kv_row.end())) * sizeof(uint16_t);
}
size_t Session::kv_row_bytes(int32_t layer) const { return size_t(impl_->kv_row[size_t(layer)]) * sizeof(uint16_t); }
uint16_t* Session::k_cache(int32_t layer) { return impl_->k_layer(layer); }
uint16_t* Session::v_cache(int32_t layer) { return impl_->v_layer(layer); }
int32_t Session::kv_window(int32_t layer) const { return impl_->m->hp.layers[size_t(layer)].window; }
int32_t Session::kv_ring(int32_t layer) const { return impl_->kv_ring[size_t(layer)]; }
int32_t Session::kv_ring_first(int32_t layer) const { return impl_->kv_first[size_t(layer)]; }

void Session::set_cached_tokens(std::span<const int32_t> toks) {
  Impl& S = *impl_;
  S.tokens.assign(toks.begin(), toks.end());
  S.n_logit_rows = 0;
  S.rec.snapshots.clear();  // of the sequence that was here (the caller restores the state: restore_state)
  const int32_t n = int32_t(toks.size());
  for (size_t l = 0; l < S.kv_ring.size(); ++l)
    if (S.kv_ring[l]) S.kv_first[l] = std::max(0, n - S.m->hp.layers[l].window);
}

size_t Session::memory_bytes() const {
  const Impl& S = *impl_;
  auto b = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  size_t rope = 0;
  for (const RopeTable& t : S.rope) rope += b(t.cos) + b(t.sin);
  return kv_bytes() + rope + b(S.logits) + b(S.tokens) + S.rec.bytes() + (S.ws.use_count() == 1 ? S.ws->bytes() : 0);
}

size_t Session::kv_bytes() const {
  const Impl& S = *impl_;
  return (S.k_cache.capacity() + S.v_cache.capacity()) * sizeof(uint16_t);
}

size_t Session::workspace_bytes() const { return impl_->ws->bytes(); }

Status eval_batch(std::span<const SeqBatch> items) { return run_batch(items, {}); }

const Model& Session::model() const { return *impl_->model; }

}  // namespace picolm
