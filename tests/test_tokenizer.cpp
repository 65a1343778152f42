// Tokenizer tests: llama.cpp's vocabulary test pairs (Hugging Face reference ids), the golden
// prompts produced by llama.cpp, and streaming detokenization.
#include <catch2/catch.hpp>
#include <simdjson.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gguf.h"
#include "gguf_writer.h"
#include "tokenizer.h"
#include "tokenizer_pretok.h"
#include "unicode.h"

using namespace picolm;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());  // a missing input fails the test, it does not skip it
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Loaded {
  std::vector<uint8_t> buffer;  // backing store when the file was parsed from memory
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& rel) {
  Loaded l;
  auto g = GgufFile::open(kShared + "/" + rel);
  if (!g.ok() && rel.rfind("vocab/", 0) == 0) {
    // llama.cpp's vocabulary-only files end right after the metadata, without the padding up to
    // the (empty) data section; llama.cpp accepts them. Parse such a file from a padded copy.
    const std::string bytes = read_file(kShared + "/" + rel);
    l.buffer.assign(bytes.begin(), bytes.end());
    l.buffer.resize((l.buffer.size() + 63) / 64 * 64 + 64, 0);
    g = GgufFile::parse(l.buffer.data(), l.buffer.size(), rel);
  }
  INFO(rel << ": " << (g.ok() ? "" : g.error()));
  REQUIRE(g.ok());
  auto t = Tokenizer::create(*g.value());
  INFO(rel << ": " << (t.ok() ? "" : t.error()));
  REQUIRE(t.ok());
  l.gguf = std::move(g.value());
  l.tok = std::move(t.value());
  return l;
}

std::vector<std::string> split_cases(const std::string& inp) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  size_t pos = 0;
  while (true) {
    const size_t e = inp.find(sep, pos);
    if (e == std::string::npos) break;
    cases.push_back(inp.substr(pos, e - pos));
    pos = e + sep.size();
  }
  return cases;
}

std::vector<std::vector<int32_t>> parse_out(const std::string& out) {
  std::vector<std::vector<int32_t>> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<int32_t> ids;
    std::istringstream ls(line);
    int64_t v;
    while (ls >> v) ids.push_back(static_cast<int32_t>(v));
    lines.push_back(std::move(ids));
  }
  return lines;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

std::string hex_decode(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  sanitize_utf8(s, false, out);
  return out;
}

std::vector<int32_t> json_ids(simdjson::dom::element e) {
  std::vector<int32_t> ids;
  for (simdjson::dom::element x : e.get_array()) ids.push_back(static_cast<int32_t>(int64_t(x)));
  return ids;
}

}  // namespace

TEST_CASE("unicode tables and GPT-2 byte mapping", "[tokenizer]") {
  CHECK(unicode_flags('a').is_letter());
  CHECK(unicode_flags('7').is_number());
  CHECK(unicode_flags('!').is_punctuation());
  CHECK(!unicode_flags('$').is_punctuation());  // Sc, a symbol
  CHECK(unicode_flags(' ').is_whitespace());
  CHECK(unicode_flags(0x3000).is_whitespace());
  CHECK(!unicode_flags(0x1C).is_whitespace());  // str.isspace() says yes; White_Space says no
  CHECK(unicode_flags(0x4F60).is_letter());     // 你
  CHECK(unicode_flags(0x0663).is_number());     // ARABIC-INDIC DIGIT THREE
  CHECK(unicode_flags(0x1F600).category() == UnicodeCategory::Symbol);
  for (int b = 0; b < 256; ++b) CHECK(gpt2_codepoint_to_byte(gpt2_byte_to_codepoint(static_cast<uint8_t>(b))) == b);
  CHECK(gpt2_byte_to_codepoint(' ') == 0x120);  // 'Ġ'
  CHECK(gpt2_byte_to_codepoint('\n') == 0x10A);  // 'Ċ'
}

TEST_CASE("character classes parse the upstream regex text", "[tokenizer]") {
  auto c = CharClass::parse(R"([^\s\p{L}\p{N}])");
  REQUIRE(c.ok());
  CHECK(c->contains('!', unicode_flags('!')));
  CHECK(!c->contains('a', unicode_flags('a')));
  CHECK(!c->contains(' ', unicode_flags(' ')));
  auto r = CharClass::parse("[\xE4\xB8\x80-\xE9\xBE\xA5]");  // [一-龥]
  REQUIRE(r.ok());
  CHECK(r->contains(0x4F60, unicode_flags(0x4F60)));
  CHECK(!r->contains('a', unicode_flags('a')));
  CHECK(!CharClass::parse("[a-").ok());
  CHECK(!PreTokenizer::for_name("no-such-pre").ok());
}

TEST_CASE("pre-tokenizer regex shapes", "[tokenizer]") {
  auto words = [](const char* pre, std::string_view text) {
    auto pt = PreTokenizer::for_name(pre);
    REQUIRE(pt.ok());
    std::vector<std::string> w;
    pt->split(text, w);
    return w;
  };
  using V = std::vector<std::string>;
  CHECK(words("gpt-2", "Hello  world's\t\tx") == V{"Hello", " ", " world", "'s", "\t", "\t", "x"});
  CHECK(words("llama-bpe", "x 12345\n\n  y") == V{"x", " ", "123", "45", "\n\n", " ", " y"});
  CHECK(words("qwen2", "x 12345") == V{"x", " ", "1", "2", "3", "4", "5"});
  CHECK(words("qwen2", "I'M ok!!\n") == V{"I", "'M", " ok", "!!\n"});
  CHECK(words("starcoder", "ab12 c") == V{"ab", "1", "2", " c"});
  CHECK(words("default", "a+b=1234") == V{"a", "+", "b", "=", "123", "4"});
  // deepseek-llm: llama.cpp matches the literal ranges after turning non-ASCII spaces into U+000B,
  // so U+3000 starts a "\s?[...]+" match but is not itself in the range U+3000..U+3002.
  CHECK(words("deepseek-llm", "\xE3\x80\x80\xE3\x80\x80!") == V{"\xE3\x80\x80", "\xE3\x80\x80!"});
  CHECK(words("deepseek-coder", "ab\n12") == V{"ab", "\n", "1", "2"});
  // Ill-formed UTF-8 becomes U+FFFD before splitting, as in llama.cpp.
  CHECK(words("gpt-2", "a\xFF") == V{"a", "\xEF\xBF\xBD"});
}

TEST_CASE("llama.cpp vocabulary test pairs", "[tokenizer]") {
  struct Pair {
    const char* name;   // ggml-vocab-<name>.gguf.inp/.out, or stories260K.gguf
    const char* vocab;  // relative to the shared folder
  };
  const Pair pairs[] = {
      {"ggml-vocab-llama-spm", "models/llama-spm32k-q4km.gguf"},
      {"ggml-vocab-llama-spm", "vocab/ggml-vocab-llama-spm.gguf"},
      {"ggml-vocab-phi-3", "models/llama-spm32k-q4km.gguf"},
      {"ggml-vocab-phi-3", "vocab/ggml-vocab-phi-3.gguf"},
      {"ggml-vocab-qwen2", "models/qwen2-bpe-q4km.gguf"},
      {"ggml-vocab-deepseek-r1-qwen", "models/qwen2-bpe-q4km.gguf"},
      {"stories260K", "models/stories260K.gguf"},
      {"ggml-vocab-deepseek-coder", "vocab/ggml-vocab-deepseek-coder.gguf"},
      {"ggml-vocab-deepseek-llm", "vocab/ggml-vocab-deepseek-llm.gguf"},
      {"ggml-vocab-falcon", "vocab/ggml-vocab-falcon.gguf"},
      {"ggml-vocab-gpt-2", "vocab/ggml-vocab-gpt-2.gguf"},
      {"ggml-vocab-mpt", "vocab/ggml-vocab-mpt.gguf"},
      {"ggml-vocab-refact", "vocab/ggml-vocab-refact.gguf"},
      {"ggml-vocab-starcoder", "vocab/ggml-vocab-starcoder.gguf"},
  };
  for (const Pair& p : pairs) {
    const std::string base = kShared + "/vocab/" + p.name + ".gguf";
    const auto cases = split_cases(read_file(base + ".inp"));
    const auto expect = parse_out(read_file(base + ".out"));
    REQUIRE(cases.size() == 46);
    REQUIRE(expect.size() == cases.size());
    Loaded l = load(p.vocab);
    int pass = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto got = l.tok->encode(cases[i], /*add_special=*/false, /*parse_special=*/false);
      INFO(p.name << " with " << p.vocab << " case " << i << " text [" << cases[i] << "]\n  got " << ids_str(got)
                  << "\n want " << ids_str(expect[i]));
      CHECK(got == expect[i]);
      if (got == expect[i]) ++pass;
      // Detokenizing gives the input back: byte-level BPE is lossless, SentencePiece adds the
      // prefix space and falls back to bytes for anything else.
      const bool spm = l.tok->token_text(l.tok->n_vocab() > 3 ? 3 : 0) == "<0x00>";
      CHECK(l.tok->decode(got, false) == (spm && !cases[i].empty() ? " " + cases[i] : cases[i]));
    }
    std::printf("vocab pairs %-28s with %-34s %2d/%zu pass\n", p.name, p.vocab, pass, cases.size());
  }
}

TEST_CASE("vocabularies without test pairs load and round-trip", "[tokenizer]") {
  const auto cases = split_cases(read_file(kShared + "/vocab/ggml-vocab-gpt-2.gguf.inp"));
  REQUIRE(cases.size() == 46);
  for (const char* rel : {"vocab/ggml-vocab-gpt-neox.gguf", "vocab/ggml-vocab-baichuan.gguf"}) {
    Loaded l = load(rel);
    const bool spm = std::string(rel).find("baichuan") != std::string::npos;
    for (const std::string& c : cases) {
      INFO(rel << " [" << c << "]");
      const auto ids = l.tok->encode(c, false, false);
      CHECK(l.tok->decode(ids, false) == (spm && !c.empty() ? " " + c : c));
    }
  }
  // WordPiece (BERT) is not supported: a clear error, not a wrong tokenizer.
  const std::string bytes = read_file(kShared + "/vocab/ggml-vocab-bert-bge.gguf");
  std::vector<uint8_t> buf(bytes.begin(), bytes.end());
  buf.resize(buf.size() + 128, 0);
  auto g = GgufFile::parse(buf.data(), buf.size(), "bert-bge");
  REQUIRE(g.ok());
  auto t = Tokenizer::create(*g.value());
  REQUIRE(!t.ok());
  CHECK(t.error().find("bert") != std::string::npos);
}

TEST_CASE("golden prompts from llama.cpp", "[tokenizer]") {
  std::vector<std::pair<std::string, std::string>> files = {
      {"golden/stories260K.json", "models/stories260K.gguf"},
      {"golden/llama-spm32k-q4km.json", "models/llama-spm32k-q4km.gguf"},
      {"golden/qwen2-bpe-q4km.json", "models/qwen2-bpe-q4km.gguf"},
  };
  // The zoo models share stories260K's vocabulary; their greedy continuations differ.
  for (const char* t : {"BF16", "F16", "Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"}) {
    files.emplace_back(std::string("golden/zoo-") + t + ".json", std::string("models/zoo-") + t + ".gguf");
  }
  for (const auto& [json_rel, model_rel] : files) {
    read_file(kShared + "/" + json_rel);  // fail loudly when missing
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.load(kShared + "/" + json_rel);
    Loaded l = load(model_rel);
    const Tokenizer& tok = *l.tok;
    CHECK(tok.n_vocab() == int64_t(doc["n_vocab"]));
    CHECK(tok.bos_id() == int64_t(doc["bos_id"]));
    CHECK(tok.eos_id() == int64_t(doc["eos_id"]));
    CHECK(tok.add_bos() == bool(doc["add_bos"]));
    int n = 0;
    for (simdjson::dom::element p : doc["prompts"].get_array()) {
      const std::string text = hex_decode(std::string_view(p["text_hex"]));
      INFO(json_rel << " prompt " << int64_t(p["index"]) << " [" << text << "]");
      const auto tokens = json_ids(p["tokens"]);
      CHECK(tok.encode(text, true, true) == tokens);
      CHECK(tok.encode(text, true, false) == json_ids(p["tokens_parse_special_false"]));
      CHECK(tok.encode(text, false, true) == json_ids(p["tokens_add_special_false"]));
      CHECK(tok.decode(tokens, true) == std::string_view(p["detokenized"]));
      size_t i = 0;
      for (simdjson::dom::element piece : p["token_pieces"].get_array()) {
        REQUIRE(i < tokens.size());
        CHECK(valid_utf8(tok.token_to_piece(tokens[i], true)) == std::string_view(piece));
        ++i;
      }
      ++n;
    }
    CHECK(n >= 3);
    // Greedy continuations: text_hex is the concatenation of token_to_piece(special = false).
    for (auto run : doc["runs"].get_object()) {
      for (simdjson::dom::element p : run.value["prompts"].get_array()) {
        const auto ids = json_ids(p["greedy"]["tokens"]);
        CHECK(tok.decode(ids, false) == hex_decode(std::string_view(p["greedy"]["text_hex"])));
      }
    }
  }
}

TEST_CASE("special tokens, end of generation, fingerprints", "[tokenizer]") {
  Loaded q = load("models/qwen2-bpe-q4km.gguf");
  const Tokenizer& tok = *q.tok;
  const int32_t im_start = tok.find_token("<|im_start|>");
  const int32_t im_end = tok.find_token("<|im_end|>");
  const int32_t eot = tok.find_token("<|endoftext|>");
  REQUIRE(im_start >= 0);
  REQUIRE(im_end >= 0);
  REQUIRE(eot >= 0);
  CHECK(tok.is_eog(im_end));
  CHECK(tok.is_eog(eot));
  CHECK(!tok.is_eog(im_start));
  CHECK(tok.token_type(im_start) == TokenType::Control);
  CHECK(tok.token_to_piece(im_start, false).empty());
  CHECK(tok.token_to_piece(im_start, true) == "<|im_start|>");
  const auto ids = tok.encode("<|im_start|>user\nhi<|im_end|>", false, true);
  REQUIRE(ids.size() >= 3);
  CHECK(ids.front() == im_start);
  CHECK(ids.back() == im_end);
  // Without parse_special the marker is ordinary text.
  const auto plain = tok.encode("<|im_start|>", false, false);
  CHECK(plain.size() > 1);
  CHECK(tok.decode(plain, false) == "<|im_start|>");
  // Tool-call tags are user-defined tokens: split out even without parse_special (llama.cpp and
  // Hugging Face treat added tokens so) and visible in special = false output.
  const int32_t tc = tok.find_token("<tool_call>");
  REQUIRE(tc == 151657);
  CHECK(tok.token_type(tc) == TokenType::UserDefined);
  CHECK(tok.encode("a<tool_call>{", false, false).size() == 3);
  CHECK(tok.encode("<tool_call>", false, false) == std::vector<int32_t>{tc});
  CHECK(tok.token_to_piece(tc, false) == "<tool_call>");
  // Ill-formed UTF-8 input is tokenized (as U+FFFD, like llama.cpp) without failing.
  CHECK(!tok.encode("x\xC3(\xFF", true, true).empty());

  Loaded s = load("models/stories260K.gguf");
  CHECK(s.tok->is_eog(s.tok->eos_id()));
  CHECK(s.tok->encode("</s>", false, true) == std::vector<int32_t>{s.tok->eos_id()});
  CHECK(s.tok->encode("</s>", false, false).size() > 1);
  CHECK(s.tok->token_to_piece(s.tok->eos_id(), false).empty());
  CHECK(s.tok->decode(s.tok->encode("x\xC3(\xFF", false, false), false) == " x\xC3(\xFF");  // byte fallback keeps the bytes
  CHECK(s.tok->encode("", true, true) == std::vector<int32_t>{s.tok->bos_id()});
  CHECK(s.tok->encode("", false, true).empty());
  Loaded q2 = load("models/qwen2-bpe-q4km.gguf");
  CHECK(tok.fingerprint() == q2.tok->fingerprint());
  CHECK(tok.fingerprint() != s.tok->fingerprint());
  Loaded z = load("models/zoo-Q4_0.gguf");
  CHECK(z.tok->fingerprint() == s.tok->fingerprint());  // the zoo models share stories260K's vocabulary
}

TEST_CASE("streaming decode holds back partial UTF-8", "[tokenizer]") {
  const std::string text = "Hi \xC3\xA9 \xF0\x9F\x98\x80 \xE4\xBD\xA0\xE5\xA5\xBD! \xF0\x9F\x8E\x89\xF0\x9F\x8E\x89 end";
  for (const char* model : {"models/stories260K.gguf", "models/llama-spm32k-q4km.gguf", "models/qwen2-bpe-q4km.gguf"}) {
    INFO(model);
    Loaded l = load(model);
    const auto ids = l.tok->encode(text, false, false);
    const std::string whole = l.tok->decode(ids, false);
    StreamDecoder sd(*l.tok);
    std::string streamed;
    size_t held_back = 0;
    for (int32_t id : ids) {
      const std::string part = sd.push(id);
      CHECK(valid_utf8(part) == part);  // every chunk is valid UTF-8 on its own
      if (part.empty()) ++held_back;
      streamed += part;
    }
    streamed += sd.flush();
    CHECK(streamed == whole);
    CHECK(whole.find("\xF0\x9F\x98\x80") != std::string::npos);
    if (std::string(model).find("stories") != std::string::npos) CHECK(held_back >= 3);  // byte-fallback emoji
  }
  // An ill-formed sequence is replaced, never passed through.
  Loaded s = load("models/stories260K.gguf");
  StreamDecoder sd(*s.tok);
  const int32_t b_f0 = s.tok->find_token("<0xF0>");
  const int32_t b_41 = s.tok->find_token("<0x41>");
  REQUIRE(b_f0 >= 0);
  REQUIRE(b_41 >= 0);
  CHECK(sd.push(b_f0).empty());
  CHECK(sd.push(b_41) == "\xEF\xBF\xBD" "A");
  CHECK(sd.push(b_f0).empty());
  CHECK(sd.flush() == "\xEF\xBF\xBD");
}

// The GPT-4o (o200k) pre-tokenizer of Phi-4-mini. No o200k vocabulary is at hand, so GPT-2's
// vocabulary is retagged tokenizer.ggml.pre = "gpt-4o": its merges then run on GPT-4o's splits,
// and the ids show every split boundary that differs from GPT-2's. The expected ids are llama.cpp
// 66d65ec's on the same retagged file (tests/golden/gpt4o-pretok*.out, tools/golden/README.md): the
// 46 shared cases and 30 more on case changes inside words (HTTPServer, ÉAB), non-ASCII letters
// (both "upper" and "lower" in llama.cpp's form of the regex), contractions in any case, marks,
// digits in other scripts, '/' and newlines after punctuation.
TEST_CASE("gpt-4o pre-tokenizer: GPT-2's vocabulary retagged gives llama.cpp's ids", "[tokenizer]") {
  const std::string bytes = read_file(kShared + "/vocab/ggml-vocab-gpt-2.gguf");
  std::vector<uint8_t> padded(bytes.begin(), bytes.end());
  padded.resize((padded.size() + 63) / 64 * 64 + 64, 0);  // vocabulary-only file: see load()
  auto src = GgufFile::parse(padded.data(), padded.size(), "ggml-vocab-gpt-2.gguf");
  REQUIRE(src.ok());
  GgufWriter w;
  for (const auto& [key, val] : src.value()->metadata())
    if (key != "tokenizer.ggml.pre") w.set_value(key, val);
  w.set_string("tokenizer.ggml.pre", "gpt-4o");
  REQUIRE(w.begin_memory().ok());
  REQUIRE(w.finish().ok());
  auto g = GgufFile::parse(w.buffer().data(), w.buffer().size(), "gpt2-as-gpt4o");
  REQUIRE(g.ok());
  auto tok = Tokenizer::create(*g.value());
  INFO((tok.ok() ? "" : tok.error()));
  REQUIRE(tok.ok());
  const std::string here = std::string(PICOLM_TEST_DATA_DIR) + "/golden/";
  struct Set {
    std::string inp, out;
    size_t n;
  };
  for (const Set& set : {Set{kShared + "/vocab/ggml-vocab-gpt-2.gguf.inp", here + "gpt4o-pretok-gpt2-46.out", 46},
                         Set{here + "gpt4o-pretok.inp", here + "gpt4o-pretok.out", 30}}) {
    const auto cases = split_cases(read_file(set.inp));
    const auto expect = parse_out(read_file(set.out));
    REQUIRE(cases.size() == set.n);
    REQUIRE(expect.size() == cases.size());
    int pass = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto got = tok.value()->encode(cases[i], /*add_special=*/false, /*parse_special=*/false);
      INFO(set.inp << " case " << i << " text [" << cases[i] << "]\n  got " << ids_str(got) << "\n want "
                   << ids_str(expect[i]));
      CHECK(got == expect[i]);
      pass += got == expect[i];
      CHECK(tok.value()->decode(got, false) == cases[i]);
    }
    std::printf("gpt-4o pre-tokenizer on %s: %d/%zu as llama.cpp\n", set.inp.c_str(), pass, cases.size());
  }
}

// Gemma 4's tokenizer type ("gemma4": BPE by merge rank over raw UTF-8 with spaces as U+2581, split
// only at runs of newlines, "<0xXX>" byte fallback, BOS always added). tests/models/gemma4-vocab.gguf is a
// small vocabulary of that type (tools/golden/synth_gemma4_vocab.py); the ids are llama.cpp 3f545be's
// (llama-tokenize on a tiny gemma4 model carrying it, add_special and parse_special as here).
TEST_CASE("gemma4 tokenizer: ids equal llama.cpp's and decode gives the text back", "[tokenizer][gemma4]") {
  auto g = GgufFile::open(std::string(PICOLM_SOURCE_DIR) + "/tests/models/gemma4-vocab.gguf");
  REQUIRE(g.ok());
  auto t = Tokenizer::create(*g.value());
  REQUIRE(t.ok());
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"Once upon a time, Lily saw a ball.", {2, 336, 347, 295, 291, 290, 328, 277, 305, 285, 288, 281, 314, 335, 293, 277, 297, 301, 341, 278, 337, 287, 269}},
      {"Hi é 😀 Tom", {2, 76, 285, 301, 199, 173, 301, 244, 163, 156, 132, 301, 275, 290, 288}},
      {"  two  spaces  and a\nnewline", {2, 301, 305, 297, 290, 331, 293, 291, 277, 279, 281, 293, 301, 365, 277, 302, 289, 281, 297, 287, 312, 281}},
      {"a\n\nb\n\n\nc\n", {2, 277, 303, 278, 302, 302, 302, 279, 302}},
      {"<|turn>user\nWhat is the weather in Paris?<turn|>\n<|turn>model\n", {2, 260, 295, 293, 317, 302, 91, 284, 277, 294, 301, 285, 293, 307, 297, 281, 277, 294, 352, 301, 312, 301, 273, 310, 285, 293, 67, 261, 302, 260, 288, 290, 280, 281, 287, 302}},
      {"<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>", {2, 262, 279, 337, 287, 270, 283, 351, 276, 297, 281, 277, 294, 352, 299, 279, 320, 298, 270, 264, 273, 310, 285, 293, 264, 300, 263}},
      {"ZQXJ zebra quiz", {2, 94, 85, 92, 78, 301, 126, 281, 278, 292, 341, 117, 295, 285, 126}},
      {"\ttab\r\nwindows", {2, 13, 294, 277, 278, 17, 302, 297, 312, 349, 297, 293}},
      {"def main():\n    return {\"name\": \"get_weather\"}", {2, 280, 281, 282, 301, 288, 277, 312, 266, 267, 270, 302, 331, 331, 292, 351, 295, 292, 328, 364, 354, 281, 332, 283, 351, 276, 297, 281, 277, 294, 352, 265, 300}},
      {"ééé", {2, 199, 173, 199, 173, 199, 173}},
      {" ", {2, 301}},
      {"\n", {2, 302}},
  };
  for (const auto& [text, ids] : cases) {
    INFO(text);
    const std::vector<int32_t> got = t.value()->encode(text, /*add_special=*/true, /*parse_special=*/true);
    CHECK(got == ids);
    // Without the BOS, the pieces (special tokens as their text, byte tokens as their bytes) are the text.
    CHECK(t.value()->decode(std::vector<int32_t>(got.begin() + 1, got.end()), /*special=*/true) == text);
  }
  // End of generation: <eos> (the file's EOS), and as in llama.cpp <turn|> (end of a turn) and
  // <|tool_response> (a tool call is complete); <|turn> is not.
  const Tokenizer& tk = *t.value();
  CHECK(tk.is_eog(tk.find_token("<eos>")));
  CHECK(tk.is_eog(tk.find_token("<turn|>")));
  CHECK(!tk.is_eog(tk.find_token("<|turn>")));
  CHECK(tk.is_eog(tk.find_token("<|tool_response>")) == (tk.find_token("<|tool_response>") >= 0));
}
