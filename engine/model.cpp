#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>

#include "kernels/thread_pool.h"
#include "kernels/vec_ops.h"
#include "model_impl.h"

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

std::string fmt_shape(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

class Loader {
 public:
  Loader(const GgufFile& f, const KernelTable& k) : f_(f), k_(k) {}
  std::vector<std::string> errors;

  // A 2-D weight [rows][cols] used through vec_dot.
  WeightView matrix(const std::string& name, int64_t rows, int64_t cols, bool optional = false) {
    const GgufTensor* t = f_.tensor(name);
    if (!t) {
      if (!optional) errors.push_back("missing tensor '" + name + "'");
      return {};
    }
    if (t->ne.size() != 2 || t->ne[0] != static_cast<uint64_t>(cols) || t->ne[1] != static_cast<uint64_t>(rows)) {
      errors.push_back("tensor '" + name + "' has shape " + fmt_shape(t->ne) + ", expected [" + std::to_string(cols) +
                       ", " + std::to_string(rows) + "]");
      return {};
    }
    if (!k_.vec_dot[static_cast<uint32_t>(t->type)] || !k_.dequantize_row[static_cast<uint32_t>(t->type)]) {
      errors.push_back("tensor '" + name + "' has type " + ggml_type_traits(t->type)->name +
                       ", which this engine cannot multiply");
      return {};
    }
    return {t->data, t->type, rows, cols};
  }

  // A 1-D vector (norm weights, biases), dequantized to F32.
  std::vector<float> vec(const std::string& name, int64_t n, bool optional = false) {
    const GgufTensor* t = f_.tensor(name);
    if (!t) {
      if (!optional) errors.push_back("missing tensor '" + name + "'");
      return {};
    }
    if (t->n_elements() != static_cast<uint64_t>(n) || t->ne[0] != static_cast<uint64_t>(n)) {
      errors.push_back("tensor '" + name + "' has shape " + fmt_shape(t->ne) + ", expected [" + std::to_string(n) + "]");
      return {};
    }
    if (!k_.dequantize_row[static_cast<uint32_t>(t->type)]) {
      errors.push_back("tensor '" + name + "' has unsupported type " + ggml_type_traits(t->type)->name);
      return {};
    }
    std::vector<float> out(static_cast<size_t>(n));
    k_.dequantize_row[static_cast<uint32_t>(t->type)](t->data, out.data(), n);
    return out;
  }

 private:
  const GgufFile& f_;
  const KernelTable& k_;
};

Status read_hparams(const GgufFile& f, HParams& hp) {
  auto arch = f.get_string("general.architecture");
  if (!arch) return Error{"missing general.architecture"};
  hp.arch_name = std::string(*arch);
  if (hp.arch_name == "llama") {
    hp.arch = Arch::Llama;
    hp.rope_neox = false;
  } else if (hp.arch_name == "qwen2") {
    hp.arch = Arch::Qwen2;
    hp.rope_neox = true;
  } else if (hp.arch_name == "qwen3") {
    hp.arch = Arch::Qwen3;
    hp.rope_neox = true;
  } else {
    return Error{"unsupported architecture '" + hp.arch_name + "' (supported: llama, qwen2, qwen3)"};
  }
  const std::string a = hp.arch_name + ".";
  std::vector<std::string> missing;
  auto need = [&](const std::string& key) -> int64_t {
    auto v = f.get_int(a + key);
    if (!v) {
      missing.push_back(a + key);
      return 0;
    }
    return *v;
  };
  hp.n_embd = static_cast<int32_t>(need("embedding_length"));
  hp.n_layer = static_cast<int32_t>(need("block_count"));
  hp.n_head = static_cast<int32_t>(need("attention.head_count"));
  hp.n_ff = static_cast<int32_t>(need("feed_forward_length"));
  hp.n_ctx_train = static_cast<int32_t>(need("context_length"));
  if (!missing.empty()) {
    std::string m = "missing metadata:";
    for (auto& k : missing) m += " " + k;
    return Error{m};
  }
  hp.n_head_kv = static_cast<int32_t>(f.get_int(a + "attention.head_count_kv").value_or(hp.n_head));
  hp.rms_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  hp.rope_base = static_cast<float>(f.get_float(a + "rope.freq_base").value_or(10000.0));
  auto bad = [](int64_t v, int64_t lo, int64_t hi) { return v < lo || v > hi; };
  if (bad(hp.n_embd, 1, 1 << 16) || bad(hp.n_layer, 1, 1024) || bad(hp.n_head, 1, 1024) || bad(hp.n_head_kv, 1, hp.n_head) ||
      bad(hp.n_ff, 1, 1 << 20) || bad(hp.n_ctx_train, 1, 1 << 24))
    return Error{"implausible hyper-parameters"};
  if (hp.n_head % hp.n_head_kv != 0) return Error{"head_count is not a multiple of head_count_kv"};
  hp.head_dim = static_cast<int32_t>(f.get_int(a + "attention.key_length").value_or(hp.n_embd / hp.n_head));
  if (hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.head_dim > 1024) return Error{"invalid head dimension"};
  if (auto rd = f.get_int(a + "rope.dimension_count"); rd && *rd != hp.head_dim)
    return Error{"partial rotary embeddings (rope.dimension_count != head_dim) are not supported"};
  if (!(hp.rms_eps > 0.0f) || !(hp.rope_base > 0.0f) || !std::isfinite(hp.rope_base))
    return Error{"invalid rms epsilon or rope base"};
  return Ok{};
}

// Whether the model file is small enough next to the RAM for read-ahead and repacking.
bool fits_half_ram(size_t bytes) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 && bytes < size_t(pages) * size_t(page) / 2;
}

// Repacks every matrix the kernel table has a packed form for into one anonymous mapping and
// releases the file's pages of each once it is packed.
void repack_weights(Model::Impl& I, const GgufFile& file, ThreadPool* pool) {
  std::vector<WeightView*> mats;
  for (LayerWeights& w : I.layers)
    for (WeightView* v : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) mats.push_back(v);
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
  if (Status s = read_hparams(*file, hp); !s) return fail(s.error());

  auto tok = Tokenizer::create(*file);
  if (!tok) return fail(tok.error());
  I.tokenizer = std::move(tok.value());

  const GgufTensor* emb = file->tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2) return fail("missing or malformed tensor 'token_embd.weight'");
  hp.n_vocab = static_cast<int32_t>(emb->ne[1]);
  if (hp.n_vocab < I.tokenizer->n_vocab())
    return fail("token_embd has " + std::to_string(hp.n_vocab) + " rows but the vocabulary has " +
                std::to_string(I.tokenizer->n_vocab()) + " tokens");

  Loader L(*file, *I.kernels);
  const int64_t E = hp.n_embd, hd = hp.head_dim, q_dim = int64_t(hp.n_head) * hd, kv_dim = int64_t(hp.n_head_kv) * hd;
  I.tok_embd = L.matrix("token_embd.weight", hp.n_vocab, E);
  I.output_norm = L.vec("output_norm.weight", E);
  I.output = L.matrix("output.weight", hp.n_vocab, E, /*optional=*/true);
  I.rope_freq_factors = L.vec("rope_freqs.weight", hp.head_dim / 2, /*optional=*/true);
  for (float f : I.rope_freq_factors)
    if (!(f > 0.0f) || !std::isfinite(f)) L.errors.push_back("rope_freqs.weight has a non-positive or non-finite factor");
  if (!I.output.data) {
    hp.tied_output = true;
    I.output = I.tok_embd;
  }
  I.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int l = 0; l < hp.n_layer; ++l) {
    LayerWeights& w = I.layers[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.attn_norm = L.vec(p + "attn_norm.weight", E);
    w.ffn_norm = L.vec(p + "ffn_norm.weight", E);
    w.wq = L.matrix(p + "attn_q.weight", q_dim, E);
    w.wk = L.matrix(p + "attn_k.weight", kv_dim, E);
    w.wv = L.matrix(p + "attn_v.weight", kv_dim, E);
    w.wo = L.matrix(p + "attn_output.weight", E, q_dim);
    w.w_gate = L.matrix(p + "ffn_gate.weight", hp.n_ff, E);
    w.w_up = L.matrix(p + "ffn_up.weight", hp.n_ff, E);
    w.w_down = L.matrix(p + "ffn_down.weight", E, hp.n_ff);
    const bool biases = hp.arch == Arch::Qwen2;
    w.bq = L.vec(p + "attn_q.bias", q_dim, !biases);
    w.bk = L.vec(p + "attn_k.bias", kv_dim, !biases);
    w.bv = L.vec(p + "attn_v.bias", kv_dim, !biases);
    const bool qk_norm = hp.arch == Arch::Qwen3;
    w.q_norm = L.vec(p + "attn_q_norm.weight", hd, !qk_norm);
    w.k_norm = L.vec(p + "attn_k_norm.weight", hd, !qk_norm);
  }
  if (!L.errors.empty()) {
    std::string msg = "cannot load model:";
    for (size_t i = 0; i < L.errors.size() && i < 8; ++i) msg += "\n  " + L.errors[i];
    if (L.errors.size() > 8) msg += "\n  ... and " + std::to_string(L.errors.size() - 8) + " more";
    return fail(msg);
  }

  Fnv64 h;
  h.str(hp.arch_name);
  for (int32_t v : {hp.n_vocab, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff}) h.pod(v);
  h.pod(hp.rms_eps);
  h.pod(hp.rope_base);
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

struct Session::Impl {
  std::shared_ptr<const Model> model;
  const Model::Impl* m = nullptr;
  ThreadPool* pool = nullptr;
  SessionOptions opts;
  int32_t n_ctx = 0;
  int64_t kv_row = 0;                 // n_head_kv * head_dim
  std::vector<uint16_t> k_cache;      // fp16, [layer][position][kv_head][head_dim]
  std::vector<uint16_t> v_cache;      // fp16, [layer][position][kv_head][head_dim]
  std::vector<float> rope_cos, rope_sin;  // [position][head_dim/2]
  std::vector<int32_t> tokens;
  // Scratch for n_batch tokens, [token][dim]. Two buffers serve twice per layer, since their first
  // use is over when the second begins: xn (normed input of q/k/v) also holds the attention output
  // (read by attn_output before the FFN norm rewrites xn); q also holds the attn_output and
  // ffn_down results (q is dead once attention has run). Both are sized for either use.
  std::vector<float> x, xn, q, k, v, gate;  // gate: SiLU(gate) * up, the input of ffn_down
  std::vector<float> logits;          // [n_out][n_vocab]
  size_t n_logit_rows = 0;
  // Attention scratch, one slice per pool worker (VecOps::attention's work area for a tile of at
  // most attn_tile_tokens tokens x the query heads of one KV head).
  std::vector<uint8_t> attn_work;     // [worker][attn_work_stride] bytes from attn_work_base
  size_t attn_work_base = 0;          // offset of the first 64-byte aligned byte
  size_t attn_work_stride = 0;
  int attn_tile_tokens = 1;

  void ensure_scratch(int64_t T);
  // fn(t) for every token of the batch; spread over the pool when the batch is large enough.
  template <class Fn>
  void for_tokens(int64_t T, const Fn& fn);
  void forward(const int32_t* toks, int64_t T, int32_t pos0, bool need_logits, bool all_logits, size_t logit_row0);
  void rope(float* vec, int n_heads, int32_t pos) const;
  void attention(int layer, int64_t T, int32_t pos0);
};

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
  const size_t kv_elems = size_t(hp.n_layer) * size_t(S.n_ctx) * size_t(S.kv_row);
  S.k_cache.assign(kv_elems, 0);
  S.v_cache.assign(kv_elems, 0);
  const int half = hp.head_dim / 2;
  S.rope_cos.resize(size_t(S.n_ctx) * half);
  S.rope_sin.resize(size_t(S.n_ctx) * half);
  for (int i = 0; i < half; ++i) {
    // theta_i = base^(-2i/d), computed in double so long contexts keep their phase accurate.
    double theta = std::pow(double(hp.rope_base), -2.0 * i / hp.head_dim);
    if (!S.m->rope_freq_factors.empty()) theta /= double(S.m->rope_freq_factors[size_t(i)]);
    for (int32_t p = 0; p < S.n_ctx; ++p) {
      const double a = p * theta;
      S.rope_cos[size_t(p) * half + i] = static_cast<float>(std::cos(a));
      S.rope_sin[size_t(p) * half + i] = static_cast<float>(std::sin(a));
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

namespace {

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

}  // namespace

void Session::Impl::rope(float* vec, int n_heads, int32_t pos) const {
  const HParams& hp = m->hp;
  const int hd = hp.head_dim, half = hd / 2;
  const float* c = &rope_cos[size_t(pos) * half];
  const float* s = &rope_sin[size_t(pos) * half];
  for (int h = 0; h < n_heads; ++h) {
    float* v = vec + size_t(h) * hd;
    if (hp.rope_neox) {
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = a * s[i] + b * c[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * c[i] - b * s[i];
        v[2 * i + 1] = a * s[i] + b * c[i];
      }
    }
  }
}

template <class Fn>
void Session::Impl::for_tokens(int64_t T, const Fn& fn) {
  const int n_workers = pool->size();
  if (T < 4 || n_workers == 1) {
    for (int64_t t = 0; t < T; ++t) fn(t);
    return;
  }
  const int n_tasks = int(std::min<int64_t>(T, int64_t(n_workers) * 4));
  pool->parallel_for(n_tasks, [&](int task, int) {
    for (int64_t t = T * task / n_tasks; t < T * (task + 1) / n_tasks; ++t) fn(t);
  });
}

// One task per (token tile, KV head[, slice of its query heads]): the query heads of a KV head
// share its K/V blocks. Tasks are handed out last tile first, since later tokens see more positions.
void Session::Impl::attention(int layer, int64_t T, int32_t pos0) {
  const HParams& hp = m->hp;
  const int hd = hp.head_dim;
  const int group = hp.n_head / hp.n_head_kv;
  const int64_t q_dim = int64_t(hp.n_head) * hd;
  const uint16_t* K = k_cache.data() + size_t(layer) * n_ctx * kv_row;
  const uint16_t* V = v_cache.data() + size_t(layer) * n_ctx * kv_row;
  const int tile_tokens = attn_tile_tokens;
  const int n_tiles = int((T + tile_tokens - 1) / tile_tokens);
  // Few tiles (decode): split the query heads of a group so that every worker has a task.
  int n_split = 1;
  if (n_tiles * hp.n_head_kv < pool->size())
    n_split = std::min(group, (pool->size() + n_tiles * hp.n_head_kv - 1) / (n_tiles * hp.n_head_kv));
  const int per_tile = hp.n_head_kv * n_split;
  pool->parallel_for(n_tiles * per_tile, [&](int task, int worker) {
    const int tile = n_tiles - 1 - task / per_tile;
    const int kvh = task % per_tile / n_split, part = task % n_split;
    const int g0 = group * part / n_split, g1 = group * (part + 1) / n_split;
    const int64_t t0 = int64_t(tile) * tile_tokens;
    AttentionTile a;
    a.head_dim = hd;
    a.n_tok = int(std::min<int64_t>(tile_tokens, T - t0));
    a.n_grp = g1 - g0;
    a.pos0 = pos0 + int32_t(t0);
    a.scale = 1.0f / std::sqrt(float(hd));
    a.q = q.data() + t0 * q_dim + (int64_t(kvh) * group + g0) * hd;
    a.out = xn.data() + t0 * q_dim + (int64_t(kvh) * group + g0) * hd;
    a.row_stride = q_dim;
    a.k = K + int64_t(kvh) * hd;
    a.v = V + int64_t(kvh) * hd;
    a.kv_stride = kv_row;
    a.work = attn_work.data() + attn_work_base + size_t(worker) * attn_work_stride;
    m->vec_ops->attention(a);
  });
}

void Session::Impl::forward(const int32_t* toks, int64_t T, int32_t pos0, bool need_logits, bool all_logits,
                            size_t logit_row0) {
  const HParams& hp = m->hp;
  const KernelTable& K = *m->kernels;
  const VecOps& ops = *m->vec_ops;
  const ActivationMode mode = m->opts.activations;
  const int64_t E = hp.n_embd, hd = hp.head_dim, q_dim = int64_t(hp.n_head) * hd;
  ensure_scratch(T);

  auto mm = [&](const WeightView& w, const float* X, float* Y) {
    matmul(K, *pool, mode, w.type, w.data, w.rows, w.cols, X, T, Y, w.packed);
  };
  // Matrices that share their input: one activation quantization and one pass of the pool.
  auto mm3 = [&](const WeightView& a, float* ya, const WeightView& b, float* yb, const WeightView& c, float* yc,
                 const float* X) {
    const MatmulTarget t[3] = {{a.type, a.data, a.rows, ya, a.packed}, {b.type, b.data, b.rows, yb, b.packed},
                               {c.type, c.data, c.rows, yc, c.packed}};
    matmul_multi(K, *pool, mode, t, 3, a.cols, X, T);
  };

  // Embeddings (dequantize the token's row), then the first layer's attention norm.
  const size_t emb_row_bytes = row_bytes(m->tok_embd.type, E);
  for_tokens(T, [&](int64_t t) {
    const auto* row = static_cast<const uint8_t*>(m->tok_embd.data) + size_t(toks[t]) * emb_row_bytes;
    K.dequantize_row[static_cast<uint32_t>(m->tok_embd.type)](row, x.data() + t * E, E);
    rms_norm(&x[t * E], m->layers[0].attn_norm.data(), &xn[t * E], E, hp.rms_eps);
  });

  for (int l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& w = m->layers[size_t(l)];
    mm3(w.wq, q.data(), w.wk, k.data(), w.wv, v.data(), xn.data());
    for_tokens(T, [&](int64_t t) {
      float* qt = &q[t * q_dim];
      float* kt = &k[t * kv_row];
      float* vt = &v[t * kv_row];
      if (!w.bq.empty()) {
        for (int64_t i = 0; i < q_dim; ++i) qt[i] += w.bq[i];
        for (int64_t i = 0; i < kv_row; ++i) kt[i] += w.bk[i];
        for (int64_t i = 0; i < kv_row; ++i) vt[i] += w.bv[i];
      }
      if (!w.q_norm.empty()) {
        // Per-head RMS norm of q and k (qwen3), before RoPE.
        for (int h = 0; h < hp.n_head; ++h) rms_norm(qt + h * hd, w.q_norm.data(), qt + h * hd, hd, hp.rms_eps);
        for (int h = 0; h < hp.n_head_kv; ++h) rms_norm(kt + h * hd, w.k_norm.data(), kt + h * hd, hd, hp.rms_eps);
      }
      const int32_t pos = pos0 + int32_t(t);
      rope(qt, hp.n_head, pos);
      rope(kt, hp.n_head_kv, pos);
      uint16_t* kc = k_cache.data() + (size_t(l) * n_ctx + pos) * kv_row;
      uint16_t* vc = v_cache.data() + (size_t(l) * n_ctx + pos) * kv_row;
      ops.f32_to_f16(int(kv_row), kt, kc);
      ops.f32_to_f16(int(kv_row), vt, vc);
    });
    attention(l, T, pos0);
    float* const att = xn.data();  // attention output (see the scratch comment)
    float* const ffn = q.data();
    mm(w.wo, att, ffn);
    for_tokens(T, [&](int64_t t) {
      for (int64_t i = t * E; i < (t + 1) * E; ++i) x[i] += ffn[i];
      rms_norm(&x[t * E], w.ffn_norm.data(), &xn[t * E], E, hp.rms_eps);
    });

    // SiLU(gate) * up, chunk of rows by chunk of rows: the up products are never stored whole.
    matmul_pair(K, *pool, mode, {w.w_gate.type, w.w_gate.data, w.w_gate.rows, gate.data(), w.w_gate.packed},
                {w.w_up.type, w.w_up.data, w.w_up.rows, nullptr, w.w_up.packed}, E, xn.data(), T, ops.silu_mul);
    mm(w.w_down, gate.data(), ffn);
    // Residual, then the next layer's attention norm while the row is in cache.
    const float* next_norm = l + 1 < hp.n_layer ? m->layers[size_t(l) + 1].attn_norm.data() : nullptr;
    for_tokens(T, [&](int64_t t) {
      for (int64_t i = t * E; i < (t + 1) * E; ++i) x[i] += ffn[i];
      if (next_norm) rms_norm(&x[t * E], next_norm, &xn[t * E], E, hp.rms_eps);
    });
  }

  if (!need_logits) return;
  // Output: all positions, or only the last.
  const int64_t first = all_logits ? 0 : T - 1;
  const int64_t n_out = T - first;
  for_tokens(n_out, [&](int64_t i) {
    rms_norm(&x[(first + i) * E], m->output_norm.data(), &xn[i * E], E, hp.rms_eps);
  });
  float* out = logits.data() + logit_row0 * size_t(hp.n_vocab);
  matmul(K, *pool, mode, m->output.type, m->output.data, m->output.rows, m->output.cols, xn.data(), n_out, out,
         m->output.packed);
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
    S.forward(toks.data() + done, int64_t(n), pos0, all_logits || last_chunk, all_logits, all_logits ? done : 0);
    S.tokens.insert(S.tokens.end(), toks.begin() + done, toks.begin() + done + n);
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
  if (n < 0) n = 0;
  if (size_t(n) < impl_->tokens.size()) impl_->tokens.resize(size_t(n));
  impl_->n_logit_rows = 0;
}

size_t Session::kv_bytes_per_position_per_layer() const { return size_t(impl_->kv_row) * sizeof(uint16_t); }
uint16_t* Session::k_cache(int32_t layer) { return impl_->k_cache.data() + size_t(layer) * impl_->n_ctx * impl_->kv_row; }
uint16_t* Session::v_cache(int32_t layer) { return impl_->v_cache.data() + size_t(layer) * impl_->n_ctx * impl_->kv_row; }

void Session::set_cached_tokens(std::span<const int32_t> toks) {
  impl_->tokens.assign(toks.begin(), toks.end());
  impl_->n_logit_rows = 0;
}

size_t Session::memory_bytes() const {
  const Impl& S = *impl_;
  auto b = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  return b(S.k_cache) + b(S.v_cache) + b(S.rope_cos) + b(S.rope_sin) + b(S.x) + b(S.xn) + b(S.q) + b(S.k) + b(S.v) +
         b(S.gate) + b(S.logits) + b(S.tokens) + b(S.attn_work);
}

const Model& Session::model() const { return *impl_->model; }

}  // namespace picolm
