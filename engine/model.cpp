#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>

#include "arch/arch.h"
#include "kernels/thread_pool.h"
#include "kernels/vec_ops.h"
#include "layers.h"
#include "model_impl.h"
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
  h.pod(hp.rms_eps);
  h.pod(hp.rope_base);
  h.pod(hp.attn_scale);
  for (float b : hp.rope_bases) h.pod(b);
  for (const LayerHParams& lp : hp.layers) {
    h.pod(lp.kind);
    for (int32_t v : {lp.n_head_kv, lp.n_ff, lp.window, lp.rope}) h.pod(v);
  }
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

std::string Model::description() const {
  const HParams& hp = impl_->hp;
  size_t bytes = impl_->file->bytes().size();
  return hp.arch_name + " " + std::to_string(hp.n_layer) + "L " + std::to_string(hp.n_embd) + "d " +
         std::to_string(hp.n_head) + "/" + std::to_string(hp.n_head_kv) + "h vocab " + std::to_string(hp.n_vocab) +
         ", " + std::to_string(bytes / (1024 * 1024)) + " MiB";
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
  S.kv_row = int64_t(hp.n_head_kv) * hp.head_dim;
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
    // A recurrent layer (hybrid models) has no K/V rows: its state is in S.rec.
    if (hp.layers[size_t(l)].kind != LayerKind::Attention) continue;
    kv_elems += size_t(S.kv_ring[size_t(l)] ? S.kv_ring[size_t(l)] : S.n_ctx) * size_t(S.kv_row);
  }
  init_recurrent_state(S.rec, hp);
  S.k_cache.assign(kv_elems, 0);
  S.v_cache.assign(kv_elems, 0);
  const int half = hp.n_rot / 2;  // rotated pairs (n_rot == head_dim unless RoPE is partial)
  S.rope.resize(hp.rope_bases.size());
  for (size_t r = 0; r < hp.rope_bases.size(); ++r) {
    RopeTable& tab = S.rope[r];
    tab.half = half;
    tab.cos.resize(size_t(S.n_ctx) * half);
    tab.sin.resize(size_t(S.n_ctx) * half);
    for (int i = 0; i < half; ++i) {
      // theta_i = base^(-2i/n_rot), computed in double so long contexts keep their phase accurate.
      double theta = std::pow(double(hp.rope_bases[r]), -2.0 * i / hp.n_rot);
      if (!S.m->rope_freq_factors.empty()) theta /= double(S.m->rope_freq_factors[size_t(i)]);
      for (int32_t p = 0; p < S.n_ctx; ++p) {
        const double a = p * theta;
        tab.cos[size_t(p) * half + i] = static_cast<float>(std::cos(a));
        tab.sin[size_t(p) * half + i] = static_cast<float>(std::sin(a));
      }
    }
  }
  // Attention tiles of about kTileRows query rows share each K/V block converted to f32.
  constexpr int kTileRows = 128;
  const int group = hp.n_head / hp.n_head_kv;
  S.attn_tile_tokens = std::max(1, kTileRows / group);
  S.attn_work_stride = (attention_work_bytes(hp.head_dim, S.attn_tile_tokens * group) + 63) / 64 * 64;
  S.attn_work.resize(S.attn_work_stride * size_t(pool.size()) + 64);
  S.attn_work_base = (64 - reinterpret_cast<uintptr_t>(S.attn_work.data()) % 64) % 64;
}

Session::~Session() = default;

void Session::Impl::ensure_scratch(int64_t T) {
  const HParams& hp = m->hp;
  const size_t t = size_t(T);
  if (x.size() >= t * hp.n_embd) return;
  const size_t wide = std::max<size_t>(size_t(hp.n_embd), size_t(hp.n_head) * size_t(hp.head_dim));
  x.resize(t * hp.n_embd);
  xn.resize(t * wide);
  q.resize(t * wide);
  k.resize(t * kv_row);
  v.resize(t * kv_row);
  gate.resize(t * hp.n_ff);
}

Status Session::eval(std::span<const int32_t> toks, bool all_logits, const std::function<void(size_t, size_t)>& progress) {
  Impl& S = *impl_;
  const HParams& hp = S.m->hp;
  if (toks.empty()) return Error{"eval: no tokens"};
  if (size_t(S.tokens.size()) + toks.size() > size_t(S.n_ctx))
    return Error{"context is full: " + std::to_string(S.tokens.size()) + " + " + std::to_string(toks.size()) +
                 " tokens exceed n_ctx " + std::to_string(S.n_ctx)};
  for (int32_t t : toks)
    if (t < 0 || t >= hp.n_vocab) return Error{"token id " + std::to_string(t) + " is out of range"};
  const size_t n_rows = all_logits ? toks.size() : 1;
  S.logits.resize(n_rows * size_t(hp.n_vocab));
  S.n_logit_rows = n_rows;
  size_t done = 0;
  while (done < toks.size()) {
    size_t n = std::min(toks.size() - done, size_t(S.opts.n_batch));
    // Never leave a single token for the last micro-batch of a longer eval (this one takes it):
    // one-token matmuls run the decode kernels, whose float rounding order differs from the
    // many-token GEMM, and every token of a multi-token eval must get the same arithmetic
    // whatever the split (the prompt cache restores prefixes bit-exactly).
    if (toks.size() - done - n == 1) ++n;
    const bool last_chunk = done + n == toks.size();
    const int32_t pos0 = int32_t(S.tokens.size());
    S.ensure_scratch(int64_t(n));
    Forward f{S, *S.m, toks.data() + done, int64_t(n), pos0};
    float* logits = S.logits.data() + (all_logits ? done : 0) * size_t(hp.n_vocab);
    S.m->arch->forward(f, all_logits || last_chunk, all_logits, logits);
    S.tokens.insert(S.tokens.end(), toks.begin() + done, toks.begin() + done + n);
    for (size_t l = 0; l < S.kv_ring.size(); ++l)  // this batch reused the slots of older positions
      if (S.kv_ring[l]) S.kv_first[l] = std::max(S.kv_first[l], int32_t(S.tokens.size()) - S.kv_ring[l]);
    done += n;
    if (progress) progress(done, toks.size());
  }
  return Ok{};
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

size_t Session::kv_bytes_per_position_per_layer() const { return size_t(impl_->kv_row) * sizeof(uint16_t); }
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
  return b(S.k_cache) + b(S.v_cache) + rope + b(S.x) + b(S.xn) + b(S.q) + b(S.k) + b(S.v) +
         b(S.gate) + b(S.logits) + b(S.tokens) + b(S.attn_work) + S.rec.bytes();
}

Status eval_batch(std::span<const SeqBatch> items) {
  // Reference behaviour: one eval per sequence (the batched forward pass replaces this loop).
  for (const SeqBatch& it : items) {
    if (!it.session) return Error{"eval_batch: no session"};
    if (it.session->n_past() + int64_t(it.tokens.size()) > it.session->n_ctx())
      return Error{"context is full: " + std::to_string(it.session->n_past()) + " + " +
                   std::to_string(it.tokens.size()) + " tokens exceed n_ctx " + std::to_string(it.session->n_ctx())};
  }
  for (const SeqBatch& it : items)
    if (Status st = it.session->eval(it.tokens, it.all_logits); !st) return st;
  return Ok{};
}

const Model& Session::model() const { return *impl_->model; }

}  // namespace picolm
