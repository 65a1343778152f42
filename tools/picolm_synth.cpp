// picolm-synth: writes a GGUF model of a real architecture's shape with random weights, for
// benchmarks and tests (and the built-in demo model). Weights are random-but-valid quantized
// blocks in the tensor types llama.cpp's quantizer would choose for the named recipe; the text such
// a model generates is gibberish by design, but speed and memory behave as for the real model.
//
// Streaming: tensors are produced one at a time from a small pool of quantized blocks, so even a
// 1.5B-parameter file needs only a few MB of RAM and is written at disk speed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gguf.h"
#include "gguf_writer.h"
#include "kernels/kernels.h"
#include "protocols/qwen25_template.h"  // data only: the demo model's chat template

using namespace picolm;

namespace {

// ---- shapes -----------------------------------------------------------------------------------

struct Shape {
  const char* name;
  const char* arch;  // general.architecture
  int n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
  float rope_base, rms_eps;
  bool tied;      // no output.weight: the output projection reuses token_embd
  bool qkv_bias;  // Qwen2 has biases on q, k, v
  int head_dim = 0;       // 0: n_embd / n_head (qwen3 and gemma3 state it: attention.key_length)
  bool qk_norm = false;   // per-head attn_q_norm / attn_k_norm (qwen3, gemma3)
  bool post_norms = false;  // post_attention_norm / post_ffw_norm (gemma3)
  int window = 0;         // gemma3.attention.sliding_window
  // Hybrids. qwen35: every attn_interval-th layer is gated full attention, the others gated delta
  // nets of dn_k_heads / dn_v_heads heads of dn_head_dim with a dn_conv-tap conv; RoPE on n_rot dims.
  int n_rot = 0;
  int attn_interval = 0, dn_k_heads = 0, dn_v_heads = 0, dn_head_dim = 0, dn_conv = 0;
  // lfm2: bit l set = layer l is attention, the others gated short convolutions of sc_taps taps.
  // granitehybrid: the same mask, the others Mamba-2 layers.
  uint64_t attn_layers = 0;
  int sc_taps = 0;
  // Mixture of experts (qwen3moe, lfm2moe): n_expert experts of n_ff_exp, n_expert_used per token, in
  // every layer from n_dense_lead on (the first n_dense_lead keep a dense FFN of n_ff); sigmoid
  // gating with a selection bias (lfm2moe) or softmax (qwen3moe).
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_dense_lead = 0;
  bool sigmoid_gating = false;
  // granitehybrid's MoE form: an ungated shared expert of n_ff_shexp beside the routed ones, whose
  // width is feed_forward_length (n_ff == n_ff_exp; no expert_feed_forward_length key, as the real files).
  int n_ff_shexp = 0;
  // phi3: fused attn_qkv and gate|up ffn_up, LongRoPE factors of the original context orig_ctx.
  bool fused = false;
  int orig_ctx = 0;
  // granitehybrid: Mamba-2 heads of m2_head_dim, d_state, B/C groups, conv taps; Granite's multipliers.
  int m2_heads = 0, m2_head_dim = 0, m2_state = 0, m2_groups = 0, m2_conv = 0;
  float embedding_scale = 0.0f, residual_scale = 0.0f, logit_scale = 0.0f, attention_scale = 0.0f;
  // gemma4: global (full-attention) layers every swa_period-th layer with heads of global_head_dim
  // (head_dim is the sliding layers'); the last n_kv_shared layers read earlier layers' K/V;
  // per-layer embeddings of n_pl; FFN twice as wide on the KV-sharing layers when double_wide.
  int global_head_dim = 0, swa_period = 0, n_kv_shared = 0, n_pl = 0;
  bool double_wide = false;
  float softcap = 0.0f;
  // gemma4 26B-A4B: the global layers' KV heads (0: n_head_kv) and no attn_v there (V is the K
  // projection, attention_k_eq_v); with n_expert, every layer has the dense FFN of n_ff beside the
  // routed experts.
  int global_head_kv = 0;
  bool k_eq_v = false;
};

// Hyper-parameters as published in each model's config.json. n_vocab 0: the demo's vocabulary size.
constexpr Shape kShapes[] = {
    {"tinyllama-1.1b", "llama", 22, 2048, 32, 4, 5632, 32000, 2048, 10000.0f, 1e-5f, false, false},
    {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 4864, 151936, 32768, 1000000.0f, 1e-6f, true, true},
    {"qwen2.5-1.5b", "qwen2", 28, 1536, 12, 2, 8960, 151936, 32768, 1000000.0f, 1e-6f, true, true},
    {"smollm2-360m", "llama", 32, 960, 15, 5, 2560, 49152, 8192, 100000.0f, 1e-5f, true, false},
    // Llama 3.2 also rescales rope frequencies (rope_freqs.weight); the engine does not model that,
    // which changes no cost.
    {"llama-3.2-1b", "llama", 16, 2048, 32, 8, 8192, 128256, 131072, 500000.0f, 1e-5f, true, false},
    {"qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 3072, 151936, 40960, 1000000.0f, 1e-6f, true, false, 128, true},
    {"qwen3-1.7b", "qwen3", 28, 2048, 16, 8, 6144, 151936, 40960, 1000000.0f, 1e-6f, true, false, 128, true},
    {"gemma3-270m", "gemma3", 18, 640, 4, 1, 2048, 262144, 32768, 1000000.0f, 1e-6f, true, false, 256, true, true, 512},
    {"gemma3-1b", "gemma3", 26, 1152, 4, 1, 6912, 262144, 32768, 1000000.0f, 1e-6f, true, false, 256, true, true, 512},
    {"smollm3-3b", "smollm3", 36, 2048, 16, 4, 11008, 128256, 65536, 5000000.0f, 1e-6f, true, false},
    {"demo", "qwen2", 4, 256, 4, 2, 512, 0, 4096, 1000000.0f, 1e-6f, true, true},
    // Qwen3.5 (text_config): 3 gated delta-net layers per full-attention layer, partial rotary 0.25.
    {"qwen3.5-0.8b", "qwen35", 24, 1024, 8, 2, 3584, 248320, 262144, 10000000.0f, 1e-6f, true, false, 256, true,
     false, 0, 64, 4, 16, 16, 128, 4},
    {"qwen3.5-2b", "qwen35", 24, 2048, 8, 2, 6144, 248320, 262144, 10000000.0f, 1e-6f, true, false, 256, true,
     false, 0, 64, 4, 16, 16, 128, 4},
    // LFM2.5-1.2B (= LFM2-1.2B's shape): attention layers 2, 5, 8, 10, 12, 14, short convs elsewhere;
    // block_ff_dim 12288 auto-adjusted to 2/3 (llama.cpp's converter; its loader knows 8192 as 1.2B).
    {"lfm2.5-1.2b", "lfm2", 16, 2048, 32, 8, 8192, 65536, 128000, 1000000.0f, 1e-5f, true, false, 64, true,
     false, 0, 0, 0, 0, 0, 0, 0, (1u << 2) | (1u << 5) | (1u << 8) | (1u << 10) | (1u << 12) | (1u << 14), 3},
    // Qwen3-30B-A3B: 48 layers, 128 experts of 768, 8 per token (feed_forward_length 6144 is unused).
    {"qwen3-30b-a3b", "qwen3moe", 48, 2048, 32, 4, 6144, 151936, 40960, 1000000.0f, 1e-6f, false, false, 128, true,
     false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 128, 8, 768, 0, false},
    // LFM2-8B-A1B: 24 layers, attention at 2, 6, 10, 14, 18, 21; the first two layers dense (7168), then
    // 32 experts of 1792, 4 per token, sigmoid router with a selection bias.
    {"lfm2-8b-a1b", "lfm2moe", 24, 2048, 32, 8, 7168, 65536, 128000, 1000000.0f, 1e-5f, true, false, 64, true,
     false, 0, 0, 0, 0, 0, 0, 0, (1u << 2) | (1u << 6) | (1u << 10) | (1u << 14) | (1u << 18) | (1u << 21), 3,
     32, 4, 1792, 2, true},
    // Phi-4-mini-instruct: partial rotary 0.75 (96 of 128 dims), LongRoPE over an original 4k context.
    {.name = "phi-4-mini", .arch = "phi3", .n_layer = 32, .n_embd = 3072, .n_head = 24, .n_head_kv = 8, .n_ff = 8192,
     .n_vocab = 200064, .n_ctx = 131072, .rope_base = 10000.0f, .rms_eps = 1e-5f, .tied = true, .qkv_bias = false,
     .n_rot = 96, .fused = true, .orig_ctx = 4096},
    // Granite-4.0-H-Tiny (7B-A1B; the published GGUF's keys): every layer's FFN is 64 routed experts
    // of 512 (6 per token, softmax router) plus an ungated shared expert of 1024. Attention (NoPE) on 4
    // of 40 layers, Mamba-2 (48 heads of 64, d_state 128, 1 group) on the others.
    {.name = "granite-4.0-h-tiny", .arch = "granitehybrid", .n_layer = 40, .n_embd = 1536, .n_head = 12,
     .n_head_kv = 4, .n_ff = 512, .n_vocab = 100352, .n_ctx = 1048576, .rope_base = 10000.0f, .rms_eps = 1e-5f,
     .tied = true, .qkv_bias = false, .head_dim = 128,
     .attn_layers = (1ull << 5) | (1ull << 15) | (1ull << 25) | (1ull << 35), .n_expert = 64, .n_expert_used = 6,
     .n_ff_exp = 512, .n_ff_shexp = 1024, .m2_heads = 48, .m2_head_dim = 64, .m2_state = 128, .m2_groups = 1,
     .m2_conv = 4, .embedding_scale = 12.0f, .residual_scale = 0.22f, .logit_scale = 6.0f,
     .attention_scale = 0.0078125f},
    // Gemma 4 E2B / E4B (text_config): 4 (E4B: 5) sliding layers of head_dim 256 per global layer of 512,
    // window 512, the last 20 (18) layers sharing K/V, per-layer embeddings of 256, soft-cap 30. The
    // global layers' proportional RoPE (rope_freqs) is written as plain RoPE: it changes no cost.
    {.name = "gemma4-e2b", .arch = "gemma4", .n_layer = 35, .n_embd = 1536, .n_head = 8, .n_head_kv = 1, .n_ff = 6144,
     .n_vocab = 262144, .n_ctx = 131072, .rope_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .qkv_bias = false,
     .head_dim = 256, .qk_norm = true, .post_norms = true, .window = 512, .global_head_dim = 512, .swa_period = 5,
     .n_kv_shared = 20, .n_pl = 256, .double_wide = true, .softcap = 30.0f},
    {.name = "gemma4-e4b", .arch = "gemma4", .n_layer = 42, .n_embd = 2560, .n_head = 8, .n_head_kv = 2, .n_ff = 10240,
     .n_vocab = 262144, .n_ctx = 131072, .rope_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true, .qkv_bias = false,
     .head_dim = 256, .qk_norm = true, .post_norms = true, .window = 512, .global_head_dim = 512, .swa_period = 6,
     .n_kv_shared = 18, .n_pl = 256, .double_wide = false, .softcap = 30.0f},
    // Gemma 4 26B-A4B (text_config; the GGUF keys of the published Q4_K_M): 30 layers, 5 sliding (head_dim
    // 256, 8 KV heads, window 1024) per global one (head_dim 512, V = K), no per-layer embeddings, no KV
    // sharing; every layer a dense GELU FFN of 2112 beside 128 experts of 704, 8 per token. The global
    // layers' KV heads (2) are inferred from the published KV-cache size (~210 KiB per token in BF16: 25
    // sliding layers x 8 x 256 x K,V + 5 global x 2 x 512 x K only).
    {.name = "gemma4-26b-a4b", .arch = "gemma4", .n_layer = 30, .n_embd = 2816, .n_head = 16, .n_head_kv = 8,
     .n_ff = 2112, .n_vocab = 262144, .n_ctx = 262144, .rope_base = 1000000.0f, .rms_eps = 1e-6f, .tied = true,
     .qkv_bias = false, .head_dim = 256, .qk_norm = true, .post_norms = true, .window = 1024, .n_expert = 128,
     .n_expert_used = 8, .n_ff_exp = 704, .global_head_dim = 512, .swa_period = 6, .n_kv_shared = 0, .n_pl = 0,
     .double_wide = false, .softcap = 30.0f, .global_head_kv = 2, .k_eq_v = true},
};

// ---- type mixes (llama.cpp's llama_tensor_get_type rules for these recipes) -------------------

enum class Mix { Q4_K_M, Q8_0, Q4_0, F16, F32 };
enum class Kind { TokEmbd, Output, AttnQ, AttnK, AttnV, AttnO, AttnQkv, FfnGate, FfnUp, FfnDown, Other };

bool parse_mix(std::string_view s, Mix& m) {
  if (s == "q4_k_m" || s == "Q4_K_M") m = Mix::Q4_K_M;
  else if (s == "q8_0" || s == "Q8_0") m = Mix::Q8_0;
  else if (s == "q4_0" || s == "Q4_0") m = Mix::Q4_0;
  else if (s == "f16" || s == "F16") m = Mix::F16;
  else if (s == "f32" || s == "F32") m = Mix::F32;
  else return false;
  return true;
}

uint32_t file_type_id(Mix m) {  // llama_ftype
  switch (m) {
    case Mix::F32: return 0;
    case Mix::F16: return 1;
    case Mix::Q4_0: return 2;
    case Mix::Q8_0: return 7;
    case Mix::Q4_K_M: return 15;
  }
  return 0;
}

// llama.cpp gives these layers' attn_v and ffn_down more bits: the first and last eighth, and
// every third layer in between.
bool use_more_bits(int i_layer, int n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

GgmlType pick_type(Mix mix, Kind kind, int layer, int n_layer, int64_t cols, bool tied) {
  if (mix == Mix::F32) return GgmlType::F32;
  if (mix == Mix::F16) return GgmlType::F16;
  if (mix == Mix::Q8_0) return GgmlType::Q8_0;
  const GgmlType base = mix == Mix::Q4_0 ? GgmlType::Q4_0 : GgmlType::Q4_K;
  GgmlType t = base;
  // A tied token_embd is quantized as the output projection it also is.
  const bool is_output = kind == Kind::Output || (kind == Kind::TokEmbd && tied);
  if (is_output) {
    // Output rows that K-quants cannot hold go straight to Q8_0 (llama.cpp does the same).
    return cols % 256 != 0 ? GgmlType::Q8_0 : GgmlType::Q6_K;
  }
  if (mix == Mix::Q4_K_M && (kind == Kind::AttnV || kind == Kind::FfnDown) && use_more_bits(layer, n_layer))
    t = GgmlType::Q6_K;
  if (mix == Mix::Q4_K_M && kind == Kind::AttnQkv) t = GgmlType::Q5_K;  // llama.cpp: fused qkv gets Q5_K
  // Rows that are not a multiple of 256 cannot be K-quants: llama.cpp's fallbacks.
  if (cols % 256 != 0) {
    if (t == GgmlType::Q4_K) t = GgmlType::Q5_0;
    else if (t == GgmlType::Q6_K) t = GgmlType::Q8_0;
    else if (t == GgmlType::Q5_K) t = GgmlType::Q5_1;
  }
  return t;
}

// ---- random numbers (deterministic for a given --seed) -----------------------------------------

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  float normal() {  // Box-Muller; one value per call is plenty fast here
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

uint64_t hash_name(std::string_view s) {  // FNV-1a: a per-tensor stream independent of tensor order
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// ---- byte-level BPE vocabulary ------------------------------------------------------------------

// GPT-2's reversible byte -> printable code point map (printable Latin-1 bytes map to themselves,
// the rest to U+0100.. in byte order), as UTF-8 strings.
std::vector<std::string> byte_to_unicode() {
  std::vector<int> cp(256, -1);
  for (int b = 0; b < 256; ++b)
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) cp[b] = b;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (cp[b] < 0) cp[b] = 256 + n++;
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) {
    const int c = cp[b];
    std::string s;
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
    out[b] = s;
  }
  return out;
}

// Training text for the demo merges: common English, JSON and tool-call text, so that prompts the
// provider sends (chat markup, JSON schemas, tool calls) tokenize to a sensible number of tokens.
constexpr const char* kBpeCorpus = R"CORPUS(
The quick brown fox jumps over the lazy dog. This is a small model that was made for testing and it
is not trained, so the text it writes does not mean anything. You are a helpful assistant. Please
answer the question of the user in a short and clear way. What is the weather like in Paris today?
I would like to know the time and the date, and the name of the city where you are. Can you help me
with this? Yes, I can help you with that. Here is the answer to your question: the weather in the
city is sunny with a high of twenty degrees. Thank you for your help! You are welcome. Let me know if
there is anything else that I can do for you. The function returns the result of the search as a
list of items, each with a name, a description and a value. When the user asks for information
about a topic, call the search function with the query as the argument. If the tool call fails, tell
the user what went wrong and try again. The system message describes the tools that are available.
Every message has a role and a content. The role of a message is one of system, user, assistant or
tool. The assistant should think about the problem first and then give the final answer. There are
many ways to write a program that reads a file, counts the words in it and prints the result. Open
the file, read each line, split the line into words and add one to the count of each word. The
number of people in the world is more than eight billion. Time is money, and money is time. We have
been working on this project for a long time and we are happy with the results so far. They said
that it would rain today, but the sun is out and the sky is blue. She went to the store to buy some
bread, milk, eggs and cheese. He asked her if she wanted to come with him to the park after school.
Our team will meet at ten in the morning to talk about the plan for the next week. Your order has
been shipped and should arrive within three to five business days. Please check your email for the
tracking number. The first step is to install the package, then run the command to start the server.
{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}
{"name": "search", "arguments": {"query": "latest news", "max_results": 5}}
{"name": "read_file", "arguments": {"path": "/home/user/notes.txt"}}
{"name": "write_file", "arguments": {"path": "/tmp/output.json", "content": "hello world"}}
{"name": "send_message", "arguments": {"channel": "general", "text": "Hello, world!"}}
{"type": "function", "function": {"name": "get_time", "description": "Get the current time in a given time zone", "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "description": "The time zone, e.g. Europe/Paris"}}, "required": ["timezone"]}}}
{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}, "email": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": {"type": "string"}}, "active": {"type": "boolean"}}, "required": ["name", "age"], "additionalProperties": false}
{"id": 1, "title": "First item", "done": true, "value": 3.14, "list": [1, 2, 3], "data": null}
{"id": 2, "title": "Second item", "done": false, "value": 2.71, "list": [4, 5, 6], "data": {"key": "value"}}
<tool_call>
{"name": "get_weather", "arguments": {"location": "London"}}
</tool_call>
<tool_response>
{"temperature": 18, "condition": "cloudy", "humidity": 72}
</tool_response>
<tools>
</tools>
# Tools
You may call one or more functions to assist with the user query.
You are provided with function signatures within XML tags.
For each function call, return a json object with function name and arguments.
def main():
    print("hello world")
    return 0
for i in range(10):
    if i % 2 == 0:
        print(i)
)CORPUS";

// Frequent words, added a few times each so that they become single tokens.
constexpr const char* kCommonWords[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with",
    "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what",
    "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do",
    "how", "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some",
    "her", "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see",
    "number", "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "its",
    "now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part", "name", "type", "string",
    "object", "array", "number", "integer", "boolean", "null", "true", "false", "properties", "required",
    "description", "function", "arguments", "parameters", "items", "value", "key", "content", "role", "user",
    "assistant", "system", "tool", "message", "result", "error", "query", "file", "path", "data", "list",
    "help", "answer", "question", "please", "thank", "weather", "location", "city", "today", "search",
};

bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_nl(unsigned char c) { return c == '\n' || c == '\r'; }

// An ASCII approximation of the Qwen2 pre-tokenizer regex (letters with one leading non-letter,
// single digits, punctuation runs with an optional leading space, whitespace runs). The merges
// only need to be good on the pieces the real pre-tokenizer produces, not identical.
std::vector<std::string> pre_split(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = s.size();
  auto at = [&](size_t k) -> unsigned char { return k < n ? static_cast<unsigned char>(s[k]) : 0; };
  while (i < n) {
    const size_t start = i;
    const unsigned char c = at(i);
    if (is_alpha(c) || (!is_nl(c) && !is_digit(c) && i + 1 < n && is_alpha(at(i + 1)))) {
      ++i;
      while (i < n && is_alpha(at(i))) ++i;
    } else if (is_digit(c)) {
      ++i;
    } else if (!is_space(c) || (c == ' ' && i + 1 < n && !is_space(at(i + 1)) && !is_alpha(at(i + 1)) && !is_digit(at(i + 1)))) {
      if (c == ' ') ++i;
      while (i < n && !is_space(at(i)) && !is_alpha(at(i)) && !is_digit(at(i))) ++i;
      while (i < n && is_nl(at(i))) ++i;
    } else {
      size_t j = i;
      while (j < n && is_space(at(j))) ++j;
      size_t last_nl = std::string_view::npos;
      for (size_t k = i; k < j; ++k)
        if (is_nl(at(k))) last_nl = k;
      if (last_nl != std::string_view::npos) i = last_nl + 1;
      else if (j < n && j - i > 1) i = j - 1;  // leave one space to lead the next word
      else i = j;
    }
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  int32_t bos = -1, eos = -1, pad = -1;
};

// 256 byte tokens, then `n_merges` merges learned on the corpus, then the special tokens, then
// (if n_vocab > that) filler tokens of random letters up to n_vocab.
Vocab make_bpe_vocab(int n_merges, int n_vocab, uint64_t seed) {
  const std::vector<std::string> b2u = byte_to_unicode();
  Vocab v;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(b2u[b]);
    v.types.push_back(1);  // NORMAL: byte-level BPE has no separate byte-token type
  }
  // Words (as sequences of mapped symbols) with their counts.
  std::map<std::string, int> word_count;
  for (const std::string& w : pre_split(kBpeCorpus)) ++word_count[w];
  for (const char* w : kCommonWords) word_count[std::string(" ") + w] += 3;
  struct Word {
    std::vector<std::string> sym;
    int count;
  };
  std::vector<Word> words;
  for (const auto& [w, cnt] : word_count) {
    Word x{{}, cnt};
    for (unsigned char c : w) x.sym.push_back(b2u[c]);
    words.push_back(std::move(x));
  }
  std::set<std::string> known(v.tokens.begin(), v.tokens.end());
  for (int m = 0; m < n_merges; ++m) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const Word& w : words)
      for (size_t k = 0; k + 1 < w.sym.size(); ++k) pairs[{w.sym[k], w.sym[k + 1]}] += w.count;
    const std::pair<std::string, std::string>* best = nullptr;
    int best_n = 1;  // a pair seen once teaches nothing
    for (const auto& [p, cnt] : pairs)  // std::map order makes ties deterministic
      if (cnt > best_n) {
        best_n = cnt;
        best = &p;
      }
    if (!best) break;
    const std::string a = best->first, b = best->second, ab = a + b;
    v.merges.push_back(a + " " + b);
    if (known.insert(ab).second) {
      v.tokens.push_back(ab);
      v.types.push_back(1);
    }
    for (Word& w : words) {
      std::vector<std::string> out;
      for (size_t k = 0; k < w.sym.size(); ++k) {
        if (k + 1 < w.sym.size() && w.sym[k] == a && w.sym[k + 1] == b) {
          out.push_back(ab);
          ++k;
        } else {
          out.push_back(w.sym[k]);
        }
      }
      w.sym = std::move(out);
    }
  }
  auto add_special = [&](const char* text, int32_t type) {
    v.tokens.push_back(text);
    v.types.push_back(type);
    known.insert(text);
    return static_cast<int32_t>(v.tokens.size() - 1);
  };
  const int32_t endoftext = add_special("<|endoftext|>", 3);
  add_special("<|im_start|>", 3);
  const int32_t im_end = add_special("<|im_end|>", 3);
  add_special("<tool_call>", 4);
  add_special("</tool_call>", 4);
  v.bos = endoftext;  // as in Qwen2.5: bos/pad <|endoftext|>, eos <|im_end|>, add_bos false
  v.pad = endoftext;
  v.eos = im_end;
  // Fillers: letter strings, half with the mapped leading space "Ġ", unique.
  Rng rng(seed ^ 0x5eedf111ull);
  const std::string space = b2u[' '];
  while (static_cast<int>(v.tokens.size()) < n_vocab) {
    std::string t = (rng.next() & 1) ? space : std::string();
    const int len = 2 + static_cast<int>(rng.next() % 6);
    for (int k = 0; k < len; ++k) t += static_cast<char>('a' + rng.next() % 26);
    if (!known.insert(t).second) continue;
    v.tokens.push_back(t);
    v.types.push_back(1);
  }
  return v;
}

// ---- tensor data ---------------------------------------------------------------------------------

// Writes a [rows x cols] matrix of `type` whose values are ~N(0, sigma^2): a pool of 1024 quantized
// units (one block, or 32 values for float types) is made from random normals, and every unit of
// the output is a randomly chosen pool unit. Rows are therefore distinct and every block is one a
// real quantizer produced, at the cost of 1 MB of RAM instead of the whole tensor.
Status write_matrix(GgufWriter& w, GgmlType type, int64_t rows, int64_t cols, float sigma, Rng& rng) {
  const GgmlTypeTraits* tr = ggml_type_traits(type);
  // Float types have 1-element blocks; copy them 32 at a time when the row allows it.
  const int64_t unit = tr->block_elems > 1 ? tr->block_elems : (cols % 32 == 0 ? 32 : 1);
  const size_t unit_bytes = row_bytes(type, unit);
  constexpr int kPoolUnits = 1024;
  std::vector<float> src(static_cast<size_t>(kPoolUnits * unit));
  for (float& x : src) x = sigma * rng.normal();
  std::vector<uint8_t> pool(unit_bytes * kPoolUnits);
  quantize_row_weights_ref(type, src.data(), pool.data(), kPoolUnits * unit);

  const int64_t units_per_row = cols / unit;
  const size_t row_size = unit_bytes * static_cast<size_t>(units_per_row);
  const int64_t rows_per_chunk = std::max<int64_t>(1, (8 << 20) / static_cast<int64_t>(row_size));
  std::vector<uint8_t> chunk(row_size * static_cast<size_t>(std::min(rows, rows_per_chunk)));
  for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
    const int64_t nr = std::min(rows_per_chunk, rows - r0);
    uint8_t* p = chunk.data();
    for (int64_t u = 0; u < nr * units_per_row; ++u) {
      std::memcpy(p, pool.data() + unit_bytes * (rng.next() % kPoolUnits), unit_bytes);
      p += unit_bytes;
    }
    if (Status s = w.write_tensor_data(chunk.data(), row_size * static_cast<size_t>(nr)); !s) return s;
  }
  return Ok{};
}

Status write_vector(GgufWriter& w, int64_t n, float mean, float sigma, Rng& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = mean + sigma * rng.normal();
  return w.write_tensor_data(v.data(), v.size() * sizeof(float));
}

// ---- command line ----------------------------------------------------------------------------------

void usage(FILE* out) {
  std::fprintf(out,
               "usage: picolm-synth --shape NAME --type MIX -o OUT.gguf [options]\n"
               "  --shape NAME        tinyllama-1.1b | qwen2.5-0.5b | qwen2.5-1.5b | smollm2-360m | llama-3.2-1b |\n"
               "                      qwen3-0.6b | qwen3-1.7b | gemma3-270m | gemma3-1b | smollm3-3b | qwen3.5-0.8b |\n"
               "                      qwen3.5-2b | lfm2.5-1.2b | qwen3-30b-a3b | lfm2-8b-a1b | phi-4-mini |\n"
               "                      granite-4.0-h-tiny | gemma4-e2b | gemma4-e4b | gemma4-26b-a4b | demo\n"
               "  --type MIX          q4_k_m | q8_0 | q4_0 | f16 | f32 (llama.cpp's per-tensor rules)\n"
               "  -o, --output FILE   output GGUF (written to FILE.tmp, then renamed)\n"
               "  --vocab-from FILE   copy all tokenizer.* keys from another GGUF (n_vocab must be >= its vocabulary)\n"
               "  --seed S            random seed (default 1)\n"
               "  --ctx N             context_length to record (default: the model's)\n"
               "  --layers N          override the number of layers (smaller test models)\n"
               "  --merges N          demo vocabulary: number of BPE merges to learn (default 480)\n"
               "  --vocab N           override n_vocab (a smaller embedding for tests; >= the vocabulary's tokens)\n"
               "  --window N          override the sliding window of gemma3 / gemma4 shapes\n"
               "  --experts N         override the number of routed experts of MoE shapes (smaller test models;\n"
               "                      at least the experts used per token)\n"
               "  --arch NAME         write this general.architecture instead of the shape's (same tensors and\n"
               "                      seed: compares architectures on identical weights, e.g. smollm3 vs llama)\n");
}

struct Args {
  std::string shape, type = "q4_k_m", output, vocab_from, arch;
  uint64_t seed = 1;
  int ctx = 0, layers = 0, merges = 480, vocab = 0, window = 0, experts = 0;
};

bool parse_int(const char* s, long long& out) {
  char* end = nullptr;
  out = std::strtoll(s, &end, 10);
  return end && end != s && *end == '\0';
}

int run(const Args& a) {
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes)
    if (a.shape == s.name) shape = &s;
  if (!shape) {
    std::fprintf(stderr, "picolm-synth: unknown shape '%s'\n", a.shape.c_str());
    usage(stderr);
    return 2;
  }
  Mix mix;
  if (!parse_mix(a.type, mix)) {
    std::fprintf(stderr, "picolm-synth: unknown type mix '%s'\n", a.type.c_str());
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string arch = a.arch.empty() ? shape->arch : a.arch;
  const int n_layer = a.layers > 0 ? a.layers : shape->n_layer;
  const int E = shape->n_embd, n_ff = shape->n_ff;
  const int head_dim = shape->head_dim > 0 ? shape->head_dim : E / shape->n_head;
  const int q_dim = shape->n_head * head_dim, kv_dim = shape->n_head_kv * head_dim;
  const int n_ctx = a.ctx > 0 ? a.ctx : shape->n_ctx;
  const int n_expert = a.experts > 0 ? a.experts : shape->n_expert;
  if (shape->n_expert > 0 && n_expert < shape->n_expert_used) {
    std::fprintf(stderr, "picolm-synth: --experts %d is fewer than the %d used per token\n", n_expert, shape->n_expert_used);
    return 2;
  }

  GgufWriter w;
  w.set_string("general.architecture", arch);
  w.set_string("general.name", std::string("picolm-synth ") + shape->name + " " + a.type);
  w.set_u32("general.file_type", file_type_id(mix));
  w.set_u32("general.quantization_version", 2);
  w.set_u32(arch + ".context_length", static_cast<uint32_t>(n_ctx));
  w.set_u32(arch + ".embedding_length", static_cast<uint32_t>(E));
  w.set_u32(arch + ".block_count", static_cast<uint32_t>(n_layer));
  w.set_u32(arch + ".feed_forward_length", static_cast<uint32_t>(n_ff));
  w.set_u32(arch + ".attention.head_count", static_cast<uint32_t>(shape->n_head));
  const bool granite = std::string_view(shape->arch) == "granitehybrid";
  const bool lfm2 = shape->attn_layers != 0 && !granite, qwen35 = shape->attn_interval > 0;
  auto is_attention = [&](int l) {
    if (lfm2 || granite) return ((shape->attn_layers >> l) & 1u) != 0;
    if (qwen35) return (l + 1) % shape->attn_interval == 0;
    return true;
  };
  if (lfm2) {  // per-layer array, 0 on the conv layers
    std::vector<int32_t> kv(static_cast<size_t>(n_layer));
    for (int l = 0; l < n_layer; ++l) kv[size_t(l)] = is_attention(l) ? shape->n_head_kv : 0;
    w.set_i32_array(arch + ".attention.head_count_kv", kv);
    w.set_u32(arch + ".shortconv.l_cache", static_cast<uint32_t>(shape->sc_taps));
  } else if (granite) {  // per-layer array, 0 on the Mamba-2 layers
    std::vector<int32_t> kv(static_cast<size_t>(n_layer));
    for (int l = 0; l < n_layer; ++l) kv[size_t(l)] = is_attention(l) ? shape->n_head_kv : 0;
    w.set_i32_array(arch + ".attention.head_count_kv", kv);
    w.set_u32(arch + ".ssm.conv_kernel", static_cast<uint32_t>(shape->m2_conv));
    w.set_u32(arch + ".ssm.state_size", static_cast<uint32_t>(shape->m2_state));
    w.set_u32(arch + ".ssm.group_count", static_cast<uint32_t>(shape->m2_groups));
    w.set_u32(arch + ".ssm.inner_size", static_cast<uint32_t>(shape->m2_heads * shape->m2_head_dim));
    w.set_u32(arch + ".ssm.time_step_rank", static_cast<uint32_t>(shape->m2_heads));
    w.set_f32(arch + ".embedding_scale", shape->embedding_scale);
    w.set_f32(arch + ".residual_scale", shape->residual_scale);
    w.set_f32(arch + ".logit_scale", shape->logit_scale);
    w.set_f32(arch + ".attention.scale", shape->attention_scale);
    w.set_bool(arch + ".rope.scaling.finetuned", false);  // Granite-4.0-H: no positional encoding
  } else {
    w.set_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(shape->n_head_kv));
  }
  if (qwen35) {
    w.set_u32(arch + ".full_attention_interval", static_cast<uint32_t>(shape->attn_interval));
    w.set_u32(arch + ".ssm.conv_kernel", static_cast<uint32_t>(shape->dn_conv));
    w.set_u32(arch + ".ssm.state_size", static_cast<uint32_t>(shape->dn_head_dim));
    w.set_u32(arch + ".ssm.group_count", static_cast<uint32_t>(shape->dn_k_heads));
    w.set_u32(arch + ".ssm.time_step_rank", static_cast<uint32_t>(shape->dn_v_heads));
    w.set_u32(arch + ".ssm.inner_size", static_cast<uint32_t>(shape->dn_v_heads * shape->dn_head_dim));
    // IMROPE sections of the rotated pairs (text gives them all the same position; llama.cpp needs
    // the key): Qwen3.5's mrope_section [11, 11, 10] for 64 rotated dims, scaled to n_rot.
    const int pairs = shape->n_rot / 2, t = pairs * 11 / 32, h = pairs * 11 / 32;
    const std::vector<int32_t> sections = {t, h, pairs - t - h, 0};
    w.set_i32_array(arch + ".rope.dimension_sections", sections);
  }
  if (shape->n_expert > 0) {
    w.set_u32(arch + ".expert_count", static_cast<uint32_t>(n_expert));
    w.set_u32(arch + ".expert_used_count", static_cast<uint32_t>(shape->n_expert_used));
    if (granite)
      w.set_u32(arch + ".expert_shared_feed_forward_length", static_cast<uint32_t>(shape->n_ff_shexp));
    else
      w.set_u32(arch + ".expert_feed_forward_length", static_cast<uint32_t>(shape->n_ff_exp));
    if (lfm2) {
      w.set_u32(arch + ".leading_dense_block_count", static_cast<uint32_t>(shape->n_dense_lead));
      w.set_u32(arch + ".expert_gating_func", shape->sigmoid_gating ? 2u : 1u);
    }
  }
  if (shape->fused) {  // phi3 LongRoPE: attn_factor sqrt(1 + ln(scale) / ln(original context))
    const double scale = double(n_ctx) / shape->orig_ctx;
    w.set_u32(arch + ".rope.scaling.original_context_length", static_cast<uint32_t>(shape->orig_ctx));
    w.set_f32(arch + ".rope.scaling.attn_factor",
              scale > 1.0 ? float(std::sqrt(1.0 + std::log(scale) / std::log(double(shape->orig_ctx)))) : 1.0f);
    w.set_u32(arch + ".attention.sliding_window", 0);
  }
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", shape->rms_eps);
  w.set_f32(arch + ".rope.freq_base", shape->rope_base);
  w.set_u32(arch + ".rope.dimension_count", static_cast<uint32_t>(shape->n_rot > 0 ? shape->n_rot : head_dim));
  if (shape->head_dim > 0) {
    w.set_u32(arch + ".attention.key_length", static_cast<uint32_t>(head_dim));
    w.set_u32(arch + ".attention.value_length", static_cast<uint32_t>(head_dim));
  }
  if (shape->window > 0)
    w.set_u32(arch + ".attention.sliding_window", static_cast<uint32_t>(a.window > 0 ? a.window : shape->window));
  // gemma4: layer l is global when l % swa_period == swa_period - 1. With --layers the KV-sharing
  // part keeps its share, and starts after a global layer (llama.cpp's sources: the last sliding
  // and the last global layer before it).
  const bool gemma4 = shape->swa_period > 0;
  // The last layer is global too (true of every published Gemma 4: 35, 42, 30 and 60 layers end with
  // one), so a shape cut short by --layers keeps a global layer.
  auto g4_global = [&](int l) {
    return gemma4 && (l % shape->swa_period == shape->swa_period - 1 || l == n_layer - 1);
  };
  int g4_first_shared = n_layer;
  if (gemma4) {
    const int P = shape->swa_period;
    const int own = n_layer - n_layer * shape->n_kv_shared / shape->n_layer;
    g4_first_shared = std::min(n_layer, std::max(P, (own + P - 1) / P * P));
    std::vector<int32_t> ff(static_cast<size_t>(n_layer)), kv(static_cast<size_t>(n_layer));
    std::vector<uint8_t> swa(static_cast<size_t>(n_layer));
    for (int l = 0; l < n_layer; ++l) {
      ff[size_t(l)] = shape->double_wide && l >= g4_first_shared ? 2 * n_ff : n_ff;
      kv[size_t(l)] = g4_global(l) && shape->global_head_kv > 0 ? shape->global_head_kv : shape->n_head_kv;
      swa[size_t(l)] = g4_global(l) ? 0 : 1;
    }
    w.set_i32_array(arch + ".feed_forward_length", ff);
    w.set_i32_array(arch + ".attention.head_count_kv", kv);
    w.set_array(arch + ".attention.sliding_window_pattern", GgufValueType::BOOL, swa.data(), swa.size());
    w.set_u32(arch + ".attention.shared_kv_layers", static_cast<uint32_t>(n_layer - g4_first_shared));
    w.set_u32(arch + ".attention.key_length", static_cast<uint32_t>(shape->global_head_dim));
    w.set_u32(arch + ".attention.value_length", static_cast<uint32_t>(shape->global_head_dim));
    w.set_u32(arch + ".attention.key_length_swa", static_cast<uint32_t>(head_dim));
    w.set_u32(arch + ".attention.value_length_swa", static_cast<uint32_t>(head_dim));
    w.set_u32(arch + ".rope.dimension_count", static_cast<uint32_t>(shape->global_head_dim));
    w.set_u32(arch + ".rope.dimension_count_swa", static_cast<uint32_t>(head_dim));
    w.set_f32(arch + ".rope.freq_base_swa", 10000.0f);
    w.set_u32(arch + ".embedding_length_per_layer_input", static_cast<uint32_t>(shape->n_pl));
    w.set_f32(arch + ".final_logit_softcapping", shape->softcap);
  }

  // Tokenizer: copied, or a synthetic byte-level BPE vocabulary.
  int n_vocab = a.vocab > 0 ? a.vocab : shape->n_vocab;
  std::unique_ptr<GgufFile> vocab_file;
  if (!a.vocab_from.empty()) {
    auto vf = GgufFile::open(a.vocab_from);
    if (!vf) {
      std::fprintf(stderr, "picolm-synth: --vocab-from: %s\n", vf.error().c_str());
      return 1;
    }
    vocab_file = std::move(vf.value());
    const size_t n_tok = vocab_file->get_string_array("tokenizer.ggml.tokens").size();
    if (n_tok == 0) {
      std::fprintf(stderr, "picolm-synth: %s has no tokenizer.ggml.tokens\n", a.vocab_from.c_str());
      return 1;
    }
    if (n_vocab == 0) n_vocab = static_cast<int>(n_tok);
    if (static_cast<size_t>(n_vocab) < n_tok) {
      std::fprintf(stderr, "picolm-synth: shape %s has n_vocab %d < %zu tokens in %s\n", shape->name, n_vocab, n_tok,
                   a.vocab_from.c_str());
      return 1;
    }
    for (const auto& [key, val] : vocab_file->metadata())
      if (key.rfind("tokenizer.", 0) == 0) w.set_value(key, val);
  } else {
    Vocab v = make_bpe_vocab(a.merges, n_vocab, a.seed);
    if (n_vocab == 0) n_vocab = static_cast<int>(v.tokens.size());
    if (static_cast<int>(v.tokens.size()) > n_vocab) {
      std::fprintf(stderr, "picolm-synth: the synthetic vocabulary (%zu tokens) exceeds n_vocab %d\n", v.tokens.size(),
                   n_vocab);
      return 1;
    }
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_string_array("tokenizer.ggml.tokens", std::span<const std::string>(v.tokens));
    w.set_i32_array("tokenizer.ggml.token_type", v.types);
    w.set_string_array("tokenizer.ggml.merges", std::span<const std::string>(v.merges));
    w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos));
    w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos));
    w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.pad));
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    w.set_string("tokenizer.chat_template", kQwen25Template);
  }
  w.set_u32(arch + ".vocab_size", static_cast<uint32_t>(n_vocab));

  // Tensor plan, in llama.cpp's file order.
  struct Plan {
    std::string name;
    GgmlType type;
    int64_t cols, rows;  // rows == 0: a 1-D F32 vector of cols
    float mean, sigma;
    int64_t n_mat = 0;   // > 0: n_mat stacked rows x cols matrices (experts), ne {cols, rows, n_mat}
    int64_t vec_rows = 0;  // a vector of cols * vec_rows values written as ne [cols, vec_rows] (Mamba-2's ssm_a)
  };
  std::vector<Plan> plan;
  const float inv_e = 1.0f / std::sqrt(static_cast<float>(E));
  auto mat = [&](std::string name, Kind kind, int layer, int64_t rows, int64_t cols, float sigma) {
    plan.push_back({std::move(name), pick_type(mix, kind, layer, n_layer, cols, shape->tied), cols, rows, 0.0f, sigma});
  };
  auto vec = [&](std::string name, int64_t n, float mean, float sigma) {
    plan.push_back({std::move(name), GgmlType::F32, n, 0, mean, sigma});
  };
  // Scales keep activations sane: N(0, 1/fan_in) projections; a tied embedding doubles as the
  // output head, where 2/sqrt(E) gives logits of standard deviation ~2.
  // A layer's FFN: dense, or the router and the stacked experts (types by llama.cpp's rules for
  // ffn_{gate,up,down}; the router ffn_gate_inp stays F32, as llama-quantize keeps it).
  auto ffn = [&](const std::string& p, int l) {
    if (shape->n_expert == 0 || l < shape->n_dense_lead) {
      mat(p + "ffn_gate.weight", Kind::FfnGate, l, n_ff, E, inv_e);
      mat(p + "ffn_up.weight", Kind::FfnUp, l, n_ff, E, inv_e);
      mat(p + "ffn_down.weight", Kind::FfnDown, l, E, n_ff, 1.0f / std::sqrt(static_cast<float>(n_ff)));
      return;
    }
    const int NE = n_expert, FE = shape->n_ff_exp;
    plan.push_back({p + "ffn_gate_inp.weight", GgmlType::F32, E, NE, 0.0f, inv_e});
    auto experts = [&](std::string name, Kind kind, int64_t rows, int64_t cols, float sigma) {
      plan.push_back({std::move(name), pick_type(mix, kind, l, n_layer, cols, shape->tied), cols, rows, 0.0f, sigma, NE});
    };
    experts(p + "ffn_gate_exps.weight", Kind::FfnGate, FE, E, inv_e);
    experts(p + "ffn_up_exps.weight", Kind::FfnUp, FE, E, inv_e);
    experts(p + "ffn_down_exps.weight", Kind::FfnDown, E, FE, 1.0f / std::sqrt(static_cast<float>(FE)));
    if (shape->sigmoid_gating) vec(p + "exp_probs_b.bias", NE, 0.0f, 0.05f);
  };
  // Granite divides the logits by logit_scale: its tied embedding is scaled up by as much (the
  // embeddings are then x embedding_scale, which the first norm absorbs).
  const float emb_sigma = shape->tied ? 2.0f * inv_e * (granite ? shape->logit_scale : 1.0f) : 1.0f;
  mat("token_embd.weight", Kind::TokEmbd, 0, n_vocab, E, emb_sigma);
  if (shape->fused) {  // LongRoPE factors (llama.cpp's file order puts them first)
    vec("rope_factors_long.weight", shape->n_rot / 2, 8.0f, 1.0f);  // > 0 (the loader refuses others)
    vec("rope_factors_short.weight", shape->n_rot / 2, 1.0f, 0.05f);
  }
  const int64_t n_pl_all = int64_t(n_layer) * shape->n_pl;
  if (gemma4) {
    vec("rope_freqs.weight", shape->global_head_dim / 2, 1.0f, 0.0f);
    if (shape->n_pl > 0) {
      mat("per_layer_token_embd.weight", Kind::Other, 0, n_vocab, n_pl_all, 1.0f / std::sqrt(float(shape->n_pl)));
      // llama.cpp's quantize keeps per_layer_model_proj as converted (BF16/F16 in the published files).
      plan.push_back({"per_layer_model_proj.weight", mix == Mix::F32 ? GgmlType::F32 : GgmlType::F16, E, n_pl_all,
                      0.0f, inv_e});
      vec("per_layer_proj_norm.weight", shape->n_pl, 1.0f, 0.05f);
    }
  }
  for (int l = 0; l < n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", E, 1.0f, 0.05f);
    if (shape->fused) {  // phi3
      mat(p + "attn_qkv.weight", Kind::AttnQkv, l, q_dim + 2 * int64_t(kv_dim), E, inv_e);
      mat(p + "attn_output.weight", Kind::AttnO, l, E, q_dim, 1.0f / std::sqrt(static_cast<float>(q_dim)));
      vec(p + "ffn_norm.weight", E, 1.0f, 0.05f);
      mat(p + "ffn_up.weight", Kind::FfnUp, l, 2 * int64_t(n_ff), E, inv_e);
      mat(p + "ffn_down.weight", Kind::FfnDown, l, E, n_ff, 1.0f / std::sqrt(static_cast<float>(n_ff)));
      continue;
    }
    if (granite) {
      const float rs = 1.0f / shape->residual_scale;  // sublayer outputs are scaled by residual_scale
      if (is_attention(l)) {
        mat(p + "attn_q.weight", Kind::AttnQ, l, q_dim, E, inv_e);
        mat(p + "attn_k.weight", Kind::AttnK, l, kv_dim, E, inv_e);
        mat(p + "attn_v.weight", Kind::AttnV, l, kv_dim, E, inv_e);
        mat(p + "attn_output.weight", Kind::AttnO, l, E, q_dim, rs / std::sqrt(static_cast<float>(q_dim)));
      } else {
        const int64_t d_inner = int64_t(shape->m2_heads) * shape->m2_head_dim;
        const int64_t channels = d_inner + 2 * int64_t(shape->m2_groups) * shape->m2_state;
        mat(p + "ssm_in.weight", Kind::Other, l, d_inner + channels + shape->m2_heads, E, inv_e);
        plan.push_back({p + "ssm_conv1d.weight", GgmlType::F32, shape->m2_conv, channels, 0.0f, 0.5f});
        vec(p + "ssm_conv1d.bias", channels, 0.0f, 0.1f);
        vec(p + "ssm_dt.bias", shape->m2_heads, 0.0f, 0.5f);
        plan.push_back({p + "ssm_a", GgmlType::F32, 1, 0, -4.0f, 0.0f, 0, shape->m2_heads});  // -exp(A_log) < 0
        plan.push_back({p + "ssm_d", GgmlType::F32, 1, 0, 1.0f, 0.1f, 0, shape->m2_heads});
        plan.push_back({p + "ssm_norm.weight", GgmlType::F32, d_inner / shape->m2_groups, 0, 1.0f, 0.05f, 0,
                        shape->m2_groups});
        mat(p + "ssm_out.weight", Kind::AttnO, l, E, d_inner, rs / std::sqrt(static_cast<float>(d_inner)));
      }
      vec(p + "ffn_norm.weight", E, 1.0f, 0.05f);
      if (shape->n_expert > 0) {  // the routed experts, then the shared one
        ffn(p, l);
        const int64_t SF = shape->n_ff_shexp;
        mat(p + "ffn_gate_shexp.weight", Kind::FfnGate, l, SF, E, inv_e);
        mat(p + "ffn_up_shexp.weight", Kind::FfnUp, l, SF, E, inv_e);
        mat(p + "ffn_down_shexp.weight", Kind::FfnDown, l, E, SF, rs / std::sqrt(static_cast<float>(SF)));
        continue;
      }
      mat(p + "ffn_gate.weight", Kind::FfnGate, l, n_ff, E, inv_e);
      mat(p + "ffn_up.weight", Kind::FfnUp, l, n_ff, E, inv_e);
      mat(p + "ffn_down.weight", Kind::FfnDown, l, E, n_ff, rs / std::sqrt(static_cast<float>(n_ff)));
      continue;
    }
    if (gemma4) {
      const int hd = g4_global(l) ? shape->global_head_dim : head_dim;
      const int kv_heads = g4_global(l) && shape->global_head_kv > 0 ? shape->global_head_kv : shape->n_head_kv;
      const int qd = shape->n_head * hd, kvd = kv_heads * hd;
      const int ff = shape->double_wide && l >= g4_first_shared ? 2 * n_ff : n_ff;
      mat(p + "attn_q.weight", Kind::AttnQ, l, qd, E, 1.4f * inv_e);
      vec(p + "attn_q_norm.weight", hd, 1.0f, 0.05f);
      if (l < g4_first_shared) {  // the KV-sharing layers have no K/V projections
        mat(p + "attn_k.weight", Kind::AttnK, l, kvd, E, 1.4f * inv_e);
        if (!(shape->k_eq_v && g4_global(l))) mat(p + "attn_v.weight", Kind::AttnV, l, kvd, E, inv_e);
        vec(p + "attn_k_norm.weight", hd, 1.0f, 0.05f);
      }
      mat(p + "attn_output.weight", Kind::AttnO, l, E, qd, 1.0f / std::sqrt(static_cast<float>(qd)));
      vec(p + "post_attention_norm.weight", E, 1.0f, 0.05f);
      vec(p + "ffn_norm.weight", E, 1.0f, 0.05f);
      mat(p + "ffn_gate.weight", Kind::FfnGate, l, ff, E, inv_e);
      mat(p + "ffn_up.weight", Kind::FfnUp, l, ff, E, inv_e);
      mat(p + "ffn_down.weight", Kind::FfnDown, l, E, ff, 1.0f / std::sqrt(static_cast<float>(ff)));
      if (shape->n_expert > 0) {  // 26B-A4B: the routed branch beside the dense FFN (engine/arch/gemma4.cpp)
        const int NE = n_expert, FE = shape->n_ff_exp;
        vec(p + "post_ffw_norm_1.weight", E, 1.0f, 0.05f);
        vec(p + "pre_ffw_norm_2.weight", E, 1.0f, 0.05f);
        // The router reads rms_norm(x) / sqrt(E) * scale (norm ~1): N(0, 1) weights give logits of ~1.
        plan.push_back({p + "ffn_gate_inp.weight", GgmlType::F32, E, NE, 0.0f, 1.0f});
        vec(p + "ffn_gate_inp.scale", E, 1.0f, 0.05f);
        auto experts = [&](std::string name, Kind kind, int64_t rows, int64_t cols, float sigma) {
          plan.push_back({std::move(name), pick_type(mix, kind, l, n_layer, cols, shape->tied), cols, rows, 0.0f, sigma,
                          NE});
        };
        experts(p + "ffn_gate_exps.weight", Kind::FfnGate, FE, E, inv_e);
        experts(p + "ffn_up_exps.weight", Kind::FfnUp, FE, E, inv_e);
        experts(p + "ffn_down_exps.weight", Kind::FfnDown, E, FE, 1.0f / std::sqrt(static_cast<float>(FE)));
        vec(p + "ffn_down_exps.scale", NE, 1.0f, 0.05f);
        vec(p + "post_ffw_norm_2.weight", E, 1.0f, 0.05f);
      }
      vec(p + "post_ffw_norm.weight", E, 1.0f, 0.05f);
      if (shape->n_pl > 0) {
        mat(p + "inp_gate.weight", Kind::Other, l, shape->n_pl, E, 0.5f * inv_e);
        mat(p + "proj.weight", Kind::Other, l, E, shape->n_pl, 1.0f / std::sqrt(float(shape->n_pl)));
        vec(p + "post_norm.weight", E, 1.0f, 0.05f);
      }
      vec(p + "layer_output_scale.weight", 1, 0.9f, 0.0f);
      continue;
    }
    if (!is_attention(l) || qwen35) {
      if (!is_attention(l) && qwen35) {  // gated delta net
        const int hd = shape->dn_head_dim, nv = shape->dn_v_heads;
        const int channels = (2 * shape->dn_k_heads + nv) * hd;
        mat(p + "attn_qkv.weight", Kind::AttnQkv, l, channels, E, inv_e);
        mat(p + "attn_gate.weight", Kind::Other, l, int64_t(nv) * hd, E, inv_e);
        plan.push_back({p + "ssm_conv1d.weight", GgmlType::F32, shape->dn_conv, channels, 0.0f, 0.5f});
        vec(p + "ssm_dt.bias", nv, 0.0f, 0.5f);
        vec(p + "ssm_a", nv, -0.5f, 0.0f);  // -exp(A_log) < 0: a decaying state
        mat(p + "ssm_alpha.weight", Kind::Other, l, nv, E, inv_e);
        mat(p + "ssm_beta.weight", Kind::Other, l, nv, E, inv_e);
        vec(p + "ssm_norm.weight", hd, 1.0f, 0.05f);
        mat(p + "ssm_out.weight", Kind::AttnO, l, E, int64_t(nv) * hd, 1.0f / std::sqrt(float(nv * hd)));
      } else if (qwen35) {  // gated attention: query and gate rows interleaved per head
        mat(p + "attn_q.weight", Kind::AttnQ, l, 2 * q_dim, E, 1.4f * inv_e);
        mat(p + "attn_k.weight", Kind::AttnK, l, kv_dim, E, 1.4f * inv_e);
        mat(p + "attn_v.weight", Kind::AttnV, l, kv_dim, E, inv_e);
        vec(p + "attn_q_norm.weight", head_dim, 1.0f, 0.05f);
        vec(p + "attn_k_norm.weight", head_dim, 1.0f, 0.05f);
        mat(p + "attn_output.weight", Kind::AttnO, l, E, q_dim, 1.0f / std::sqrt(static_cast<float>(q_dim)));
      } else {  // lfm2 short convolution
        mat(p + "shortconv.in_proj.weight", Kind::Other, l, 3 * int64_t(E), E, inv_e);
        plan.push_back({p + "shortconv.conv.weight", GgmlType::F32, shape->sc_taps, E, 0.0f, 0.6f});
        mat(p + "shortconv.out_proj.weight", Kind::AttnO, l, E, E, inv_e);
      }
      vec(p + (qwen35 ? "post_attention_norm.weight" : "ffn_norm.weight"), E, 1.0f, 0.05f);
      ffn(p, l);
      continue;
    }
    mat(p + "attn_q.weight", Kind::AttnQ, l, q_dim, E, 1.4f * inv_e);
    mat(p + "attn_k.weight", Kind::AttnK, l, kv_dim, E, 1.4f * inv_e);
    mat(p + "attn_v.weight", Kind::AttnV, l, kv_dim, E, inv_e);
    if (shape->qkv_bias) {
      vec(p + "attn_q.bias", q_dim, 0.0f, 0.1f);
      vec(p + "attn_k.bias", kv_dim, 0.0f, 0.1f);
      vec(p + "attn_v.bias", kv_dim, 0.0f, 0.1f);
    }
    if (shape->qk_norm) {
      vec(p + "attn_q_norm.weight", head_dim, 1.0f, 0.05f);
      vec(p + "attn_k_norm.weight", head_dim, 1.0f, 0.05f);
    }
    mat(p + "attn_output.weight", Kind::AttnO, l, E, q_dim, 1.0f / std::sqrt(static_cast<float>(q_dim)));
    if (shape->post_norms) vec(p + "post_attention_norm.weight", E, 1.0f, 0.05f);
    vec(p + "ffn_norm.weight", E, 1.0f, 0.05f);
    ffn(p, l);
    if (shape->post_norms) vec(p + "post_ffw_norm.weight", E, 1.0f, 0.05f);
  }
  vec(lfm2 ? "token_embd_norm.weight" : "output_norm.weight", E, 1.0f, 0.05f);  // lfm2's final norm's name
  if (!shape->tied) mat("output.weight", Kind::Output, 0, n_vocab, E, 2.0f * inv_e);

  for (const Plan& t : plan) {
    std::vector<uint64_t> ne = {static_cast<uint64_t>(t.cols)};
    if (t.rows) ne.push_back(static_cast<uint64_t>(t.rows));
    if (t.n_mat) ne.push_back(static_cast<uint64_t>(t.n_mat));
    if (t.vec_rows) ne.push_back(static_cast<uint64_t>(t.vec_rows));
    if (auto r = w.add_tensor(t.name, t.type, ne); !r) {
      std::fprintf(stderr, "picolm-synth: %s\n", r.error().c_str());
      return 1;
    }
  }
  if (Status s = w.begin(a.output); !s) {
    std::fprintf(stderr, "picolm-synth: %s\n", s.error().c_str());
    return 1;
  }
  std::map<std::string, int> type_count;
  for (const Plan& t : plan) {
    Rng rng(a.seed * 0x9e3779b97f4a7c15ull ^ hash_name(t.name));
    const int64_t rows = t.rows * std::max<int64_t>(t.n_mat, 1);  // stacked experts are contiguous rows
    Status s = t.rows ? write_matrix(w, t.type, rows, t.cols, t.sigma, rng)
                      : write_vector(w, t.cols * std::max<int64_t>(1, t.vec_rows), t.mean, t.sigma, rng);
    if (!s) {
      std::fprintf(stderr, "picolm-synth: %s\n", s.error().c_str());
      return 1;
    }
    if (t.rows) ++type_count[ggml_type_traits(t.type)->name];
  }
  if (Status s = w.finish(); !s) {
    std::fprintf(stderr, "picolm-synth: %s\n", s.error().c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string mix_desc;
  for (const auto& [name, cnt] : type_count) mix_desc += (mix_desc.empty() ? "" : ", ") + name + " x" + std::to_string(cnt);
  std::fprintf(stderr, "picolm-synth: wrote %s (%s, %d layers, vocab %d, %zu tensors: %s; %.1f MiB) in %.2f s\n",
               a.output.c_str(), shape->name, n_layer, n_vocab, plan.size(), mix_desc.c_str(),
               static_cast<double>(w.total_tensor_bytes()) / (1024.0 * 1024.0), secs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "picolm-synth: %s needs a value\n", k.c_str());
        return nullptr;
      }
      return argv[++i];
    };
    long long n = 0;
    const char* v = nullptr;
    if (k == "-h" || k == "--help") {
      usage(stdout);
      return 0;
    } else if (k == "--shape") {
      if (!(v = val())) return 2;
      a.shape = v;
    } else if (k == "--type") {
      if (!(v = val())) return 2;
      a.type = v;
    } else if (k == "-o" || k == "--output") {
      if (!(v = val())) return 2;
      a.output = v;
    } else if (k == "--arch") {
      if (!(v = val())) return 2;
      a.arch = v;
    } else if (k == "--vocab-from") {
      if (!(v = val())) return 2;
      a.vocab_from = v;
    } else if (k == "--seed" || k == "--ctx" || k == "--layers" || k == "--merges" || k == "--vocab" ||
               k == "--window" || k == "--experts") {
      if (!(v = val())) return 2;
      if (!parse_int(v, n) || n < 0 || n > (1ll << 31)) {
        std::fprintf(stderr, "picolm-synth: %s: '%s' is not a non-negative integer\n", k.c_str(), v);
        return 2;
      }
      if (k == "--seed") a.seed = static_cast<uint64_t>(n);
      else if (k == "--ctx") a.ctx = static_cast<int>(n);
      else if (k == "--layers") a.layers = static_cast<int>(n);
      else if (k == "--vocab") a.vocab = static_cast<int>(n);
      else if (k == "--window") a.window = static_cast<int>(n);
      else if (k == "--experts") a.experts = static_cast<int>(n);
      else a.merges = static_cast<int>(n);
    } else {
      std::fprintf(stderr, "picolm-synth: unknown argument '%s'\n", k.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (a.shape.empty() || a.output.empty()) {
    usage(stderr);
    return 2;
  }
  return run(a);
}
