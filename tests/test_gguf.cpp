// GGUF reader: reads every shared model, and refuses truncated or corrupted copies cleanly.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>

#include "gguf.h"
#include "gguf_writer.h"
#include "model.h"
#include "test_util.h"

using namespace picolm;

namespace {
using test_util::model_path;
using test_util::read_all;
}  // namespace

TEST_CASE("gguf: every shared model opens with sane metadata", "[gguf]") {
  for (const char* name : {"stories260K.gguf", "zoo-Q4_K.gguf", "zoo-BF16.gguf", "llama-spm32k-q4km.gguf",
                           "qwen2-bpe-q4km.gguf"}) {
    INFO(name);
    auto f = GgufFile::open(model_path(name));
    REQUIRE(f.ok());
    GgufFile& g = **f;
    CHECK(g.version() == 3);
    auto arch = g.get_string("general.architecture");
    REQUIRE(arch);
    CHECK((*arch == "llama" || *arch == "qwen2"));
    CHECK(g.tensor("token_embd.weight") != nullptr);
    CHECK(!g.get_string_array("tokenizer.ggml.tokens").empty());
    for (const GgufTensor& t : g.tensors()) {
      CHECK(t.data >= g.bytes().data() + g.data_offset());
      CHECK(t.data + t.n_bytes <= g.bytes().data() + g.bytes().size());
    }
  }
}

TEST_CASE("gguf: stories260K hyper-parameters", "[gguf]") {
  auto f = GgufFile::open(model_path("stories260K.gguf"));
  REQUIRE(f.ok());
  CHECK((*f)->get_int("llama.block_count") == 5);
  CHECK((*f)->get_int("llama.embedding_length") == 64);
  CHECK((*f)->get_string_array("tokenizer.ggml.tokens").size() == 512);
  const GgufTensor* emb = (*f)->tensor("token_embd.weight");
  REQUIRE(emb);
  CHECK(emb->ne[0] == 64);
  CHECK(emb->ne[1] == 512);
  CHECK(emb->type == GgmlType::F32);
}

TEST_CASE("gguf: missing and non-GGUF files give errors", "[gguf]") {
  auto f = GgufFile::open("/nonexistent/model.gguf");
  REQUIRE(!f.ok());
  CHECK(f.error().find("cannot open") != std::string::npos);
  std::vector<uint8_t> junk(100, 'x');
  auto g = GgufFile::parse(junk.data(), junk.size());
  REQUIRE(!g.ok());
  CHECK(g.error().find("bad magic") != std::string::npos);
}

TEST_CASE("gguf: truncation at many offsets is refused with an error", "[gguf]") {
  for (const char* name : {"stories260K.gguf", "zoo-Q6_K.gguf"}) {
    std::vector<uint8_t> bytes = read_all(model_path(name));
    // Every offset in the header/metadata region (the part a parser walks), then strided offsets
    // through the tensor data. Each copy is exactly `cut` bytes so ASan sees any over-read.
    std::vector<size_t> cuts;
    auto full = GgufFile::parse(bytes.data(), bytes.size());
    REQUIRE(full.ok());
    size_t header_end = (*full)->data_offset();
    for (size_t cut = 0; cut < header_end; cut += (cut < 4096 ? 1 : 97)) cuts.push_back(cut);
    for (size_t cut = header_end; cut < bytes.size(); cut += bytes.size() / 50 + 1) cuts.push_back(cut);
    cuts.push_back(bytes.size() - 1);
    for (size_t cut : cuts) {
      std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
      auto r = GgufFile::parse(part.data(), part.size(), "cut");
      INFO(name << " cut at " << cut);
      REQUIRE(!r.ok());
      CHECK(!r.error().empty());
    }
  }
}

TEST_CASE("gguf: corrupted bytes never crash and out-of-range values are named", "[gguf]") {
  std::vector<uint8_t> bytes = read_all(model_path("stories260K.gguf"));
  auto full = GgufFile::parse(bytes.data(), bytes.size());
  REQUIRE(full.ok());
  size_t header_end = (*full)->data_offset();
  std::mt19937 rng(1234);
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> copy = bytes;
    size_t off = rng() % header_end;
    copy[off] ^= static_cast<uint8_t>(1u + rng() % 255);
    if (trial % 3 == 0) copy[(off + 1) % header_end] = 0xff;  // make lengths/counts huge sometimes
    auto r = GgufFile::parse(copy.data(), copy.size(), "corrupt");
    if (!r.ok()) {
      ++refused;
      CHECK(!r.error().empty());
      continue;
    }
    // If it parses, every tensor must still lie inside the buffer.
    for (const GgufTensor& t : (*r)->tensors()) {
      CHECK(t.data + t.n_bytes <= copy.data() + copy.size());
    }
  }
  CHECK(refused > 100);
  // A huge string length inside the tokenizer vocabulary is refused.
  std::vector<uint8_t> copy = bytes;
  uint32_t bad = 0xffffffffu;
  std::memcpy(copy.data() + 28, &bad, 4);  // high half of the first key's 64-bit length (header is 24 bytes)
  auto r = GgufFile::parse(copy.data(), copy.size(), "corrupt");
  REQUIRE(!r.ok());
  CHECK(r.error().find("truncated") != std::string::npos);
}

TEST_CASE("gguf: vocabulary-only files without padding open", "[gguf]") {
  auto f = GgufFile::open(std::string(PICOLM_SHARED_DIR) + "/vocab/ggml-vocab-llama-spm.gguf");
  REQUIRE(f.ok());
  CHECK((*f)->tensors().empty());
  CHECK((*f)->get_string_array("tokenizer.ggml.tokens").size() == 32000);
}

namespace {

// stories260K rewritten with one metadata value replaced (`edit` sets it on the writer), as a file.
std::string stories_with(const std::string& out_name, const std::function<void(GgufWriter&)>& edit) {
  auto f = GgufFile::open(model_path("stories260K.gguf"));
  REQUIRE(f.ok());
  GgufWriter w;
  for (const auto& [key, value] : (*f)->metadata())
    if (key != "general.alignment") w.set_value(key, value);
  edit(w);
  for (const GgufTensor& t : (*f)->tensors()) REQUIRE(w.add_tensor(t.name, t.type, t.ne).ok());
  const std::string path = (std::filesystem::temp_directory_path() / out_name).string();
  REQUIRE(w.begin(path).ok());
  for (const GgufTensor& t : (*f)->tensors()) REQUIRE(w.write_tensor_data(t.data, t.n_bytes).ok());
  REQUIRE(w.finish().ok());
  return path;
}

}  // namespace

TEST_CASE("model: hyper-parameters are range-checked in 64 bits before narrowing", "[gguf]") {
  // The unmodified copy loads (the rewrite itself is sound).
  const std::string same = stories_with("picolm-gguf-same.gguf", [](GgufWriter&) {});
  CHECK(Model::load(same).ok());
  std::filesystem::remove(same);
  // 2^32 + 64 truncated to int32 is 64, stories260K's real width: it must not load as a valid model.
  struct Case {
    const char* key;
    uint64_t value;
  };
  for (const Case c : {Case{"llama.embedding_length", (uint64_t(1) << 32) + 64},
                       Case{"llama.block_count", (uint64_t(1) << 32) + 5},
                       Case{"llama.context_length", (uint64_t(1) << 32) + 128},
                       Case{"llama.feed_forward_length", (uint64_t(1) << 32) + 172},
                       Case{"llama.attention.head_count", ~uint64_t(0)}}) {
    INFO(c.key);
    const std::string path = stories_with("picolm-gguf-u64.gguf", [&](GgufWriter& w) { w.set_u64(c.key, c.value); });
    auto m = Model::load(path);
    std::filesystem::remove(path);
    REQUIRE(!m.ok());
    CHECK_THAT(m.error(), Catch::Contains(c.key));
  }
  // A per-layer array entry out of int32 range is refused the same way.
  const std::string arr = stories_with("picolm-gguf-arr.gguf", [](GgufWriter& w) {
    std::vector<int64_t> kv(5, 8);
    kv[3] = (int64_t(1) << 32) + 8;
    w.set_array("llama.attention.head_count_kv", GgufValueType::INT64, kv.data(), kv.size());
  });
  auto m = Model::load(arr);
  std::filesystem::remove(arr);
  REQUIRE(!m.ok());
  CHECK_THAT(m.error(), Catch::Contains("head_count_kv"));
}
