// GGUF writer round trip through the reader; picolm-synth models load and run in our engine with
// the quantization mix llama.cpp would choose; picolm-gguf inspects a shared model and rejects junk.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gguf.h"
#include "gguf_writer.h"
#include "kernels/kernels.h"
#include "kernels/thread_pool.h"
#include "model.h"

using namespace picolm;

namespace {

std::string bin(const char* name) { return std::string(PICOLM_BIN_DIR) + "/" + name; }
std::string shared_model(const char* name) { return std::string(PICOLM_SHARED_DIR) + "/models/" + name; }

// Runs a command, returns its exit status and stdout+stderr.
int run(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int st = pclose(p);
  if (out) *out = text;
  UNSCOPED_INFO(cmd << "\n" << text);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// A fresh directory under $TMPDIR (or /tmp), removed at the end of the test case.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/picolm-test-synth-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const char* name) const { return path + "/" + name; }
};

std::string type_of(const GgufFile& g, const std::string& tensor) {
  const GgufTensor* t = g.tensor(tensor);
  return t ? ggml_type_traits(t->type)->name : "(missing)";
}

// Evaluates a few tokens; every logit must be finite and they must not all be equal.
void check_runs(const std::shared_ptr<Model>& model) {
  ThreadPool pool(2);
  Session s(model, pool);
  const Tokenizer& tok = model->tokenizer();
  std::vector<int32_t> ids = tok.encode("Hello world, {\"name\": \"x\"}", false, true);
  REQUIRE(ids.size() >= 3);
  REQUIRE(s.eval(ids).ok());
  auto logits = s.logits();
  REQUIRE(static_cast<int32_t>(logits.size()) == model->hparams().n_vocab);
  float lo = logits[0], hi = logits[0];
  size_t non_finite = 0;
  for (float x : logits) {
    non_finite += !std::isfinite(x);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  REQUIRE(non_finite == 0);
  CHECK(hi - lo > 1e-3f);
  const int32_t next = 5;
  REQUIRE(s.eval(std::span<const int32_t>(&next, 1)).ok());
  non_finite = 0;
  for (float x : s.logits()) non_finite += !std::isfinite(x);
  CHECK(non_finite == 0);
  CHECK(s.n_past() == static_cast<int32_t>(ids.size()) + 1);
}

}  // namespace

TEST_CASE("gguf writer: every value type, string arrays and tensors round-trip through GgufFile", "[synth]") {
  GgufWriter w;
  w.set_u8("t.u8", 200);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 60000);
  w.set_i16("t.i16", -30000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", 18000000000000000000ull);
  w.set_i64("t.i64", -9000000000000000000ll);
  w.set_f32("t.f32", 1.5f);
  w.set_f64("t.f64", -2.25e300);
  w.set_bool("t.bool", true);
  w.set_string("t.str", std::string("hello\0world", 11));
  w.set_string("t.empty", "");
  const std::vector<std::string> strs = {"a", "", "Ġthe", std::string(300, 'x')};
  w.set_string_array("t.strs", std::span<const std::string>(strs));
  const std::vector<int32_t> i32s = {1, -2, 3};
  w.set_i32_array("t.i32s", i32s);
  const std::vector<float> f32s = {0.5f, -1.0f};
  w.set_f32_array("t.f32s", f32s);
  const uint16_t u16s[] = {7, 8, 9, 10};
  w.set_array("t.u16s", GgufValueType::UINT16, u16s, 4);
  w.set_array("t.none", GgufValueType::INT64, nullptr, 0);
  w.set_u32("t.replaced", 1);
  w.set_u32("t.replaced", 2);  // replaces in place: still one key
  CHECK(w.has_key("t.replaced"));
  CHECK_FALSE(w.has_key("t.nope"));

  // Tensors of several types and shapes; the data is a recognisable byte pattern.
  struct T {
    const char* name;
    GgmlType type;
    std::vector<uint64_t> ne;
  };
  const std::vector<T> ts = {{"a.f32", GgmlType::F32, {5}},
                             {"b.q4k", GgmlType::Q4_K, {512, 3}},
                             {"c.q8", GgmlType::Q8_0, {64, 2, 3}},
                             {"d.f16", GgmlType::F16, {3, 1}}};
  for (const T& t : ts) REQUIRE(w.add_tensor(t.name, t.type, t.ne).ok());
  CHECK_FALSE(w.add_tensor("bad.rowlen", GgmlType::Q4_K, {100, 2}).ok());  // not a multiple of 256
  CHECK_FALSE(w.add_tensor("a.f32", GgmlType::F32, {5}).ok());            // duplicate name
  CHECK(w.tensor_bytes(1) == 2 * 3 * 144);
  CHECK(w.tensor_bytes(2) == 2 * 2 * 3 * 34);

  REQUIRE(w.begin_memory().ok());
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < ts.size(); ++i) {
    std::vector<uint8_t> d(w.tensor_bytes(i));
    for (size_t k = 0; k < d.size(); ++k) d[k] = static_cast<uint8_t>(k * 7 + i);
    data.push_back(d);
  }
  // Tensor 1 in two uneven chunks, the others whole.
  REQUIRE(w.write_tensor_data(data[0].data(), data[0].size()).ok());
  REQUIRE(w.write_tensor_data(data[1].data(), 100).ok());
  REQUIRE(w.write_tensor_data(data[1].data() + 100, data[1].size() - 100).ok());
  REQUIRE(w.write_tensor_data(data[2].data(), data[2].size()).ok());
  REQUIRE(w.write_tensor_data(data[3].data(), data[3].size()).ok());
  REQUIRE(w.finish().ok());

  const std::vector<uint8_t>& bytes = w.buffer();
  auto f = GgufFile::parse(bytes.data(), bytes.size());
  REQUIRE(f.ok());
  const GgufFile& g = **f;
  CHECK(g.version() == 3);
  CHECK(g.metadata().size() == 19);
  CHECK(g.find("t.u8")->type == GgufValueType::UINT8);
  CHECK(g.get_int("t.u8") == 200);
  CHECK(g.find("t.i8")->type == GgufValueType::INT8);
  CHECK(g.get_int("t.i8") == -100);
  CHECK(g.get_int("t.u16") == 60000);
  CHECK(g.find("t.i16")->type == GgufValueType::INT16);
  CHECK(g.get_int("t.i16") == -30000);
  CHECK(g.get_int("t.u32") == 4000000000ll);
  CHECK(g.get_int("t.i32") == -2000000000);
  CHECK(g.find("t.u64")->u == 18000000000000000000ull);
  CHECK(g.get_int("t.i64") == -9000000000000000000ll);
  CHECK(g.find("t.f32")->type == GgufValueType::FLOAT32);
  CHECK(g.get_float("t.f32") == 1.5);
  CHECK(g.find("t.f64")->type == GgufValueType::FLOAT64);
  CHECK(g.get_float("t.f64") == -2.25e300);
  CHECK(g.get_bool("t.bool") == true);
  CHECK(g.get_string("t.str") == std::string_view("hello\0world", 11));
  CHECK(g.get_string("t.empty") == std::string_view());
  auto sa = g.get_string_array("t.strs");
  REQUIRE(sa.size() == strs.size());
  for (size_t i = 0; i < strs.size(); ++i) CHECK(sa[i] == strs[i]);
  CHECK(g.get_i32_array("t.i32s") == i32s);
  CHECK(g.get_f32_array("t.f32s") == f32s);
  CHECK(g.get_i32_array("t.u16s") == std::vector<int32_t>{7, 8, 9, 10});
  CHECK(g.find("t.u16s")->elem_type == GgufValueType::UINT16);
  CHECK(g.find("t.none")->count == 0);
  CHECK(g.get_int("t.replaced") == 2);

  REQUIRE(g.tensors().size() == ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    INFO(ts[i].name);
    const GgufTensor& t = g.tensors()[i];
    CHECK(t.name == ts[i].name);
    CHECK(t.type == ts[i].type);
    CHECK(t.ne == ts[i].ne);
    CHECK(t.offset % 32 == 0);
    REQUIRE(t.n_bytes == data[i].size());
    CHECK(std::memcmp(t.data, data[i].data(), t.n_bytes) == 0);
  }

  SECTION("copying every value through set_value reproduces the metadata") {
    GgufWriter w2;
    for (const auto& [k, v] : g.metadata()) w2.set_value(k, v);
    w2.set_alignment(64);
    REQUIRE(w2.add_tensor("x", GgmlType::F32, {3}).ok());
    REQUIRE(w2.add_tensor("y", GgmlType::F32, {1}).ok());
    REQUIRE(w2.begin_memory().ok());
    const float x[4] = {1, 2, 3, 4};
    REQUIRE(w2.write_tensor_data(x, 16).ok());
    REQUIRE(w2.finish().ok());
    auto f2 = GgufFile::parse(w2.buffer().data(), w2.buffer().size());
    REQUIRE(f2.ok());
    const GgufFile& g2 = **f2;
    CHECK(g2.alignment() == 64);
    CHECK(g2.tensors()[1].offset == 64);
    CHECK(g2.data_offset() % 64 == 0);
    for (const auto& [k, v] : g.metadata()) {
      INFO(k);
      const GgufValue* v2 = g2.find(k);
      REQUIRE(v2 != nullptr);
      CHECK(v2->type == v.type);
      CHECK(v2->i == v.i);
      CHECK(v2->s == v.s);
      CHECK(v2->count == v.count);
      CHECK(v2->strings == v.strings);
    }
  }
}

TEST_CASE("gguf writer: files appear only when complete", "[synth]") {
  TempDir dir;
  const std::string path = dir.file("w.gguf");
  {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    REQUIRE(w.add_tensor("t", GgmlType::F32, {4}).ok());
    REQUIRE(w.begin(path).ok());
    const float x[2] = {1, 2};
    REQUIRE(w.write_tensor_data(x, sizeof x).ok());
    CHECK_FALSE(w.finish().ok());  // 8 of 16 bytes written
    CHECK_FALSE(w.write_tensor_data(x, sizeof x).ok());
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  {
    GgufWriter w;
    REQUIRE(w.add_tensor("t", GgmlType::F32, {1}).ok());
    REQUIRE(w.begin(path).ok());
    const float x[2] = {1, 2};
    CHECK_FALSE(w.write_tensor_data(x, sizeof x).ok());  // more than declared
  }
  CHECK_FALSE(std::filesystem::exists(path));
  {
    GgufWriter w;
    w.set_u32("k", 1);
    REQUIRE(w.add_tensor("t", GgmlType::F32, {2}).ok());
    REQUIRE(w.begin(path).ok());
    const float x[2] = {1, 2};
    REQUIRE(w.write_tensor_data(x, sizeof x).ok());
    REQUIRE(w.finish().ok());
  }
  auto f = GgufFile::open(path);
  REQUIRE(f.ok());
  CHECK(f.value()->get_int("k") == 1);
  CHECK(f.value()->get_f32_array("k").empty());
  GgufWriter w;
  CHECK_FALSE(w.begin(dir.file("no/such/dir.gguf")).ok());
}

TEST_CASE("synth: the demo model loads with our tokenizer and runs", "[synth]") {
  TempDir dir;
  const std::string out = dir.file("demo.gguf");
  REQUIRE(run(bin("picolm-synth") + " --shape demo --type q8_0 -o " + out) == 0);
  auto m = Model::load(out);
  REQUIRE(m.ok());
  const HParams& hp = m.value()->hparams();
  CHECK(hp.arch == Arch::Qwen2);
  CHECK(hp.n_layer == 4);
  CHECK(hp.n_embd == 256);
  CHECK(hp.n_head == 4);
  CHECK(hp.n_head_kv == 2);
  CHECK(hp.n_ff == 512);
  CHECK(hp.n_ctx_train == 4096);
  CHECK(hp.tied_output);
  const Tokenizer& tok = m.value()->tokenizer();
  const int32_t im_end = tok.find_token("<|im_end|>");
  REQUIRE(im_end >= 0);
  CHECK(tok.eos_id() == im_end);
  CHECK(tok.token_type(im_end) == TokenType::Control);
  CHECK(tok.token_type(tok.find_token("<|im_start|>")) == TokenType::Control);
  CHECK(tok.token_type(tok.find_token("<|endoftext|>")) == TokenType::Control);
  CHECK(tok.token_type(tok.find_token("<tool_call>")) == TokenType::UserDefined);
  CHECK(tok.token_type(tok.find_token("</tool_call>")) == TokenType::UserDefined);
  CHECK(tok.is_eog(im_end));
  CHECK_FALSE(tok.add_bos());
  // The learned merges make common English and JSON compact (bytes alone would be 1 per char).
  const std::string text = "What is the weather like in Paris today? {\"name\": \"get_weather\", \"arguments\": {}}";
  const std::vector<int32_t> ids = tok.encode(text, false, false);
  CHECK(ids.size() * 2 < text.size());
  CHECK(tok.decode(ids, false) == text);
  const std::vector<int32_t> chat = tok.encode("<|im_start|>user\nhi<|im_end|>", false, true);
  REQUIRE(chat.size() >= 3);
  CHECK(chat.front() == tok.find_token("<|im_start|>"));
  CHECK(chat.back() == im_end);
  auto tpl = m.value()->gguf().get_string("tokenizer.chat_template");
  REQUIRE(tpl);
  CHECK(tpl->find("<tool_call>") != std::string_view::npos);
  CHECK(tpl->find("<|im_start|>assistant") != std::string_view::npos);
  check_runs(m.value());

  // Same seed, same bytes.
  const std::string again = dir.file("demo2.gguf");
  REQUIRE(run(bin("picolm-synth") + " --shape demo --type q8_0 -o " + again) == 0);
  std::ifstream a(out, std::ios::binary), b(again, std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}));
}

TEST_CASE("synth: q4_k_m follows llama.cpp's mix, with fallbacks for 960-wide rows", "[synth]") {
  TempDir dir;
  const std::string out = dir.file("smol.gguf");
  // SmolLM2-360M: n_embd 960 is not a multiple of 256, so Q4_K -> Q5_0 and Q6_K -> Q8_0 on rows of
  // 960; ffn_down rows are 2560 wide and keep K-quants. With 2 layers, use_more_bits picks layer 1.
  REQUIRE(run(bin("picolm-synth") + " --shape smollm2-360m --type q4_k_m --layers 2 --ctx 1024 -o " + out) == 0);
  auto m = Model::load(out);
  REQUIRE(m.ok());
  const GgufFile& g = m.value()->gguf();
  CHECK(type_of(g, "token_embd.weight") == "Q8_0");  // tied: quantized as the output head
  CHECK(g.tensor("output.weight") == nullptr);
  CHECK(type_of(g, "blk.0.attn_q.weight") == "Q5_0");
  CHECK(type_of(g, "blk.0.attn_v.weight") == "Q5_0");
  CHECK(type_of(g, "blk.1.attn_v.weight") == "Q8_0");
  CHECK(type_of(g, "blk.0.ffn_down.weight") == "Q4_K");
  CHECK(type_of(g, "blk.1.ffn_down.weight") == "Q6_K");
  CHECK(type_of(g, "blk.0.attn_norm.weight") == "F32");
  CHECK(g.get_int("general.file_type") == 15);
  CHECK(g.get_int("llama.context_length") == 1024);
  const HParams& hp = m.value()->hparams();
  CHECK(hp.n_vocab == 49152);
  CHECK(hp.n_layer == 2);
  CHECK(hp.n_head == 15);
  CHECK(hp.n_head_kv == 5);
  CHECK(hp.rope_base == 100000.0f);
  CHECK(m.value()->tokenizer().n_vocab() == 49152);  // synthetic byte-level vocabulary, padded
  check_runs(m.value());
}

TEST_CASE("synth: --vocab-from copies a real tokenizer", "[synth]") {
  TempDir dir;
  const std::string out = dir.file("spm.gguf");
  const std::string src = shared_model("llama-spm32k-q4km.gguf");
  REQUIRE(std::filesystem::exists(src));
  REQUIRE(run(bin("picolm-synth") + " --shape demo --type q4_0 --vocab-from " + src + " -o " + out) == 0);
  auto m = Model::load(out);
  REQUIRE(m.ok());
  auto ref = GgufFile::open(src);
  REQUIRE(ref.ok());
  CHECK(m.value()->gguf().get_string("tokenizer.ggml.model") == ref.value()->get_string("tokenizer.ggml.model"));
  CHECK(m.value()->gguf().get_string_array("tokenizer.ggml.tokens") ==
        ref.value()->get_string_array("tokenizer.ggml.tokens"));
  CHECK(m.value()->hparams().n_vocab == 32000);
  CHECK(type_of(m.value()->gguf(), "token_embd.weight") == "Q6_K");  // tied output head of a Q4_0 mix
  CHECK(type_of(m.value()->gguf(), "blk.0.attn_q.weight") == "Q4_0");
  check_runs(m.value());

  // A vocabulary larger than the shape's n_vocab is refused with a message.
  std::string msg;
  CHECK(run(bin("picolm-synth") + " --shape smollm2-360m --type q8_0 --layers 1 --vocab-from " +
                shared_model("qwen2-bpe-q4km.gguf") + " -o " + dir.file("bad.gguf"),
            &msg) != 0);
  CHECK(msg.find("n_vocab") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("bad.gguf")));
  CHECK(run(bin("picolm-synth") + " --shape nope --type q8_0 -o " + dir.file("x.gguf")) != 0);
  CHECK(run(bin("picolm-synth") + " --shape demo --type q3_k -o " + dir.file("x.gguf")) != 0);
}

TEST_CASE("picolm-gguf: prints a shared model and rejects bad files", "[synth]") {
  const std::string src = shared_model("zoo-Q4_K.gguf");
  REQUIRE(std::filesystem::exists(src));
  std::string out;
  REQUIRE(run(bin("picolm-gguf") + " " + src, &out) == 0);
  CHECK(out.find("general.architecture") != std::string::npos);
  CHECK(out.find("\"llama\"") != std::string::npos);
  CHECK(out.find("tokenizer.ggml.tokens") != std::string::npos);
  CHECK(out.find("[str x 512]") != std::string::npos);  // arrays are abbreviated
  CHECK(out.find("blk.1.ffn_down.weight") != std::string::npos);
  CHECK(out.find("Q4_K") != std::string::npos);
  CHECK(out.size() < 20000);
  REQUIRE(run(bin("picolm-gguf") + " --key general.architecture " + src, &out) == 0);
  CHECK(out == "llama\n");

  TempDir dir;
  const std::string bad = dir.file("bad.gguf");
  {
    std::ofstream o(bad, std::ios::binary);
    o << "GGUF this is not a model";
  }
  REQUIRE(run(bin("picolm-gguf") + " " + bad, &out) == 1);
  CHECK(out.find("bad.gguf") != std::string::npos);
  REQUIRE(run(bin("picolm-gguf") + " " + dir.file("missing.gguf"), &out) == 1);
  CHECK(out.find("cannot open") != std::string::npos);
  // Truncated copy of a real model: the reader names the problem.
  const std::string trunc = dir.file("trunc.gguf");
  {
    std::ifstream in(src, std::ios::binary);
    std::string head(5000, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream o(trunc, std::ios::binary);
    o.write(head.data(), in.gcount());
  }
  REQUIRE(run(bin("picolm-gguf") + " " + trunc, &out) == 1);
  CHECK(out.find("trunc.gguf") != std::string::npos);
}

namespace {

// Logits of every position: the whole prompt in one eval, and one token per eval.
struct PrefillVsSequential {
  std::vector<std::vector<float>> prefill, sequential;
  float max_diff = 0.0f;
};
PrefillVsSequential prefill_vs_sequential(const std::shared_ptr<Model>& m, const std::vector<int32_t>& toks) {
  ThreadPool pool(2);
  PrefillVsSequential r;
  Session a(m, pool, SessionOptions{0, 512});
  REQUIRE(a.eval(toks, true).ok());
  Session b(m, pool);
  for (size_t i = 0; i < toks.size(); ++i) {
    r.prefill.emplace_back(a.logits_at(i).begin(), a.logits_at(i).end());
    REQUIRE(b.eval(std::span<const int32_t>(&toks[i], 1)).ok());
    r.sequential.emplace_back(b.logits().begin(), b.logits().end());
    for (size_t j = 0; j < r.prefill[i].size(); ++j)
      r.max_diff = std::max(r.max_diff, std::fabs(r.prefill[i][j] - r.sequential[i][j]));
  }
  return r;
}

std::vector<int32_t> some_tokens(int n, int n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((i * 7919 + 13) % n_vocab));
  return t;
}

}  // namespace

TEST_CASE("synth: qwen3 and gemma3 shapes load, run, and prefill equals one token at a time", "[synth]") {
  TempDir dir;
  SECTION("qwen3-0.6b (head_dim 128 from key_length, QK-norm)") {
    const std::string out = dir.file("qwen3.gguf");
    REQUIRE(run(bin("picolm-synth") + " --shape qwen3-0.6b --type q4_k_m --layers 2 --vocab 2048 -o " + out) == 0);
    auto m = Model::load(out);
    REQUIRE(m.ok());
    const HParams& hp = m.value()->hparams();
    CHECK(hp.arch == Arch::Qwen3);
    CHECK(hp.n_embd == 1024);
    CHECK(hp.head_dim == 128);
    CHECK(hp.n_head == 16);
    CHECK(hp.n_head_kv == 8);
    CHECK(m.value()->gguf().tensor("blk.1.attn_q_norm.weight") != nullptr);
    check_runs(m.value());
    auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
    // Repacked weights (AVX2 / AVX-512): the same operations per token alone or in a batch.
    if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
    else CHECK(r.max_diff <= 0.1f);
  }
  SECTION("gemma3-270m (head_dim 256, 1 KV head, 5 sliding layers of 6, window shortened to 16)") {
    const std::string out = dir.file("gemma3.gguf");
    REQUIRE(run(bin("picolm-synth") + " --shape gemma3-270m --type q4_k_m --layers 6 --vocab 2048 --window 16 -o " +
                out) == 0);
    auto m = Model::load(out);
    REQUIRE(m.ok());
    const HParams& hp = m.value()->hparams();
    CHECK(hp.arch == Arch::Gemma3);
    CHECK(hp.n_embd == 640);
    CHECK(hp.head_dim == 256);
    CHECK(hp.n_head_kv == 1);
    CHECK(hp.tied_output);
    REQUIRE(hp.layers.size() == 6);
    for (int l = 0; l < 6; ++l) {
      CHECK(hp.layers[size_t(l)].window == (l < 5 ? 16 : 0));
      CHECK(hp.layers[size_t(l)].rope == (l < 5 ? 1 : 0));
    }
    REQUIRE(hp.rope_bases.size() == 2);
    CHECK(hp.rope_bases[0] == 1e6f);
    CHECK(hp.rope_bases[1] == 1e4f);
    check_runs(m.value());
    // 40 tokens: past the window of 16 on the sliding layers.
    auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
    if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
    else CHECK(r.max_diff <= 0.1f);
  }
}

TEST_CASE("synth: smollm3 skips RoPE on every fourth layer (NoPE) and is llama otherwise", "[synth]") {
  TempDir dir;
  // The same weights (same shape and seed) written as smollm3 and as llama.
  auto make = [&](const char* arch, int layers) {
    const std::string out = dir.file((std::string(arch) + std::to_string(layers) + ".gguf").c_str());
    REQUIRE(run(bin("picolm-synth") + " --shape smollm2-360m --type q4_0 --vocab 1024 --layers " +
                std::to_string(layers) + " --arch " + arch + " -o " + out) == 0);
    auto m = Model::load(out);
    REQUIRE(m.ok());
    return m.value();
  };
  const auto toks = some_tokens(12, 1024);
  auto logits = [&](const std::shared_ptr<Model>& m) { return prefill_vs_sequential(m, toks).prefill; };
  // Three layers: no NoPE layer yet ((il + 1) % 4 != 0), so smollm3 is llama bit for bit.
  auto s3 = make("smollm3", 3), l3 = make("llama", 3);
  CHECK(s3->hparams().arch == Arch::Smollm3);
  for (const LayerHParams& lp : s3->hparams().layers) CHECK(lp.rope == 0);
  CHECK(logits(s3) == logits(l3));
  // Four layers: layer 3 has no rotation. Position 0 is never rotated, so it agrees; later ones do not.
  auto s4 = make("smollm3", 4), l4 = make("llama", 4);
  CHECK(s4->hparams().layers[3].rope == -1);
  const auto a = logits(s4), b = logits(l4);
  CHECK(a[0] == b[0]);
  for (size_t p = 1; p < toks.size(); ++p) CHECK(a[p] != b[p]);
}

TEST_CASE("synth: hybrid shapes (qwen3.5, lfm2.5) load, run, and prefill equals one token at a time", "[synth]") {
  TempDir dir;
  SECTION("qwen3.5-0.8b (delta net 16/16 heads of 128, gated attention every 4th layer, RoPE on 64 of 256 dims)") {
    const std::string out = dir.file("qwen35.gguf");
    REQUIRE(run(bin("picolm-synth") + " --shape qwen3.5-0.8b --type q4_k_m --layers 4 --vocab 2048 -o " + out) == 0);
    auto m = Model::load(out);
    REQUIRE(m.ok());
    const HParams& hp = m.value()->hparams();
    CHECK(hp.arch == Arch::Qwen35);
    CHECK((hp.n_embd == 1024 && hp.head_dim == 256 && hp.n_rot == 64 && hp.n_head_kv == 2));
    CHECK((hp.dn_k_heads == 16 && hp.dn_v_heads == 16 && hp.dn_head_dim == 128 && hp.dn_conv == 4));
    for (int l = 0; l < 4; ++l)
      CHECK(hp.layers[size_t(l)].kind == (l == 3 ? LayerKind::Attention : LayerKind::DeltaNet));
    // llama.cpp's Q4_K_M gives the fused qkv of the delta net Q5_K.
    CHECK(type_of(m.value()->gguf(), "blk.0.attn_qkv.weight") == "Q5_K");
    check_runs(m.value());
    auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
    if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
    else CHECK(r.max_diff <= 0.1f);
  }
  SECTION("lfm2.5-1.2b (short convs, attention on layers 2 and 5)") {
    const std::string out = dir.file("lfm2.gguf");
    REQUIRE(run(bin("picolm-synth") + " --shape lfm2.5-1.2b --type q4_k_m --layers 6 --vocab 2048 -o " + out) == 0);
    auto m = Model::load(out);
    REQUIRE(m.ok());
    const HParams& hp = m.value()->hparams();
    CHECK(hp.arch == Arch::Lfm2);
    CHECK((hp.n_embd == 2048 && hp.n_head == 32 && hp.n_head_kv == 8 && hp.n_ff == 8192 && hp.sc_taps == 3));
    for (int l = 0; l < 6; ++l)
      CHECK(hp.layers[size_t(l)].kind == (l == 2 || l == 5 ? LayerKind::Attention : LayerKind::ShortConv));
    check_runs(m.value());
    auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
    if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
    else CHECK(r.max_diff <= 0.1f);
  }
}

// Issue 32: the MoE shapes write what the engine's qwen3moe / lfm2moe loaders read (stacked experts,
// the router kept F32, lfm2moe's dense leading layers and selection bias).
TEST_CASE("synth: MoE shapes (qwen3-30b-a3b, lfm2-8b-a1b) load, run, and prefill equals one token at a time", "[synth][moe]") {
  TempDir dir;
  SECTION("qwen3-30b-a3b (128 experts of 768, 8 per token), 1 layer") {
    const std::string out = dir.file("qwen3moe.gguf");
    REQUIRE(run(bin("picolm-synth") + " --shape qwen3-30b-a3b --type q4_k_m --layers 1 --vocab 2048 -o " + out) == 0);
    auto m = Model::load(out);
    REQUIRE(m.ok());
    const HParams& hp = m.value()->hparams();
    CHECK(hp.arch == Arch::Qwen3Moe);
    CHECK((hp.n_expert == 128 && hp.n_expert_used == 8 && hp.n_ff_exp == 768 && hp.head_dim == 128));
    CHECK(type_of(m.value()->gguf(), "blk.0.ffn_gate_inp.weight") == "F32");
    CHECK(type_of(m.value()->gguf(), "blk.0.ffn_up_exps.weight") == "Q4_K");
    check_runs(m.value());
    auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
    if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
    else CHECK(r.max_diff <= 0.1f);
  }
  SECTION("lfm2-8b-a1b (2 dense layers, then 32 experts of 1792, 4 per token, sigmoid + bias), 4 layers") {
    const std::string out = dir.file("lfm2moe.gguf");
    REQUIRE(run(bin("picolm-synth") + " --shape lfm2-8b-a1b --type q4_k_m --layers 4 --vocab 2048 -o " + out) == 0);
    auto m = Model::load(out);
    REQUIRE(m.ok());
    const HParams& hp = m.value()->hparams();
    CHECK(hp.arch == Arch::Lfm2Moe);
    CHECK((hp.n_expert == 32 && hp.n_expert_used == 4 && hp.n_ff_exp == 1792 && hp.expert_gating == ExpertGating::Sigmoid));
    for (int l = 0; l < 4; ++l) {
      CHECK(hp.layers[size_t(l)].moe == (l >= 2));
      CHECK(hp.layers[size_t(l)].kind == (l == 2 ? LayerKind::Attention : LayerKind::ShortConv));
    }
    check_runs(m.value());
    auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
    if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
    else CHECK(r.max_diff <= 0.1f);
  }
}

TEST_CASE("synth: phi-4-mini and granite-4.0-h-tiny shapes load, run, and prefill equals one token at a time", "[synth]") {
  TempDir dir;
  SECTION("phi-4-mini (fused qkv and gate|up, LongRoPE on 96 of 128 dims)") {
    const std::string out = dir.file("phi3.gguf");
    REQUIRE(run(bin("picolm-synth") + " --shape phi-4-mini --type q4_k_m --layers 2 --vocab 2048 -o " + out) == 0);
    auto m = Model::load(out);
    REQUIRE(m.ok());
    const HParams& hp = m.value()->hparams();
    CHECK(hp.arch == Arch::Phi3);
    CHECK((hp.n_embd == 3072 && hp.head_dim == 128 && hp.n_rot == 96 && hp.n_head_kv == 8 && hp.n_ff == 8192));
    CHECK(hp.rope_long_ctx == 4096);
    CHECK(std::fabs(hp.rope_mscale - std::sqrt(1.0f + std::log(32.0f) / std::log(4096.0f))) < 1e-6f);
    CHECK(type_of(m.value()->gguf(), "blk.0.attn_qkv.weight") == "Q5_K");  // llama.cpp's rule for a fused qkv
    check_runs(m.value());
    auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
    if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
    else CHECK(r.max_diff <= 0.1f);
  }
  SECTION("granite-4.0-h-tiny (Mamba-2 48 heads of 64, d_state 128; NoPE attention on layer 5; 64 experts of 512, 6 per token, shared expert of 1024)") {
    const std::string out = dir.file("granite.gguf");
    REQUIRE(run(bin("picolm-synth") + " --shape granite-4.0-h-tiny --type q4_k_m --layers 6 --vocab 2048 -o " + out) == 0);
    auto m = Model::load(out);
    REQUIRE(m.ok());
    const HParams& hp = m.value()->hparams();
    CHECK(hp.arch == Arch::GraniteHybrid);
    CHECK((hp.n_embd == 1536 && hp.n_head == 12 && hp.n_head_kv == 4 && hp.head_dim == 128));
    CHECK((hp.n_expert == 64 && hp.n_expert_used == 6 && hp.n_ff_exp == 512 && hp.n_ff_shexp == 1024));
    CHECK(hp.expert_gating == ExpertGating::Softmax);
    CHECK(m.value()->gguf().tensor("blk.0.ffn_down_shexp.weight") != nullptr);
    CHECK(m.value()->gguf().tensor("blk.0.ffn_gate_inp_shexp.weight") == nullptr);  // ungated
    CHECK((hp.m2_heads == 48 && hp.m2_head_dim == 64 && hp.m2_state == 128 && hp.m2_groups == 1 && hp.m2_conv == 4));
    CHECK((hp.embedding_scale == 12.0f && hp.residual_scale == 0.22f && hp.logit_scale == 6.0f));
    for (int l = 0; l < 6; ++l) {
      CHECK(hp.layers[size_t(l)].kind == (l == 5 ? LayerKind::Attention : LayerKind::Mamba2));
      CHECK(hp.layers[size_t(l)].rope == -1);  // NoPE
      CHECK(hp.layers[size_t(l)].moe);
    }
    check_runs(m.value());
    auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
    if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
    else CHECK(r.max_diff <= 0.1f);
  }
}

TEST_CASE("synth: gemma4 shapes (E2B, E4B) load, run, and prefill equals one token at a time", "[synth][gemma4]") {
  TempDir dir;
  // --layers 10 of E2B: globals at 4 and 9 (period 5); the KV-sharing part keeps its share of 20/35,
  // starting after the global layer 4: layers 5-9 read layer 3's (sliding) or layer 4's (global) K/V.
  const std::string out = dir.file("gemma4.gguf");
  REQUIRE(run(bin("picolm-synth") + " --shape gemma4-e2b --type q4_k_m --layers 10 --vocab 2048 --window 16 -o " +
              out) == 0);
  auto m = Model::load(out);
  REQUIRE(m.ok());
  const HParams& hp = m.value()->hparams();
  CHECK(hp.arch == Arch::Gemma4);
  CHECK((hp.n_embd == 1536 && hp.n_head == 8 && hp.n_head_kv == 1 && hp.head_dim == 512));
  CHECK((hp.n_embd_per_layer == 256 && hp.logit_softcap == 30.0f && hp.v_norm));
  REQUIRE(hp.layers.size() == 10);
  for (int l = 0; l < 10; ++l) {
    const LayerHParams& lp = hp.layers[size_t(l)];
    const bool global = l % 5 == 4;
    CHECK(lp.window == (global ? 0 : 16));
    CHECK(lp.head_dim == (global ? 512 : 256));
    CHECK(lp.n_ff == (l < 5 ? 6144 : 12288));
    CHECK(lp.kv_source == (l < 5 ? -1 : global ? 4 : 3));
  }
  CHECK(m.value()->gguf().tensor("blk.5.attn_k.weight") == nullptr);
  check_runs(m.value());
  auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
  if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
  else CHECK(r.max_diff <= 0.1f);
}

// Issue 33: the 26B-A4B shape writes what the gemma4 loader reads for its MoE layers (the dense FFN
// beside the routed experts, the router's input scale, per-expert scales; global layers with 2 KV
// heads of 512 and no attn_v). Cut to 2 layers (a sliding one, then the global last layer) and 16
// of the 128 experts: ~110 MB instead of ~870 MB for the two layers.
TEST_CASE("synth: gemma4-26b-a4b (MoE) loads, runs, and prefill equals one token at a time", "[synth][gemma4][moe]") {
  TempDir dir;
  const std::string out = dir.file("gemma4moe.gguf");
  REQUIRE(run(bin("picolm-synth") + " --shape gemma4-26b-a4b --type q4_k_m --layers 2 --experts 16 --vocab 2048 "
                                    "--window 16 -o " + out) == 0);
  auto m = Model::load(out);
  REQUIRE(m.ok());
  const HParams& hp = m.value()->hparams();
  CHECK(hp.arch == Arch::Gemma4);
  CHECK((hp.n_embd == 2816 && hp.n_head == 16 && hp.n_head_kv == 8 && hp.head_dim == 512));
  CHECK((hp.n_expert == 16 && hp.n_expert_used == 8 && hp.n_ff_exp == 704));
  CHECK((hp.n_embd_per_layer == 0 && hp.logit_softcap == 30.0f));
  REQUIRE(hp.layers.size() == 2);
  for (int l = 0; l < 2; ++l) {
    const LayerHParams& lp = hp.layers[size_t(l)];
    const bool global = l == 1;
    CHECK(lp.moe);
    CHECK(lp.n_ff == 2112);
    CHECK(lp.window == (global ? 0 : 16));
    CHECK(lp.head_dim == (global ? 512 : 256));
    CHECK(lp.n_head_kv == (global ? 2 : 8));
    CHECK(lp.kv_source == -1);
  }
  CHECK(m.value()->gguf().tensor("blk.1.attn_v.weight") == nullptr);  // V = K on the global layers
  CHECK(m.value()->gguf().tensor("blk.0.attn_v.weight") != nullptr);
  CHECK(type_of(m.value()->gguf(), "blk.0.ffn_gate_inp.weight") == "F32");
  CHECK(type_of(m.value()->gguf(), "blk.0.ffn_up_exps.weight") == "Q4_K");
  CHECK(m.value()->gguf().tensor("blk.1.ffn_down_exps.scale") != nullptr);
  CHECK(m.value()->gguf().tensor("blk.1.ffn_gate_inp.scale") != nullptr);
  check_runs(m.value());
  auto r = prefill_vs_sequential(m.value(), some_tokens(40, hp.n_vocab));
  if (m.value()->packed_bytes() > 0) CHECK(r.max_diff == 0.0f);
  else CHECK(r.max_diff <= 0.1f);
  // Fewer experts than are used per token is refused.
  CHECK(run(bin("picolm-synth") + " --shape gemma4-26b-a4b --type q4_k_m --layers 1 --experts 4 -o " +
            dir.file("x.gguf")) != 0);
}
