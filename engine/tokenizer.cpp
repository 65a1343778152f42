// Tokenizers over GGUF vocabularies. The algorithms follow llama.cpp (src/llama-vocab.cpp) so that
// token ids match it exactly: the SentencePiece merge by best score with byte fallback, the GPT-2
// byte-level BPE by merge rank after a regex pre-tokenizer, and the special-token partition that
// runs before both.
#include "tokenizer.h"

#include <algorithm>
#include <array>
#include <bitset>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <queue>

#include "gguf.h"
#include "tokenizer_pretok.h"
#include "unicode.h"

namespace picolm {

namespace {

// "▁" (U+2581): SentencePiece's visible space.
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

struct TokenData {
  std::string text;
  float score = 0.0f;
  TokenType type = TokenType::Normal;
  bool lstrip = false;  // special-token partition eats whitespace left of a match
  bool rstrip = false;  // ... and right of it
};

// Open-addressing hash index from strings to dense ids (the strings are owned elsewhere and must
// not move). Built once; lookups are one hash and, usually, one probe. Replaces unordered_map,
// whose node-per-entry layout made loading a 150k-token vocabulary several times slower.
class StringIndex {
 public:
  enum class Duplicates { KeepFirst, KeepLast };
  void reserve(size_t n) {
    keys_.reserve(n);
    ids_.reserve(n);
    while (slots_.size() < 2 * n) grow();
  }
  void insert(std::string_view key, int32_t id, Duplicates dup) {
    if (2 * (keys_.size() + 1) > slots_.size()) grow();  // keeps the load factor <= 1/2
    const uint64_t h = hash(key);
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const uint64_t s = slots_[i];
      if (s == 0) {
        keys_.push_back(key);
        ids_.push_back(id);
        slots_[i] = (h & 0xFFFFFFFF00000000ull) | static_cast<uint32_t>(keys_.size());
        return;
      }
      const uint32_t k = static_cast<uint32_t>(s) - 1;
      if ((s >> 32) == (h >> 32) && keys_[k] == key) {
        if (dup == Duplicates::KeepLast) ids_[k] = id;
        return;
      }
    }
  }
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(key);
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const uint64_t s = slots_[i];
      if (s == 0) return -1;
      const uint32_t k = static_cast<uint32_t>(s) - 1;
      if ((s >> 32) == (h >> 32) && keys_[k] == key) return ids_[k];
    }
  }

 private:
  void grow() {
    std::vector<uint64_t> old = std::move(slots_);
    slots_.assign(std::max<size_t>(16, old.size() * 2), 0);
    for (uint64_t s : old) {
      if (s == 0) continue;
      size_t i = hash(keys_[static_cast<uint32_t>(s) - 1]) & (slots_.size() - 1);
      while (slots_[i] != 0) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = s;
    }
  }
  static uint64_t hash(std::string_view s) {
    // FNV-1a over the bytes, then a final avalanche so that both the low bits (slot) and the
    // high bits (tag) depend on every byte.
    uint64_t h = 0xCBF29CE484222325ull;
    for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return h;
  }
  std::vector<uint64_t> slots_;  // [capacity] tag (high 32 bits of the hash) | entry index + 1; 0 = empty
  std::vector<std::string_view> keys_;  // [entries]
  std::vector<int32_t> ids_;            // [entries]
};

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// A piece of the input after the special-token partition: raw text or one special token.
struct Fragment {
  int32_t token = -1;  // -1: text [off, off + len)
  size_t off = 0;
  size_t len = 0;
};

class Fnv1a {
 public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ b[i]) * 0x100000001B3ull;
  }
  void str(std::string_view s) {
    const uint64_t n = s.size();
    bytes(&n, sizeof n);
    bytes(s.data(), s.size());
  }
  template <class T>
  void pod(const T& v) { bytes(&v, sizeof v); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xCBF29CE484222325ull;
};

enum class VocabKind { Spm, Bpe };

class VocabTokenizer final : public Tokenizer {
 public:
  Status load(const GgufFile& g);

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              std::span<const std::pair<size_t, size_t>> plain) const override;
  std::vector<std::pair<size_t, size_t>> find_control_text(std::string_view text) const override;
  std::string token_to_piece(int32_t id, bool special) const override {
    if (id < 0 || id >= n_vocab()) return {};
    const TokenType t = tokens_[id].type;
    if (!special && (t == TokenType::Control || t == TokenType::Unknown)) return {};
    return make_piece(id);
  }
  int32_t n_vocab() const override { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  bool add_bos() const override { return add_bos_; }
  bool add_eos() const override { return add_eos_; }
  TokenType token_type(int32_t id) const override {
    return id >= 0 && id < n_vocab() ? tokens_[id].type : TokenType::Undefined;
  }
  const std::string& token_text(int32_t id) const override {
    static const std::string kEmpty;  // immutable; for out-of-range ids only
    return id >= 0 && id < n_vocab() ? tokens_[id].text : kEmpty;
  }
  const std::vector<int32_t>& eog_ids() const override { return eog_; }
  int32_t find_token(std::string_view text) const override { return text_to_token(text); }
  uint64_t fingerprint() const override { return fingerprint_; }

 private:
  int32_t text_to_token(std::string_view s) const {
    return token_to_id_.find(s);
  }
  void partition(std::string_view text, bool parse_special, std::span<const std::pair<size_t, size_t>> plain,
                 std::vector<Fragment>& frags) const;
  std::vector<int32_t> encode_fragments(std::string_view text, bool add_special,
                                        const std::vector<Fragment>& frags) const;
  void spm_tokenize(std::string_view text, std::vector<int32_t>& out) const;
  void bpe_tokenize(std::string_view text, std::vector<int32_t>& out) const;
  std::string make_piece(int32_t id) const;

  VocabKind kind_ = VocabKind::Spm;
  std::string model_name_, pre_name_;
  std::vector<TokenData> tokens_;  // [n_vocab]; never resized after load (token_to_id_ points into it)
  StringIndex token_to_id_;  // text -> id; keys point into tokens_
  std::string merge_keys_;   // all merges as "left\0right", back to back
  StringIndex merge_rank_;   // "left\0right" -> rank; keys point into merge_keys_
  std::vector<int32_t> special_tokens_;  // Control / UserDefined / Unknown ids, longest text first
  std::vector<int32_t> eog_;
  std::array<int32_t, 256> byte_token_{};     // SPM: id of "<0xXX>", -1 if absent (unused for BPE)
  std::array<std::string, 256> byte_chars_;   // BPE: GPT-2 code point of each byte, as UTF-8
  PreTokenizer pretok_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1, eot_ = -1, eom_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false, ignore_merges_ = false;
  // Gemma 4's "SPM-style BPE" (tokenizer.ggml.model "gemma4"): merges by rank over the raw UTF-8
  // characters (no byte-level mapping) of text whose spaces are written U+2581, split only into runs
  // of newlines and runs of anything else; byte fallback through "<0xXX>" tokens (llama.cpp 3f545be).
  bool spm_bpe_ = false;
  uint64_t fingerprint_ = 0;
};

Status VocabTokenizer::load(const GgufFile& g) {
  const auto model = g.get_string("tokenizer.ggml.model");
  if (!model) return Error{g.name() + ": no tokenizer.ggml.model"};
  model_name_ = std::string(*model);
  pre_name_ = std::string(g.get_string("tokenizer.ggml.pre").value_or(""));
  if (model_name_ == "llama") {
    kind_ = VocabKind::Spm;
    bos_ = 1, eos_ = 2, unk_ = 0;  // llama.cpp's defaults for SentencePiece vocabularies
    add_bos_ = true;
    add_space_prefix_ = true;
  } else if (model_name_ == "gemma4") {
    kind_ = VocabKind::Bpe;
    spm_bpe_ = true;
  } else if (model_name_ == "gpt2") {
    kind_ = VocabKind::Bpe;
    // llama.cpp defaults BOS/EOS to 11 here, a GPT-2-era placeholder; we leave them unset so a file
    // without the keys cannot make an arbitrary token end generation.
    auto pt = PreTokenizer::for_name(pre_name_);
    if (!pt.ok()) return Error{g.name() + ": " + pt.error()};
    pretok_ = std::move(pt.value());
    static constexpr std::string_view kLlama3Names[] = {"llama3", "llama-v3", "llama-bpe", "falcon3"};
    for (auto n : kLlama3Names) {
      if (pre_name_ == n) ignore_merges_ = add_bos_ = true;
    }
  } else {
    return Error{g.name() + ": unsupported tokenizer.ggml.model '" + model_name_ + "' (supported: llama, gpt2, gemma4)"};
  }
  if (auto v = g.get_bool("tokenizer.ggml.add_space_prefix")) add_space_prefix_ = *v;

  const auto texts = g.get_string_array("tokenizer.ggml.tokens");
  if (texts.empty()) return Error{g.name() + ": tokenizer.ggml.tokens is missing or empty"};
  const auto scores = g.get_f32_array("tokenizer.ggml.scores");
  const auto types = g.get_i32_array("tokenizer.ggml.token_type");
  if (!scores.empty() && scores.size() != texts.size())
    return Error{g.name() + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries, tokens has " + std::to_string(texts.size())};
  if (!types.empty() && types.size() != texts.size())
    return Error{g.name() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries, tokens has " + std::to_string(texts.size())};
  if (texts.size() > static_cast<size_t>(INT32_MAX)) return Error{g.name() + ": vocabulary too large"};

  const size_t n = texts.size();
  tokens_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = tokens_[i];
    t.text = texts[i].empty() ? "[EMPTY_" + std::to_string(i) + "]" : std::string(texts[i]);
    t.score = scores.empty() ? 0.0f : scores[i];
    t.type = TokenType::Normal;
    if (!types.empty()) t.type = (types[i] >= 1 && types[i] <= 6) ? static_cast<TokenType>(types[i]) : TokenType::Undefined;
  }
  token_to_id_.reserve(n);
  // A repeated text maps to its last id, as in llama.cpp.
  for (size_t i = 0; i < n; ++i) token_to_id_.insert(tokens_[i].text, static_cast<int32_t>(i), StringIndex::Duplicates::KeepLast);

  if (kind_ == VocabKind::Bpe) {
    const auto merges = g.get_string_array("tokenizer.ggml.merges");
    if (merges.empty()) return Error{g.name() + ": tokenizer.ggml.merges is missing (needed by a gpt2 vocabulary)"};
    // Split each merge at the first space after its first byte, as llama.cpp does (a merge may
    // start with ' '). A merge without a separator becomes ("", ""), which can never apply.
    size_t total = 0;
    for (auto m : merges) total += m.size() + 1;
    merge_keys_.reserve(total);  // no reallocation below: the index keeps views into it
    std::vector<std::pair<size_t, size_t>> spans;
    spans.reserve(merges.size());
    for (const std::string_view m : merges) {
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
      const size_t at = merge_keys_.size();
      if (sp != std::string_view::npos) {
        merge_keys_.append(m.substr(0, sp));
        merge_keys_.push_back('\0');
        merge_keys_.append(m.substr(sp + 1));
      } else {
        merge_keys_.push_back('\0');
      }
      spans.emplace_back(at, merge_keys_.size() - at);
    }
    merge_rank_.reserve(merges.size());
    for (size_t i = 0; i < spans.size(); ++i) {  // the first occurrence of a pair keeps its rank
      merge_rank_.insert(std::string_view(merge_keys_).substr(spans[i].first, spans[i].second), static_cast<int32_t>(i),
                         StringIndex::Duplicates::KeepFirst);
    }
    for (int b = 0; b < 256; ++b) {
      byte_chars_[b].clear();
      if (spm_bpe_) byte_chars_[b].push_back(static_cast<char>(b));  // raw UTF-8
      else append_utf8(byte_chars_[b], gpt2_byte_to_codepoint(static_cast<uint8_t>(b)));
    }
  }
  if (kind_ == VocabKind::Spm || spm_bpe_) {
    byte_token_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      int32_t id = text_to_token(buf);
      if (id < 0 && !spm_bpe_) id = text_to_token(std::string(1, static_cast<char>(b)));  // vocabularies without byte tokens
      byte_token_[b] = id;
    }
  }

  // Special token ids; out-of-range values (e.g. 0xFFFFFFFF for "none") are ignored.
  auto read_id = [&](const char* key, int32_t& id) {
    if (auto v = g.get_int(key)) {
      if (*v >= 0 && *v < static_cast<int64_t>(n)) id = static_cast<int32_t>(*v);
    }
  };
  read_id("tokenizer.ggml.bos_token_id", bos_);
  read_id("tokenizer.ggml.eos_token_id", eos_);
  read_id("tokenizer.ggml.unknown_token_id", unk_);
  read_id("tokenizer.ggml.eot_token_id", eot_);
  read_id("tokenizer.ggml.eom_token_id", eom_);
  if (bos_ >= static_cast<int32_t>(n)) bos_ = -1;
  if (eos_ >= static_cast<int32_t>(n)) eos_ = -1;
  if (unk_ >= static_cast<int32_t>(n)) unk_ = -1;
  if (auto v = g.get_bool("tokenizer.ggml.add_bos_token")) add_bos_ = *v;
  if (auto v = g.get_bool("tokenizer.ggml.add_eos_token")) add_eos_ = *v;
  if (spm_bpe_) add_bos_ = true;  // llama.cpp overrides a false add_bos_token for Gemma 4

  // End of generation: llama.cpp recognises these texts (end of turn / message, and the FIM
  // padding, repository and file separators) and forces them to Control, which also changes how
  // the special-token partition and token_to_piece treat them.
  static constexpr std::string_view kEotTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                                  "<EOT>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"};
  static constexpr std::string_view kEogTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                                  "<|endoftext|>", "<|eom_id|>", "<EOT>"};
  static constexpr std::string_view kFimEogTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|repo_name|>",
                                                     "<fim-repo>", "<reponame>", "<|file_sep|>", "<fim-sep>", "<file_sep>"};
  auto contains = [](auto& list, std::string_view s) { return std::find(std::begin(list), std::end(list), s) != std::end(list); };
  std::vector<int32_t> eog;
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = tokens_[i];
    const auto id = static_cast<int32_t>(i);
    if (t.text.size() < 4 || t.text.front() != '<' || t.text.back() != '>') continue;  // all candidates look like <...>
    if (text_to_token(t.text) != id) continue;  // a duplicate text: only the id llama.cpp maps to counts
    if (eot_ < 0 && contains(kEotTexts, t.text)) {
      eot_ = id;
      t.type = TokenType::Control;
    }
    if (eom_ < 0 && t.text == "<|eom_id|>") {
      eom_ = id;
      t.type = TokenType::Control;
    }
    // Gemma 4 ends a turn with <turn|>, and a model's tool call with <|tool_response> (llama.cpp 3f545be).
    const bool gemma4_eog = spm_bpe_ && (t.text == "<eos>" || t.text == "<turn|>" || t.text == "<|tool_response>");
    if (contains(kEogTexts, t.text) || contains(kFimEogTexts, t.text) || gemma4_eog) {
      eog.push_back(id);
      t.type = TokenType::Control;
    }
    // Not in llama.cpp's list, but "</s>" ends generation wherever it exists (not in Gemma 4's
    // vocabulary, where llama.cpp 3f545be drops it from the end-of-generation set).
    if (!spm_bpe_ && t.text == "</s>" && (t.type == TokenType::Control || t.type == TokenType::UserDefined))
      eog.push_back(id);
  }
  for (int32_t id : {eos_, eot_, eom_}) {
    if (id >= 0) eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  eog_ = std::move(eog);

  for (size_t i = 0; i < n; ++i) {
    const TokenType t = tokens_[i].type;
    if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) special_tokens_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].text.size() > tokens_[b].text.size(); });

  // Per-model token attributes llama.cpp sets by name: Phi-3's special tokens swallow whitespace
  // to their right.
  std::string lname(g.get_string("general.name").value_or(""));
  std::transform(lname.begin(), lname.end(), lname.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lname.find("phi-3") != std::string::npos || lname.find("phi3") != std::string::npos) {
    for (int32_t id : special_tokens_) tokens_[id].rstrip = true;
    if (int32_t id = text_to_token("</s>"); id >= 0) tokens_[id].rstrip = true;
    for (const char* s : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (int32_t id = text_to_token(s); id >= 0) tokens_[id].rstrip = false;
    }
  }

  Fnv1a h;
  h.str(model_name_);
  h.str(pre_name_);
  h.pod(static_cast<uint64_t>(n));
  for (const TokenData& t : tokens_) {
    h.str(t.text);
    h.pod(t.score);
    h.pod(static_cast<int32_t>(t.type));
  }
  h.str(merge_keys_);
  for (int32_t v : {bos_, eos_, unk_, eot_, eom_}) h.pod(v);
  for (bool v : {add_bos_, add_eos_, add_space_prefix_, ignore_merges_, spm_bpe_}) h.pod(v);
  fingerprint_ = h.value();
  return Ok{};
}

// Computed on each call rather than kept per token: a few bytes of work per generated token, and
// one copy fewer of the whole vocabulary in private memory (~1 MB for 32k tokens, ~5 MB for 152k).
std::string VocabTokenizer::make_piece(int32_t id) const {
  const TokenData& t = tokens_[id];
  switch (t.type) {
    case TokenType::Control:
    case TokenType::UserDefined:
    case TokenType::Unknown:
      return t.text;
    case TokenType::Normal:
      break;
    case TokenType::Byte:
      if ((kind_ == VocabKind::Spm || spm_bpe_) && t.text.size() == 6 && t.text.compare(0, 3, "<0x") == 0) {
        return std::string(1, static_cast<char>(std::strtol(t.text.substr(3, 2).c_str(), nullptr, 16)));
      }
      return {};
    default:
      return {};  // Unused / Undefined tokens have no text
  }
  std::string out;
  if (kind_ == VocabKind::Spm || spm_bpe_) {
    // Unescape "▁" to ' '.
    const std::string& s = t.text;
    for (size_t i = 0; i < s.size();) {
      if (s.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
        out.push_back(' ');
        i += kSpmSpace.size();
      } else {
        out.push_back(s[i++]);
      }
    }
    return out;
  }
  // Byte-level BPE: every code point stands for one byte. A code point outside the mapping (a
  // malformed vocabulary) is passed through as its UTF-8.
  for (uint32_t c : utf8_to_codepoints(t.text)) {
    const int b = gpt2_codepoint_to_byte(c);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      append_utf8(out, c);
    }
  }
  return out;
}

// Whether [b, e) overlaps one of the sorted, disjoint ranges.
static bool overlaps_any(std::span<const std::pair<size_t, size_t>> ranges, size_t b, size_t e) {
  // Disjoint and sorted by begin, so the ends are sorted too: the first range ending after b is
  // the only candidate.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), b,
                             [](size_t v, const std::pair<size_t, size_t>& r) { return v < r.second; });
  return it != ranges.end() && it->first < e;
}

void VocabTokenizer::partition(std::string_view text, bool parse_special,
                               std::span<const std::pair<size_t, size_t>> plain, std::vector<Fragment>& frags) const {
  // llama.cpp's tokenizer_st_partition: for each special token, longest first, split every text
  // fragment at all its occurrences, left to right. User-defined tokens are split out even when
  // parse_special is false (as Hugging Face does for added tokens); control and unknown ones only
  // with parse_special, and then not where they overlap a `plain` range (request content).
  frags.clear();
  if (text.empty()) return;
  frags.push_back({-1, 0, text.size()});
  // Which byte pairs (and single bytes) occur in the text: rejects almost every special token
  // without a search (some vocabularies have thousands, e.g. deepseek-llm's 2400).
  std::bitset<65536> pairs;
  std::bitset<256> singles;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto a = static_cast<uint8_t>(text[i]);
    singles.set(a);
    if (i + 1 < text.size()) pairs.set(a << 8 | static_cast<uint8_t>(text[i + 1]));
  }
  std::vector<Fragment> next;
  for (int32_t id : special_tokens_) {
    const TokenData& t = tokens_[id];
    const bool control = t.type == TokenType::Control || t.type == TokenType::Unknown;
    if (!parse_special && control) continue;
    const bool guarded = control && !plain.empty();
    const std::string_view tt = t.text;
    if (tt.size() > text.size()) continue;
    const auto b0 = static_cast<uint8_t>(tt[0]);
    if (tt.size() == 1 ? !singles.test(b0) : !pairs.test(b0 << 8 | static_cast<uint8_t>(tt[1]))) continue;
    if (text.find(tt) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.off, len = f.len;
      size_t from = 0;  // search start inside [off, off + len): skips matches in plain ranges
      while (len > 0) {
        const size_t m = text.substr(off, len).find(tt, from);
        if (m == std::string_view::npos) {
          next.push_back({-1, off, len});
          break;
        }
        if (guarded && overlaps_any(plain, off + m, off + m + tt.size())) {
          from = m + 1;
          continue;
        }
        size_t left = m;
        if (t.lstrip) {
          while (left > 0 && is_ascii_space(text[off + left - 1])) --left;
        }
        if (left > 0) next.push_back({-1, off, left});
        next.push_back({id, 0, 0});
        size_t r = off + m + tt.size();
        size_t rl = off + len - r;
        if (t.rstrip) {
          while (rl > 0 && is_ascii_space(text[r])) ++r, --rl;
        }
        off = r;
        len = rl;
        from = 0;
      }
    }
    frags.swap(next);
  }
}

std::vector<std::pair<size_t, size_t>> VocabTokenizer::find_control_text(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (text.empty()) return out;
  // The byte-pair filter of partition(): most requests' strings hold no control-token text.
  std::bitset<65536> pairs;
  std::bitset<256> singles;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto a = static_cast<uint8_t>(text[i]);
    singles.set(a);
    if (i + 1 < text.size()) pairs.set(a << 8 | static_cast<uint8_t>(text[i + 1]));
  }
  for (int32_t id : special_tokens_) {
    const TokenData& t = tokens_[id];
    if (t.type != TokenType::Control && t.type != TokenType::Unknown) continue;
    const std::string_view tt = t.text;
    if (tt.empty() || tt.size() > text.size()) continue;
    const auto b0 = static_cast<uint8_t>(tt[0]);
    if (tt.size() == 1 ? !singles.test(b0) : !pairs.test(b0 << 8 | static_cast<uint8_t>(tt[1]))) continue;
    for (size_t p = text.find(tt); p != std::string_view::npos; p = text.find(tt, p + 1)) out.emplace_back(p, p + tt.size());
  }
  return out;
}

std::vector<int32_t> VocabTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<Fragment> frags;
  partition(text, parse_special, {}, frags);
  return encode_fragments(text, add_special, frags);
}

std::vector<int32_t> VocabTokenizer::encode(std::string_view text, bool add_special,
                                            std::span<const std::pair<size_t, size_t>> plain) const {
  std::vector<Fragment> frags;
  partition(text, true, plain, frags);
  return encode_fragments(text, add_special, frags);
}

std::vector<int32_t> VocabTokenizer::encode_fragments(std::string_view text, bool add_special,
                                                      const std::vector<Fragment>& frags) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  if (kind_ == VocabKind::Spm) {
    // The space prefix goes before the first text fragment and before every text fragment that
    // follows a special token (llama.cpp: "prefix with space if previous is special").
    bool prev_special = true;
    std::string buf;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      buf.clear();
      if (add_space_prefix_ && prev_special) buf += kSpmSpace;
      for (char c : text.substr(f.off, f.len)) {
        if (c == ' ') {
          buf += kSpmSpace;
        } else {
          buf.push_back(c);
        }
      }
      spm_tokenize(buf, out);
      prev_special = false;
    }
  } else {
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
      } else {
        bpe_tokenize(text.substr(f.off, f.len), out);
      }
    }
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

// One symbol of the merge: bytes [off, off + n) of the text; n == 0 once merged into its left
// neighbour. A symbol never moves its start, so (left.n, right.n) identify a bigram's text.
struct Symbol {
  int32_t prev, next;
  uint32_t off, n;
};

void VocabTokenizer::spm_tokenize(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(utf8_seq_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const auto idx = static_cast<int32_t>(sym.size());
    sym.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, static_cast<uint32_t>(off), static_cast<uint32_t>(len)});
    off += len;
  }
  struct Bigram {
    int32_t left, right;
    float score;
    uint32_t size;
  };
  // Highest score first; ties go to the leftmost pair.
  auto worse = [](const Bigram& a, const Bigram& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const std::string_view s = text.substr(sym[l].off, sym[l].n + sym[r].n);
    const int32_t id = text_to_token(s);
    if (id < 0) return;
    queue.push({l, r, tokens_[id].score, static_cast<uint32_t>(s.size())});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  // Every merged symbol is a token (a pair is only queued when its text is one), so a final
  // symbol that is not a token is a single character missing from the vocabulary: byte fallback.
  // (llama.cpp also keeps a reverse-merge table to split such symbols along their merges; by the
  // same argument it is never consulted, since no single character's text is a merged pair's text.)
  if (sym.empty()) return;
  for (int32_t i = 0; i != -1; i = sym[i].next) {
    const std::string_view s = text.substr(sym[i].off, sym[i].n);
    if (int32_t id = text_to_token(s); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : s) {
      const int32_t id = byte_token_[static_cast<uint8_t>(c)];
      if (id >= 0 || unk_ >= 0) out.push_back(id >= 0 ? id : unk_);
    }
  }
}

void VocabTokenizer::bpe_tokenize(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string> words;
  if (spm_bpe_) {  // spaces as U+2581, then runs of newlines and runs of anything else
    std::string escaped;
    for (char c : text) {
      if (c == ' ') escaped += kSpmSpace;
      else escaped.push_back(c);
    }
    for (size_t i = 0; i < escaped.size();) {
      const bool nl = escaped[i] == '\n';
      size_t j = i;
      while (j < escaped.size() && (escaped[j] == '\n') == nl) ++j;
      words.push_back(escaped.substr(i, j - i));
      i = j;
    }
  } else {
    pretok_.split(text, words);
  }
  std::string word, key;
  std::vector<Symbol> sym;
  struct Bigram {
    int32_t left, right;
    int32_t rank;
    uint32_t left_n, right_n;
  };
  // Lowest rank first; ties go to the leftmost pair.
  auto worse = [](const Bigram& a, const Bigram& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
  for (const std::string& raw : words) {
    word.clear();
    for (char c : raw) word += byte_chars_[static_cast<uint8_t>(c)];
    sym.clear();
    // A run of newlines that is a token stays whole (llama.cpp's Gemma 4 rule; its merges would split it).
    if (ignore_merges_ || (spm_bpe_ && word.find_first_not_of('\n') == std::string::npos)) {
      if (int32_t id = text_to_token(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    for (size_t off = 0; off < word.size();) {
      const size_t len = std::min(utf8_seq_len(static_cast<uint8_t>(word[off])), word.size() - off);
      const auto idx = static_cast<int32_t>(sym.size());
      sym.push_back({idx - 1, off + len == word.size() ? -1 : idx + 1, static_cast<uint32_t>(off), static_cast<uint32_t>(len)});
      off += len;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      key.assign(word, sym[l].off, sym[l].n);
      key.push_back('\0');
      key.append(word, sym[r].off, sym[r].n);
      const int32_t rank = merge_rank_.find(key);
      if (rank < 0) return;
      queue.push({l, r, rank, sym[l].n, sym[r].n});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = sym[b.left];
      Symbol& r = sym[b.right];
      if (l.n == 0 || r.n == 0 || l.n != b.left_n || r.n != b.right_n) continue;  // stale
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (const Symbol& s : sym) {
      if (s.n == 0) continue;
      const std::string_view piece = std::string_view(word).substr(s.off, s.n);
      if (int32_t id = text_to_token(piece); id >= 0) {
        out.push_back(id);
        continue;
      }
      // Not a token (a vocabulary without all 256 byte symbols): llama.cpp emits single-byte
      // tokens where they exist ("<0xXX>" in Gemma 4's) and drops the rest.
      for (char c : piece) {
        const int32_t id = spm_bpe_ ? byte_token_[static_cast<uint8_t>(c)] : text_to_token(std::string_view(&c, 1));
        if (id >= 0) out.push_back(id);
      }
    }
  }
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(const GgufFile& gguf) {
  auto tok = std::make_unique<VocabTokenizer>();
  Status st = tok->load(gguf);
  if (!st.ok()) return Error{st.error()};
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id, special);
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  const auto& e = eog_ids();
  return std::binary_search(e.begin(), e.end(), id);
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_to_piece(id, special_);
  std::string out;
  const size_t used = sanitize_utf8(pending_, /*hold_partial_tail=*/true, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  sanitize_utf8(pending_, /*hold_partial_tail=*/false, out);
  pending_.clear();
  return out;
}

}  // namespace picolm
