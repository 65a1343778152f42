#include "tokenizer_pretok.h"

#include <algorithm>

namespace picolm {

namespace {

constexpr uint8_t cat_bit(UnicodeCategory c) { return static_cast<uint8_t>(1u << static_cast<unsigned>(c)); }

// Decodes one code point of a (well-formed) UTF-8 regex source string.
uint32_t next_cpt(std::string_view s, size_t& i) {
  const auto b = static_cast<uint8_t>(s[i]);
  size_t len = utf8_seq_len(b);
  if (i + len > s.size()) len = 1;
  uint32_t c = len == 1 ? b : len == 2 ? (b & 0x1Fu) : len == 3 ? (b & 0x0Fu) : (b & 0x07u);
  for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3Fu);
  i += len;
  return c;
}

}  // namespace

Result<CharClass> CharClass::parse(std::string_view e) {
  CharClass cc;
  if (e.size() < 3 || e.front() != '[' || e.back() != ']') return Error{"character class must be [...]: " + std::string(e)};
  std::string_view body = e.substr(1, e.size() - 2);
  size_t i = 0;
  if (!body.empty() && body[0] == '^') {
    cc.negated = true;
    i = 1;
  }
  // Reads one class atom; returns false for \p{..} / \s (handled in place), true with a literal.
  auto atom = [&](uint32_t& lit) -> Result<bool> {
    if (body[i] != '\\') {
      lit = next_cpt(body, i);
      return true;
    }
    if (i + 1 >= body.size()) return Error{"dangling backslash in " + std::string(e)};
    const char c = body[i + 1];
    if (c == 'p') {
      if (i + 4 >= body.size() || body[i + 2] != '{' || body[i + 4] != '}') return Error{"bad \\p in " + std::string(e)};
      switch (body[i + 3]) {
        case 'L': cc.categories |= cat_bit(UnicodeCategory::Letter); break;
        case 'N': cc.categories |= cat_bit(UnicodeCategory::Number); break;
        case 'P': cc.categories |= cat_bit(UnicodeCategory::Punctuation); break;
        default: return Error{"unsupported \\p{" + std::string(1, body[i + 3]) + "} in " + std::string(e)};
      }
      i += 5;
      return false;
    }
    i += 2;
    switch (c) {
      case 's': cc.whitespace = true; return false;
      case 'r': lit = '\r'; return true;
      case 'n': lit = '\n'; return true;
      case 't': lit = '\t'; return true;
      default: lit = static_cast<uint8_t>(c); return true;  // \$ \+ \^ \| \\ ... stand for themselves
    }
  };
  while (i < body.size()) {
    uint32_t lo = 0;
    auto a = atom(lo);
    if (!a.ok()) return Error{a.error()};
    if (!a.value()) continue;
    uint32_t hi = lo;
    if (i + 1 < body.size() && body[i] == '-') {
      ++i;
      auto b = atom(hi);
      if (!b.ok()) return Error{b.error()};
      if (!b.value() || hi < lo) return Error{"bad range in " + std::string(e)};
    }
    cc.ranges.emplace_back(lo, hi);
  }
  return cc;
}

bool CharClass::contains(uint32_t cpt, CodepointFlags f) const {
  bool m = (categories & cat_bit(f.category())) != 0 || (whitespace && f.is_whitespace());
  if (!m && !ranges.empty()) {
    // llama.cpp runs these regexes with std::regex after replacing every non-ASCII White_Space
    // code point by U+000B, so such code points never match a literal range (e.g. U+3000 is not
    // in the range U+3000..U+3002 of the deepseek-llm regex); they match \s only.
    const uint32_t lit = (cpt >= 0x80 && f.is_whitespace()) ? 0x0B : cpt;
    for (const auto& [lo, hi] : ranges) {
      if (lit >= lo && lit <= hi) {
        m = true;
        break;
      }
    }
  }
  return m != negated;
}

namespace {

// One fragment [begin, end) of the code point array, with accessors that treat everything
// outside it as absent (the regex cannot look past a fragment).
struct Span {
  const uint32_t* cpt;
  const CodepointFlags* flags;
  size_t begin, end;
  static constexpr uint32_t kNone = 0xFFFFFFFF;
  uint32_t c(size_t p) const { return p >= begin && p < end ? cpt[p] : kNone; }
  CodepointFlags f(size_t p) const { return p >= begin && p < end ? flags[p] : CodepointFlags{}; }
  bool in(size_t p) const { return p >= begin && p < end; }
  bool ws(size_t p) const { return in(p) && flags[p].is_whitespace(); }
  bool letter(size_t p) const { return in(p) && flags[p].is_letter(); }
  bool number(size_t p) const { return in(p) && flags[p].is_number(); }
  // [^\s\p{L}\p{N}]
  bool other(size_t p) const {
    if (!in(p)) return false;
    const CodepointFlags x = flags[p];
    return !x.is_whitespace() && !x.is_letter() && !x.is_number();
  }
};

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive. Returns the match length or 0.
size_t match_contraction(const Span& s, size_t pos, bool any_case) {
  if (s.c(pos) != '\'') return 0;
  auto low = [&](size_t p) -> uint32_t {
    const uint32_t c = s.c(p);
    return (any_case && c >= 'A' && c <= 'Z') ? c + 32 : c;
  };
  const uint32_t a = low(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = low(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+ (when allow_plain_ws): whitespace run handling shared by GPT-2 and Llama-3.
// Returns 0 if pos does not start whitespace.
size_t match_ws_tail(const Span& s, size_t pos, bool allow_plain_ws) {
  size_t n = 0;
  while (s.ws(pos + n)) ++n;
  if (n == 0) return 0;
  if (!s.in(pos + n)) return n;  // run reaches the fragment end: \s+(?!\S) takes it all
  if (n > 1) return n - 1;       // leave the last space to prefix the next word
  return allow_plain_ws ? 1 : 0;
}

size_t match_gpt2(const Span& s, size_t pos) {
  if (size_t n = match_contraction(s, pos, false)) return n;
  const size_t q = pos + (s.c(pos) == ' ' ? 1 : 0);  // " ?" prefix
  size_t e = q;
  if (s.letter(q)) {
    while (s.letter(e)) ++e;
    return e - pos;
  }
  if (s.number(q)) {
    while (s.number(e)) ++e;
    return e - pos;
  }
  if (s.other(q)) {
    while (s.other(e)) ++e;
    return e - pos;
  }
  // No plain \s+ alternative: a lone whitespace before a non-space does not match; the search
  // moves on and the character becomes a fragment of its own.
  return match_ws_tail(s, pos, false);
}

size_t match_llama3(const Span& s, size_t pos, int max_digits) {
  if (size_t n = match_contraction(s, pos, true)) return n;
  const uint32_t c = s.c(pos);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c != '\r' && c != '\n' && !s.number(pos)) {
    if (s.letter(pos) || s.letter(pos + 1)) {
      size_t e = pos + 1;
      while (s.letter(e)) ++e;
      return e - pos;
    }
  }
  // \p{N}{1,max_digits}
  if (s.number(pos)) {
    size_t e = pos;
    while (s.number(e) && e - pos < static_cast<size_t>(max_digits)) ++e;
    return e - pos;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  const size_t q = pos + (c == ' ' ? 1 : 0);
  if (s.other(q)) {
    size_t e = q;
    while (s.other(e)) ++e;
    while (s.c(e) == '\r' || s.c(e) == '\n') ++e;
    return e - pos;
  }
  // \s*[\r\n]+ : the whitespace run up to and including its last \r or \n
  size_t n = 0, last_nl = 0;
  while (s.ws(pos + n)) {
    const uint32_t w = s.c(pos + n);
    ++n;
    if (w == '\r' || w == '\n') last_nl = n;
  }
  if (last_nl > 0) return last_nl;
  return match_ws_tail(s, pos, true);
}

size_t match_gpt4o(const Span& s, size_t pos) {
  // U: a letter that is not a-z; L: a letter that is not A-Z (llama.cpp's lookahead form of the
  // tokenizer.json classes: a non-ASCII letter counts as both, a mark as neither).
  auto upper = [&](size_t p) { return s.letter(p) && !(s.c(p) >= 'a' && s.c(p) <= 'z'); };
  auto lower = [&](size_t p) { return s.letter(p) && !(s.c(p) >= 'A' && s.c(p) <= 'Z'); };
  const uint32_t c = s.c(pos);
  // [^\r\n\p{L}\p{N}]? : when pos holds such a character, the word alternatives can only match
  // with it (without it they would start on a non-letter), so it is taken.
  const size_t q = pos + (s.in(pos) && c != '\r' && c != '\n' && !s.letter(pos) && !s.number(pos) ? 1 : 0);
  // U*L+C: U* greedy, giving back characters until one that is also an L starts L+ (greedy).
  size_t u = 0;
  while (upper(q + u)) ++u;
  for (size_t k = u + 1; k-- > 0;) {
    if (!lower(q + k)) continue;
    size_t e = q + k;
    while (lower(e)) ++e;
    return e + match_contraction(s, e, true) - pos;
  }
  // U+L*C
  if (u > 0) {
    size_t e = q + u;
    while (lower(e)) ++e;
    return e + match_contraction(s, e, true) - pos;
  }
  // \p{N}{1,3}
  if (s.number(pos)) {
    size_t e = pos;
    while (s.number(e) && e - pos < 3) ++e;
    return e - pos;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n/]*"
  const size_t o = pos + (c == ' ' ? 1 : 0);
  if (s.other(o)) {
    size_t e = o;
    while (s.other(e)) ++e;
    while (s.c(e) == '\r' || s.c(e) == '\n' || s.c(e) == '/') ++e;
    return e - pos;
  }
  // \s*[\r\n]+ : the whitespace run up to and including its last \r or \n
  size_t n = 0, last_nl = 0;
  while (s.ws(pos + n)) {
    const uint32_t w = s.c(pos + n);
    ++n;
    if (w == '\r' || w == '\n') last_nl = n;
  }
  if (last_nl > 0) return last_nl;
  return match_ws_tail(s, pos, true);
}

size_t match_simple(const SplitRule& r, const Span& s, size_t pos) {
  auto in_cls = [&](size_t p) { return s.in(p) && r.cls.contains(s.cpt[p], s.flags[p]); };
  switch (r.shape) {
    case SplitShape::ClassOne:
      return in_cls(pos) ? 1 : 0;
    case SplitShape::ClassThree:
      return in_cls(pos) && in_cls(pos + 1) && in_cls(pos + 2) ? 3 : 0;
    case SplitShape::ClassRun: {
      size_t q = pos;
      const bool has_prefix = (r.prefix_ws && s.ws(pos)) || (r.prefix_space && s.c(pos) == ' ');
      if (has_prefix && in_cls(pos + 1)) {
        q = pos + 1;  // greedy optional prefix; if the class cannot follow, backtrack to no prefix
      } else if (!in_cls(pos)) {
        return 0;
      }
      size_t e = q;
      while (in_cls(e)) ++e;
      return e - pos;
    }
    default:
      return 0;
  }
}

// deepseek-llm: "\\s?[A-Za-z...]+" (cased letters), "\\s?[!-/:-~...]+", and the CJK run shared with
// deepseek-coder. Upstream writes the characters themselves; here they are \\u escapes because
// several of them (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) are changed by Unicode
// normalisation, which would silently change the ranges.
constexpr const char* DEEPSEEK_LLM_LETTERS =
    "[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-"
    "\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
    "\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F"
    "\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D"
    "\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17"
    "\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB"
    "\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]";
constexpr const char* DEEPSEEK_LLM_PUNCT = "[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]";
constexpr const char* DEEPSEEK_CJK = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]";
// poro-chat / bloom / gpt3-finnish: " ?[^(\\s|.,!?...)]+"
constexpr const char* PORO_CLASS = "[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]";

}  // namespace

Result<PreTokenizer> PreTokenizer::for_name(std::string_view pre) {
  // The regex lists are llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe), by pre-type.
  enum class Kind { Default, Llama3, Qwen2, DeepseekLlm, DeepseekCoder, Falcon, Gpt2, Starcoder, Poro, Gpt4o };
  Kind kind;
  auto is = [&](std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), pre) != names.end();
  };
  if (pre.empty() || is({"default"})) {
    kind = Kind::Default;
  } else if (is({"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe", "chatglm-bpe"})) {
    kind = Kind::Llama3;
  } else if (is({"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"})) {
    kind = Kind::Qwen2;
  } else if (is({"deepseek-llm"})) {
    kind = Kind::DeepseekLlm;
  } else if (is({"deepseek-coder"})) {
    kind = Kind::DeepseekCoder;
  } else if (is({"falcon"})) {
    kind = Kind::Falcon;
  } else if (is({"gpt-2", "gpt2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en",
                 "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe"})) {
    kind = Kind::Gpt2;
  } else if (is({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    kind = Kind::Starcoder;
  } else if (is({"poro-chat", "bloom", "gpt3-finnish"})) {
    kind = Kind::Poro;
  } else if (is({"gpt-4o", "llama4", "kanana2"})) {  // o200k: Phi-4-mini
    kind = Kind::Gpt4o;
  } else {
    return Error{"unknown pre-tokenizer tokenizer.ggml.pre = '" + std::string(pre) + "'"};
  }

  PreTokenizer pt;
  Status status = Ok{};
  auto cls = [&](std::string_view text) {
    auto c = CharClass::parse(text);
    if (!c.ok()) {
      status = Error{c.error()};
      return CharClass{};
    }
    return std::move(c.value());
  };
  auto add = [&](SplitShape shape, std::string_view cls_text = {}, bool prefix_ws = false, bool prefix_space = false) {
    SplitRule r;
    r.shape = shape;
    if (!cls_text.empty()) r.cls = cls(cls_text);
    r.prefix_ws = prefix_ws;
    r.prefix_space = prefix_space;
    pt.rules_.push_back(std::move(r));
  };
  auto add_llama3 = [&](int max_digits) {
    SplitRule r;
    r.shape = SplitShape::Llama3;
    r.max_digits = max_digits;
    pt.rules_.push_back(std::move(r));
  };
  // Literal class strings are the upstream regex text; non-ASCII characters are written as
  // escapes so that no editor or tool can normalise them (U+212A KELVIN SIGN is not 'K').
  switch (kind) {
    case Kind::Default:
      add(SplitShape::ClassRun, R"([\p{P}\$\+<=>\^~\|])");
      add(SplitShape::Gpt2);
      add(SplitShape::ClassRun, R"([\p{N}])");
      add(SplitShape::ClassThree, "[0-9]");
      break;
    case Kind::Llama3:
      add_llama3(3);
      break;
    case Kind::Qwen2:
      add_llama3(1);
      break;
    case Kind::DeepseekLlm:
      add(SplitShape::ClassOne, "[\r\n]");
      add(SplitShape::ClassRun, DEEPSEEK_LLM_LETTERS, /*prefix_ws=*/true);
      add(SplitShape::ClassRun, DEEPSEEK_LLM_PUNCT, /*prefix_ws=*/true);
      add(SplitShape::TrailingSpace);
      add(SplitShape::ClassRun, DEEPSEEK_CJK);
      add(SplitShape::ClassRun, R"([\p{N}])");
      break;
    case Kind::DeepseekCoder:
      add(SplitShape::ClassOne, "[\r\n]");
      add(SplitShape::ClassRun, R"([\p{L}])", /*prefix_ws=*/true);
      add(SplitShape::ClassRun, R"([\p{P}])", /*prefix_ws=*/true);
      add(SplitShape::ClassRun, DEEPSEEK_CJK);
      add(SplitShape::ClassOne, R"([\p{N}])");
      break;
    case Kind::Falcon:
      add(SplitShape::ClassRun, R"([\p{P}\$\+<=>\^~\|`])");
      add(SplitShape::Gpt2);
      add(SplitShape::ClassThree, "[0-9]");
      break;
    case Kind::Gpt2:
      add(SplitShape::Gpt2);
      break;
    case Kind::Starcoder:
      add(SplitShape::ClassOne, R"([\p{N}])");
      add(SplitShape::Gpt2);
      break;
    case Kind::Poro:
      add(SplitShape::ClassRun, PORO_CLASS, false, /*prefix_space=*/true);
      break;
    case Kind::Gpt4o:
      add(SplitShape::Gpt4o);
      break;
  }
  if (!status.ok()) return Error{status.error()};
  return pt;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& words) const {
  words.clear();
  const std::vector<uint32_t> cpts = utf8_to_codepoints(text);
  if (cpts.empty()) return;
  std::vector<CodepointFlags> flags(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i) flags[i] = unicode_flags(cpts[i]);

  std::vector<size_t> frags{cpts.size()};  // fragment lengths, in code points
  std::vector<size_t> next;
  for (const SplitRule& rule : rules_) {
    next.clear();
    next.reserve(frags.size() * 2);
    size_t start = 0;
    for (size_t len : frags) {
      const Span s{cpts.data(), flags.data(), start, start + len};
      start += len;
      if (rule.shape == SplitShape::TrailingSpace) {
        // \s+$ can only match the maximal whitespace run that ends the fragment.
        size_t b = s.end;
        while (b > s.begin && flags[b - 1].is_whitespace()) --b;
        if (b > s.begin) next.push_back(b - s.begin);
        if (b < s.end) next.push_back(s.end - b);
        continue;
      }
      size_t pos = s.begin, gap = s.begin;
      while (pos < s.end) {
        size_t n = 0;
        switch (rule.shape) {
          case SplitShape::Gpt2: n = match_gpt2(s, pos); break;
          case SplitShape::Llama3: n = match_llama3(s, pos, rule.max_digits); break;
          case SplitShape::Gpt4o: n = match_gpt4o(s, pos); break;
          default: n = match_simple(rule, s, pos); break;
        }
        if (n == 0) {
          ++pos;
          continue;
        }
        if (pos > gap) next.push_back(pos - gap);  // unmatched text between matches stays one fragment
        next.push_back(n);
        pos += n;
        gap = pos;
      }
      if (s.end > gap) next.push_back(s.end - gap);
    }
    frags.swap(next);
  }

  words.reserve(frags.size());
  size_t start = 0;
  for (size_t len : frags) {
    std::string w;
    for (size_t i = start; i < start + len; ++i) append_utf8(w, cpts[i]);
    words.push_back(std::move(w));
    start += len;
  }
}

}  // namespace picolm
