// Model (weights + hyper-parameters + tokenizer, loaded from GGUF) and Session (one KV cache,
// one sequence).
// Thread-safety: a Model is immutable after load() and may be shared by any number of Sessions on
// any threads; a Session is used by one thread at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf.h"
#include "kernels/kernels.h"
#include "result.h"
#include "tokenizer.h"

namespace picolm {

class ThreadPool;

enum class Arch { Llama, Qwen2, Qwen3, Gemma3, Smollm3, Qwen35, Lfm2, Qwen3Moe, Lfm2Moe, Qwen35Moe, Phi3, GraniteHybrid, Gemma4 };

// How a mixture-of-experts layer turns its router logits into expert probabilities (llama.cpp's
// expert_gating_func: 1 softmax, 2 sigmoid, 3 softmax over the chosen experts' logits only).
enum class ExpertGating { Softmax, Sigmoid, SoftmaxWeight };

// What a layer computes besides its FFN. Attention layers keep K/V rows in the session's cache; the
// recurrent mixers of the hybrid architectures keep a fixed-size state per sequence instead
// (engine/recurrent.h, engine/mamba2.h): Qwen3.5's gated delta net, LFM2's gated short convolution
// and the Mamba-2 mixer of Granite-4.0-H.
enum class LayerKind { Attention, DeltaNet, ShortConv, Mamba2 };

// Per-layer hyper-parameters (GGUF gives head_count_kv and feed_forward_length as arrays for
// some models; architectures mark sliding-window and NoPE layers).
struct LayerHParams {
  LayerKind kind = LayerKind::Attention;
  int32_t n_head_kv = 0;  // 0 on a layer without attention (no KV rows)
  int32_t n_ff = 0;
  int32_t window = 0;  // sliding-window attention: a query sees the last `window` positions; 0: all
  int32_t rope = 0;    // index into HParams::rope_bases; -1: no rotary embedding (NoPE layer)
  bool moe = false;    // the FFN is the routed mixture of experts (engine/moe.h), n_ff unused
  int32_t head_dim = 0;  // of this layer's q, k and v heads (gemma4: global layers have wider heads)
  // KV sharing (gemma4): the layer computes only its queries and attends over the K/V of this earlier
  // layer (same window, heads and head_dim), keeping none of its own; -1: its own K/V.
  int32_t kv_source = -1;
};

struct HParams {
  Arch arch = Arch::Llama;
  std::string arch_name;     // general.architecture
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;     // the largest of the attention layers' (most models: of every one)
  int32_t head_dim = 0;      // n_embd / n_head unless the file says otherwise (key_length); the largest
                             // of the layers' (LayerHParams::head_dim)
  int32_t n_rot = 0;         // leading dims of each head that RoPE rotates (rope.dimension_count; head_dim)
  int32_t n_ff = 0;          // the largest of the layers'
  int32_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;  // of the global (full-attention) layers
  bool rope_neox = false;    // rotate pairs (i, i + head_dim/2) instead of (2i, 2i+1)
  bool tied_output = false;  // output projection reuses token_embd
  float attn_scale = 0.0f;   // applied to q before q.k (1/sqrt(head_dim) unless the architecture says)
  // RoPE's magnitude factor (ggml's attn_factor): cos and sin are multiplied by it, so the rotated
  // dims of q and k grow by it (phi3 LongRoPE: rope.scaling.attn_factor). 1 for most models.
  float rope_mscale = 1.0f;
  // phi3 LongRoPE: a session whose context exceeds this many positions takes the long frequency
  // factors (rope_factors_long), else the short ones (llama.cpp's rule); 0: no long factors.
  int32_t rope_long_ctx = 0;
  // Granite's multipliers (0: none): embeddings times embedding_scale, each sublayer's output times
  // residual_scale before its residual add, logits divided by logit_scale.
  float embedding_scale = 0.0f, residual_scale = 0.0f, logit_scale = 0.0f;
  std::vector<float> rope_bases;    // distinct RoPE bases the layers use (rope_bases[0] == rope_base)
  // Rotated dims of each RoPE table (parallel to rope_bases; empty or 0: n_rot). rope_freqs.weight
  // divides the angles of table 0 only (the global layers').
  std::vector<int32_t> rope_dims;
  std::vector<LayerHParams> layers;  // [n_layer]
  // Recurrent mixers (hybrid architectures); zero when the model has none of that kind.
  // Gated delta net (qwen35 ssm.*): K heads (group_count), V heads (time_step_rank, a multiple of
  // the K heads), one head dim for K and V (state_size), taps of the causal conv (conv_kernel).
  int32_t dn_k_heads = 0, dn_v_heads = 0, dn_head_dim = 0, dn_conv = 0;
  int32_t sc_taps = 0;  // short convolution (lfm2 shortconv.l_cache): taps including the current token
  // Mixture of experts (the layers with LayerHParams::moe; zero when there are none): n_expert
  // SwiGLU experts of n_ff_exp, n_expert_used chosen per token by the router; a shared expert of
  // n_ff_shexp (0: none) beside them. The chosen experts' probabilities are renormalised to sum 1
  // (expert_weights_norm) and scaled (expert_weights_scale) before their outputs are summed.
  int32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  ExpertGating expert_gating = ExpertGating::Softmax;
  bool expert_weights_norm = false;
  float expert_weights_scale = 1.0f;
  // Mamba-2 (granitehybrid ssm.*): heads (time_step_rank), head dim (inner_size / heads), state size
  // per head dim (state_size), B/C groups (group_count, heads a multiple of it), conv taps (conv_kernel).
  int32_t m2_heads = 0, m2_head_dim = 0, m2_state = 0, m2_groups = 0, m2_conv = 0;
  // gemma4: per-layer embeddings of n_embd_per_layer dims (0: none), the weightless RMS norm of each
  // V head, and the final logit soft-cap (logits = cap * tanh(logits / cap); 0: none).
  int32_t n_embd_per_layer = 0;
  bool v_norm = false;
  float logit_softcap = 0.0f;
};

// Whether the weight matrices are repacked at load into the interleaved panels of
// KernelTable::packed (only where the CPU's kernel table has them: AVX2 and AVX-512 today).
enum class Repack {
  Auto,  // on when the model file is smaller than half the RAM (as the read-ahead hint)
  On,
  Off,
};

// "auto", "on" or "off" (command-line spelling); nullopt for anything else.
std::optional<Repack> parse_repack(std::string_view s);

struct ModelOptions {
  bool mlock = false;
  ActivationMode activations = ActivationMode::Quantized;
  // Repacked matrices decode 2-3x faster and skip the per-batch repacking of prefill, at the cost
  // of a private copy of them (about their size in the file); the file's pages of those matrices
  // are released after packing. Quantized activations only.
  Repack repack = Repack::Auto;
  ThreadPool* pool = nullptr;  // optional: spreads the repacking over its workers
};

class Model {
 public:
  static Result<std::shared_ptr<Model>> load(const std::string& path, const ModelOptions& opts = {});
  // Takes ownership of an already opened file (tests, synthetic models).
  static Result<std::shared_ptr<Model>> from_gguf(std::unique_ptr<GgufFile> file, const ModelOptions& opts = {});
  ~Model();

  const HParams& hparams() const;
  const Tokenizer& tokenizer() const;
  const GgufFile& gguf() const;
  const ModelOptions& options() const;
  // Hash of architecture, hyper-parameters and tensor names/types/shapes/offsets (cache identity).
  uint64_t fingerprint() const;
  std::string description() const;
  bool memory_locked() const;  // ModelOptions::mlock asked for it and mlock() succeeded
  // Bytes of repacked weights held in private memory (0: none repacked), and the load time spent.
  size_t packed_bytes() const;
  double pack_seconds() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  Model();
  std::unique_ptr<Impl> impl_;
};

// The forward pass's scratch: the activations of one micro-batch (about 10 KB per row per 1k of
// n_embd for a llama shape, rows up to n_batch + 1) and the attention work areas. Opaque; grows
// to the largest micro-batch it has served.
struct EvalWorkspace;
std::shared_ptr<EvalWorkspace> make_eval_workspace();

struct SessionOptions {
  int32_t n_ctx = 0;        // 0: min(n_ctx_train, 4096)
  // Tokens per prefill micro-batch (one more when that avoids a last micro-batch of one token).
  // Scratch grows with it (~10 KB per token per 1k of n_embd for a llama shape); every micro-batch
  // re-reads and repacks all weights once, which larger batches amortize better.
  int32_t n_batch = 64;
  // Sliding-window layers keep a ring of about window + n_batch positions instead of n_ctx (false:
  // every layer keeps n_ctx positions; for tests comparing the two).
  bool ring_kv = true;
  // Where the forward passes compute (make_eval_workspace); null: the session makes its own on
  // first use. Sessions evaluated from one thread (the slots of one scheduler) can share one, so N
  // slots hold one set of micro-batch scratch instead of N. A workspace is used by one eval at a
  // time: sessions sharing it must not be evaluated concurrently.
  std::shared_ptr<EvalWorkspace> workspace = nullptr;
  // Hybrid models: how many recurrent-state snapshots keep_state_snapshot() holds (the oldest goes).
  int32_t max_state_snapshots = 2;
};

// The recurrent layers' state of one sequence after its first n_past tokens (hybrid models).
struct StateSnapshot {
  int32_t n_past = 0;
  uint64_t tokens_hash = 0;    // of tokens [0, n_past): a snapshot only applies to the same prefix
  std::vector<uint8_t> bytes;  // Session::recurrent_state_bytes(), layout private to the engine
};

class Session;

// One sequence's part of a multi-sequence batch (eval_batch).
struct SeqBatch {
  Session* session = nullptr;
  std::span<const int32_t> tokens;  // evaluated at positions [session->n_past(), + tokens.size())
  bool all_logits = false;          // as Session::eval
};

class Session {
 public:
  Session(std::shared_ptr<const Model> model, ThreadPool& pool, const SessionOptions& opts = {});
  ~Session();

  // Evaluates tokens at positions [n_past(), n_past() + tokens.size()).
  // all_logits: keep logits for every evaluated position (logits_at), else only the last.
  // progress (optional): called after each micro-batch with (done, total).
  Status eval(std::span<const int32_t> tokens, bool all_logits = false,
              const std::function<void(size_t, size_t)>& progress = {});
  // Logits after the last evaluated token (n_vocab floats).
  std::span<const float> logits() const;
  // With all_logits: logits after the i-th token of the last eval() call.
  std::span<const float> logits_at(size_t i) const;

  int32_t n_past() const;
  int32_t n_ctx() const;
  const std::vector<int32_t>& tokens() const;  // the tokens whose K/V are in the cache
  // Drops positions >= n (n <= n_past()). A sliding-window layer's ring only holds its recent
  // positions: when some window layer no longer holds the window before n (n is more than about
  // n_batch positions behind the furthest position evaluated), everything is dropped instead and
  // n_past() becomes 0, so the caller evaluates from the start. Hybrid models go back only to a
  // state snapshot (below). Read n_past() after truncating.
  void truncate(int32_t n);

  // KV cache layout (for the prompt cache): fp16, per layer K then V, each
  // [slot][n_head_kv][head_dim]; position p is in slot p, or in slot p % kv_ring(layer) for a
  // window layer. Bytes of one layer's K (or V) for one position:
  // (Of every layer with K/V where they are alike; the largest where they differ, gemma4.)
  size_t kv_bytes_per_position_per_layer() const;
  // Bytes of layer l's K (or V) for one position; 0 for a layer without K/V of its own (a recurrent
  // layer, or a gemma4 layer reading another's: Model::hparams().layers[l].kv_source).
  size_t kv_row_bytes(int32_t layer) const;
  uint16_t* k_cache(int32_t layer);  // pointer to slot 0
  uint16_t* v_cache(int32_t layer);
  int32_t kv_window(int32_t layer) const;  // the layer's attention window; 0: it sees every position
  int32_t kv_ring(int32_t layer) const;    // slots of a window layer's ring; 0: n_ctx slots, one per position
  int32_t kv_ring_first(int32_t layer) const;  // oldest position a ring still holds (0 without a ring)
  // Declares that positions [0, tokens.size()) now hold these tokens (after copying KV in). For a
  // window layer only its last kv_window(layer) positions are required (and then assumed). On a
  // hybrid model the recurrent state is not part of this: follow with restore_state().
  void set_cached_tokens(std::span<const int32_t> tokens);

  // ---- recurrent state (hybrid models: qwen35, lfm2) ----
  // A recurrent layer (gated delta net, short convolution) keeps one fixed-size state that sums up
  // every position before n_past(): unlike K/V it cannot be cut back. So on a hybrid model
  // truncate(n) with n < n_past() goes back to the latest snapshot taken at or before n
  // (keep_state_snapshot; n_past() becomes its position, the snapshots beyond it are dropped), or,
  // when there is none, drops everything (n_past() 0). Read n_past() after truncating and evaluate
  // the rest. Snapshots cost recurrent_state_bytes() each; none are taken automatically (take one
  // at the end of a stable prefix, e.g. the system prompt, and at the end of a prompt). Without
  // recurrent layers these calls do nothing and truncate keeps its KV-only behaviour.
  bool has_recurrent_state() const;
  size_t recurrent_state_bytes() const;  // one position's state, every recurrent layer (0: none)
  // Remembers the state at n_past() for truncate: at most SessionOptions::max_state_snapshots, the
  // earliest ones kept (a system-prompt boundary outlives the ends of later prompts).
  void keep_state_snapshot();
  std::vector<int32_t> state_snapshot_positions() const;  // ascending
  // The state at n_past() (prompt cache), and back: restore_state requires that tokens()[0, n_past)
  // is the prefix the snapshot was taken after (checked by hash); it then sets the state and
  // truncates the tokens to snap.n_past (whose K/V must be in the cache, e.g. after set_cached_tokens).
  StateSnapshot save_state() const;
  Status restore_state(const StateSnapshot& snap);
  // The state at position n: save_state() when n == n_past(), else a kept snapshot taken at n.
  std::optional<StateSnapshot> state_at(int32_t n) const;

  // KV cache, recurrent state (hybrids: with its snapshots), RoPE tables, logits and token list,
  // plus the workspace when no other session shares it (a shared workspace: make_eval_workspace's
  // owner counts it once).
  size_t memory_bytes() const;
  size_t kv_bytes() const;         // the K/V cache alone (allocated whole at construction)
  size_t workspace_bytes() const;  // the workspace this session computes in (shared or not)
  const Model& model() const;

  struct Impl;  // engine-internal (session_impl.h: the layer blocks compute on it)
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Evaluates several sequences together (parallel slots): every item's tokens at its session's next
// positions. Afterwards each session's logits()/logits_at()/n_past() are as after its own eval().
// The sessions must be distinct and share one model and one thread pool. One forward pass per
// micro-batch covers the tokens of all items (every weight matrix is read once per step for all
// sequences); a micro-batch holds at most max(the smallest n_batch of the sessions, the number of
// items) rows (+1, as in eval) and each item's session's n_batch (+1), taking items in order, so a
// long prefill item is split across steps while one decode row per item always fits in one. The first item's session's
// workspace is used. Batch invariance: where batch_invariant(model), a sequence's logits are the
// same bits whatever else is in the batch and however it is split (ARCHITECTURE.md, Numerics).
// Bad input (no items, empty tokens, a session twice, another model or pool, a token out of
// range, context full in any item) is refused before anything runs: on error no session has
// advanced.
Status eval_batch(std::span<const SeqBatch> items);

// Whether eval_batch keeps every sequence's logits bit-identical to evaluating it alone (and any
// split of a prompt bit-identical to any other). True when every matrix multiplies the same way
// for 1 and for many rows: Exact activations, or Quantized with every matrix repacked (or of a
// type the kernel table has no many-row GEMM for). False on AVX-512 with Repack::Off (or a model
// too large to repack under Repack::Auto): there a lone decode row takes the fused dots and a
// row beside others the GEMM, which round in another order (logits differ in the last bits and
// greedy choices can flip on near-ties).
bool batch_invariant(const Model& m);

}  // namespace picolm
