#include "grammar/regex_dfa.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>

namespace picolm::grammar::detail {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code point ranges, inclusive

constexpr uint32_t kMaxCp = 0x10FFFF;

Ranges normalize(Ranges r) {
  // Remove surrogates (never valid in UTF-8) and merge overlaps.
  Ranges cut;
  for (auto [lo, hi] : r) {
    if (lo > hi) continue;
    if (lo < 0xD800 && hi >= 0xD800) {
      cut.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else {
      cut.push_back({lo, hi});
    }
  }
  std::sort(cut.begin(), cut.end());
  Ranges out;
  for (auto p : cut) {
    if (!out.empty() && p.first <= out.back().second + 1) out.back().second = std::max(out.back().second, p.second);
    else out.push_back(p);
  }
  return out;
}

Ranges negate(const Ranges& r0) {
  Ranges r = normalize(r0), out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCp) out.push_back({next, kMaxCp});
  return normalize(out);
}

struct Node {
  enum Kind { Set, Concat, Alt, Repeat } kind;
  Ranges set;
  std::vector<std::unique_ptr<Node>> kids;
  int min = 0, max = -1;
};
using NodeP = std::unique_ptr<Node>;

NodeP make(Node::Kind k) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  return n;
}

struct RegexParser {
  std::u32string s;  // pattern decoded to code points
  size_t i = 0;
  std::string err;
  bool leading_anchor = false, trailing_anchor = false;

  bool fail(const std::string& m) {
    if (err.empty()) err = m;
    return false;
  }
  bool eof() const { return i >= s.size(); }

  static Ranges digit() { return {{'0', '9'}}; }
  static Ranges word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
  static Ranges space() { return {{'\t', '\r'}, {' ', ' '}}; }
  // ASCII-only complements: Python's \D etc. are Unicode-aware, ECMA's are not; the ASCII part is
  // where both agree, which is all we need to never produce a string one of them rejects.
  static Ranges ascii_minus(const Ranges& r) {
    Ranges n = negate(r), out;
    for (auto [lo, hi] : n)
      if (lo <= 0x7F) out.push_back({lo, std::min<uint32_t>(hi, 0x7F)});
    return out;
  }
  static Ranges not_space() {
    // ASCII, minus whitespace, minus \x1c-\x1f (Python counts those as whitespace).
    return {{0, 8}, {0x0E, 0x1B}, {0x21, 0x7F}};
  }

  bool hexval(uint32_t c, uint32_t& v) {
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else return false;
    return true;
  }
  bool hexn(int n, uint32_t& out) {
    out = 0;
    for (int k = 0; k < n; ++k) {
      uint32_t v;
      if (eof() || !hexval(s[i], v)) return fail("bad hex escape in pattern");
      out = out * 16 + v;
      ++i;
    }
    return true;
  }

  // Parses an escape after '\'. Sets either `set` (class escapes) or a single code point.
  bool escape(bool in_class, Ranges& set) {
    if (eof()) return fail("pattern ends with '\\'");
    uint32_t c = s[i++];
    switch (c) {
      case 'd': set = digit(); return true;
      case 'D': set = ascii_minus(digit()); return true;
      case 'w': set = word(); return true;
      case 'W': set = ascii_minus(word()); return true;
      case 's': set = space(); return true;
      case 'S': set = not_space(); return true;
      case 'n': set = {{'\n', '\n'}}; return true;
      case 'r': set = {{'\r', '\r'}}; return true;
      case 't': set = {{'\t', '\t'}}; return true;
      case 'f': set = {{'\f', '\f'}}; return true;
      case 'v': set = {{'\v', '\v'}}; return true;
      case '0': set = {{0, 0}}; return true;
      case 'x': {
        uint32_t v;
        if (!hexn(2, v)) return false;
        set = {{v, v}};
        return true;
      }
      case 'u': {
        uint32_t v;
        if (!hexn(4, v)) return false;
        if (v >= 0xD800 && v < 0xDC00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
          size_t save = i;
          i += 2;
          uint32_t lo;
          if (hexn(4, lo) && lo >= 0xDC00 && lo < 0xE000) v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
          else i = save;
        }
        set = {{v, v}};
        return true;
      }
      case 'b':
        if (in_class) { set = {{8, 8}}; return true; }
        return fail("word boundary \\b is not supported in patterns");
      case 'B': return fail("\\B is not supported in patterns");
      case 'p': case 'P': return fail("Unicode property escapes are not supported in patterns");
      case 'k': return fail("named backreferences are not supported in patterns");
      case 'c': return fail("control escapes \\c are not supported in patterns");
      default:
        if (c >= '1' && c <= '9') return fail("backreferences are not supported in patterns");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
          return fail(std::string("unknown escape \\") + char(c) + " in pattern");
        set = {{c, c}};  // identity escape of punctuation
        return true;
    }
  }

  bool cls(Ranges& out) {
    // s[i-1] == '['
    bool neg = false;
    if (!eof() && s[i] == '^') { neg = true; ++i; }
    Ranges acc;
    bool first = true;
    bool shorthand = false;  // a class escape (\d \w \s ...) inside the brackets
    while (true) {
      if (eof()) return fail("unterminated character class");
      uint32_t c = s[i];
      if (c == ']' && !first) { ++i; break; }
      if (c == ']' && first) {
        // ECMA: "[]" matches nothing, "[^]" matches anything.
        ++i;
        break;
      }
      first = false;
      Ranges a;
      bool single = true;
      ++i;
      if (c == '\\') {
        if (i < s.size() && (s[i] == 'd' || s[i] == 'D' || s[i] == 'w' || s[i] == 'W' || s[i] == 's' || s[i] == 'S'))
          shorthand = true;
        if (!escape(true, a)) return false;
        single = a.size() == 1 && a[0].first == a[0].second;
      } else {
        a = {{c, c}};
      }
      if (single && i + 1 < s.size() && s[i] == '-' && s[i + 1] != ']') {
        ++i;
        uint32_t c2 = s[i++];
        Ranges b;
        if (c2 == '\\') {
          if (!escape(true, b)) return false;
          if (!(b.size() == 1 && b[0].first == b[0].second)) return fail("bad range in character class");
        } else {
          b = {{c2, c2}};
        }
        if (b[0].first < a[0].first) return fail("reversed range in character class");
        acc.push_back({a[0].first, b[0].first});
      } else {
        acc.insert(acc.end(), a.begin(), a.end());
      }
    }
    out = neg ? negate(acc) : normalize(acc);
    if (neg && shorthand) {
      // [^\w] etc.: Python's shorthands are Unicode-aware and its \s also covers \x1c-\x1f, so
      // the complement is only certain on ASCII outside \x1c-\x1f.
      Ranges keep;
      for (auto [lo, hi] : out) {
        if (lo > 0x7F) continue;
        hi = std::min<uint32_t>(hi, 0x7F);
        if (lo <= 0x1B) keep.push_back({lo, std::min<uint32_t>(hi, 0x1B)});
        if (hi >= 0x20) keep.push_back({std::max<uint32_t>(lo, 0x20), hi});
      }
      out = normalize(keep);
    }
    return true;
  }

  bool quant_int(int& v) {
    if (eof() || s[i] < '0' || s[i] > '9') return false;
    long long x = 0;
    while (!eof() && s[i] >= '0' && s[i] <= '9') {
      x = x * 10 + (s[i] - '0');
      if (x > 100000) x = 100000;
      ++i;
    }
    v = int(x);
    return true;
  }

  NodeP atom() {
    uint32_t c = s[i];
    if (c == '(') {
      ++i;
      if (i < s.size() && s[i] == '?') {
        if (i + 1 < s.size() && s[i + 1] == ':') {
          i += 2;
        } else if (i + 1 < s.size() && s[i + 1] == '<' && i + 2 < s.size() && s[i + 2] != '=' && s[i + 2] != '!') {
          // named group (?<name>...)
          while (!eof() && s[i] != '>') ++i;
          if (eof()) { fail("bad named group"); return nullptr; }
          ++i;
        } else {
          fail("lookaround and other (? groups are not supported in patterns");
          return nullptr;
        }
      }
      NodeP n = alternation(false);
      if (!n) return nullptr;
      if (eof() || s[i] != ')') { fail("missing ')' in pattern"); return nullptr; }
      ++i;
      return n;
    }
    auto n = make(Node::Set);
    ++i;
    if (c == '[') {
      if (!cls(n->set)) return nullptr;
    } else if (c == '.') {
      n->set = negate({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}});
    } else if (c == '\\') {
      if (!escape(false, n->set)) return nullptr;
    } else if (c == '^' || c == '$') {
      fail("anchors are only supported at the start/end of the pattern or of a top-level alternative");
      return nullptr;
    } else if (c == '*' || c == '+' || c == '?' || c == '{' || c == ')' || c == '|') {
      fail("misplaced quantifier or bracket in pattern");
      return nullptr;
    } else {
      n->set = {{c, c}};
    }
    n->set = normalize(n->set);
    return n;
  }

  NodeP piece() {
    NodeP a = atom();
    if (!a) return nullptr;
    while (!eof()) {
      uint32_t c = s[i];
      int mn, mx;
      if (c == '*') { mn = 0; mx = -1; ++i; }
      else if (c == '+') { mn = 1; mx = -1; ++i; }
      else if (c == '?') { mn = 0; mx = 1; ++i; }
      else if (c == '{') {
        size_t save = i;
        ++i;
        if (!eof() && s[i] == ',') {
          // "{,n}": a literal in ECMA-262 but a quantifier in Python; refuse rather than guess.
          fail("'{,' in a pattern is ambiguous between regex dialects");
          return nullptr;
        }
        if (!quant_int(mn)) { i = save; break; }  // a literal '{' (Annex B)
        mx = mn;
        if (!eof() && s[i] == ',') {
          ++i;
          if (!quant_int(mx)) mx = -1;
        }
        if (eof() || s[i] != '}') { i = save; break; }
        ++i;
        if (mx != -1 && mx < mn) { fail("bad {n,m} quantifier"); return nullptr; }
      } else {
        break;
      }
      if (!eof() && s[i] == '?') ++i;  // lazy: same language
      auto r = make(Node::Repeat);
      r->min = mn;
      r->max = mx;
      r->kids.push_back(std::move(a));
      a = std::move(r);
      if (a->min > 1000 || a->max > 1000) { fail("repetition count too large in pattern"); return nullptr; }
    }
    return a;
  }

  NodeP sequence(bool top) {
    auto n = make(Node::Concat);
    bool lead = false, trail = false;
    if (top && !eof() && s[i] == '^') { lead = true; ++i; }
    while (!eof() && s[i] != '|' && s[i] != ')') {
      if (top && s[i] == '$' && (i + 1 == s.size() || s[i + 1] == '|')) {
        trail = true;
        ++i;
        break;
      }
      NodeP p = piece();
      if (!p) return nullptr;
      n->kids.push_back(std::move(p));
    }
    if (!top) return n;
    // Unanchored sides mean "anything may surround the match".
    auto wrap = make(Node::Concat);
    auto any = [] {
      auto r = make(Node::Repeat);
      auto st = make(Node::Set);
      st->set = normalize({{0, kMaxCp}});
      r->kids.push_back(std::move(st));
      r->min = 0;
      r->max = -1;
      return r;
    };
    if (!lead && !full_match_) wrap->kids.push_back(any());
    wrap->kids.push_back(std::move(n));
    if (!trail && !full_match_) wrap->kids.push_back(any());
    return wrap;
  }

  NodeP alternation(bool top) {
    auto n = make(Node::Alt);
    while (true) {
      NodeP sq = sequence(top);
      if (!sq) return nullptr;
      n->kids.push_back(std::move(sq));
      if (!eof() && s[i] == '|') { ++i; continue; }
      break;
    }
    return n;
  }

  bool full_match_ = false;
};

bool decode_utf8(std::string_view in, std::u32string& out) {
  size_t i = 0;
  while (i < in.size()) {
    unsigned char c = in[i];
    uint32_t cp;
    int n;
    if (c < 0x80) { cp = c; n = 0; }
    else if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; n = 1; }
    else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; n = 2; }
    else if ((c & 0xF8) == 0xF0) { cp = c & 0x07; n = 3; }
    else return false;
    ++i;
    for (int k = 0; k < n; ++k, ++i) {
      if (i >= in.size() || (static_cast<unsigned char>(in[i]) & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (static_cast<unsigned char>(in[i]) & 0x3F);
    }
    out.push_back(cp);
  }
  return true;
}

// ---- Thompson NFA over bytes ----
struct Nfa {
  struct Edge { uint8_t lo, hi; int to; };
  std::vector<std::vector<int>> eps;
  std::vector<std::vector<Edge>> edges;
  int add() {
    eps.emplace_back();
    edges.emplace_back();
    return int(eps.size()) - 1;
  }
};

void encode(uint32_t cp, uint8_t* b, int& n) {
  if (cp < 0x80) { b[0] = uint8_t(cp); n = 1; }
  else if (cp < 0x800) { b[0] = uint8_t(0xC0 | (cp >> 6)); b[1] = uint8_t(0x80 | (cp & 0x3F)); n = 2; }
  else if (cp < 0x10000) {
    b[0] = uint8_t(0xE0 | (cp >> 12)); b[1] = uint8_t(0x80 | ((cp >> 6) & 0x3F)); b[2] = uint8_t(0x80 | (cp & 0x3F)); n = 3;
  } else {
    b[0] = uint8_t(0xF0 | (cp >> 18)); b[1] = uint8_t(0x80 | ((cp >> 12) & 0x3F));
    b[2] = uint8_t(0x80 | ((cp >> 6) & 0x3F)); b[3] = uint8_t(0x80 | (cp & 0x3F)); n = 4;
  }
}

// Splits [lo, hi] (same UTF-8 length) into sequences of byte ranges (the usual utf8-ranges split).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (int k = 0; k < 3; ++k) {
    if (lo <= bounds[k] && hi > bounds[k]) {
      utf8_sequences(lo, bounds[k], out);
      utf8_sequences(bounds[k] + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{uint8_t(lo), uint8_t(hi)}});
    return;
  }
  for (int k = 1; k < 4; ++k) {
    uint32_t m = (1u << (6 * k)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  int n, n2;
  encode(lo, a, n);
  encode(hi, b, n2);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int k = 0; k < n; ++k) seq.push_back({a[k], b[k]});
  out.push_back(seq);
}

struct NfaBuilder {
  Nfa nfa;
  size_t limit;
  bool overflow = false;

  // Builds n between new states; returns (start, end).
  std::pair<int, int> build(const Node& n) {
    if (nfa.eps.size() > limit) { overflow = true; int s = nfa.add(); return {s, s}; }
    switch (n.kind) {
      case Node::Set: {
        int s = nfa.add(), e = nfa.add();
        std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
        for (auto [lo, hi] : n.set) utf8_sequences(lo, hi, seqs);
        for (auto& seq : seqs) {
          int cur = s;
          for (size_t k = 0; k < seq.size(); ++k) {
            int to = (k + 1 == seq.size()) ? e : nfa.add();
            nfa.edges[cur].push_back({seq[k].first, seq[k].second, to});
            cur = to;
          }
        }
        return {s, e};
      }
      case Node::Concat: {
        int s = nfa.add(), cur = s;
        for (auto& k : n.kids) {
          auto [a, b] = build(*k);
          nfa.eps[cur].push_back(a);
          cur = b;
        }
        return {s, cur};
      }
      case Node::Alt: {
        int s = nfa.add(), e = nfa.add();
        for (auto& k : n.kids) {
          auto [a, b] = build(*k);
          nfa.eps[s].push_back(a);
          nfa.eps[b].push_back(e);
        }
        return {s, e};
      }
      case Node::Repeat: {
        int s = nfa.add(), cur = s;
        for (int k = 0; k < n.min; ++k) {
          auto [a, b] = build(*n.kids[0]);
          nfa.eps[cur].push_back(a);
          cur = b;
        }
        if (n.max < 0) {
          auto [a, b] = build(*n.kids[0]);
          int e = nfa.add();
          nfa.eps[cur].push_back(a);
          nfa.eps[cur].push_back(e);
          nfa.eps[b].push_back(a);
          nfa.eps[b].push_back(e);
          return {s, e};
        }
        int e = nfa.add();
        for (int k = n.min; k < n.max; ++k) {
          nfa.eps[cur].push_back(e);
          auto [a, b] = build(*n.kids[0]);
          nfa.eps[cur].push_back(a);
          cur = b;
        }
        nfa.eps[cur].push_back(e);
        return {s, e};
      }
    }
    return {0, 0};
  }
};

bool subset_construct(const Nfa& nfa, int start, int final_state, size_t max_states, Dfa& out) {
  size_t n = nfa.eps.size();
  // Byte equivalence classes: every edge range is a union of whole classes, so the construction
  // iterates classes (typically a few dozen) instead of 256 bytes.
  std::vector<uint8_t> cut(257, 0);
  cut[0] = 1;
  cut[256] = 1;
  for (const auto& es : nfa.edges)
    for (const auto& e : es) {
      cut[e.lo] = 1;
      cut[size_t(e.hi) + 1] = 1;
    }
  std::vector<std::pair<int, int>> classes;  // [lo, hi]
  std::vector<int> class_of(256);
  for (int b = 0; b < 256;) {
    int e = b + 1;
    while (!cut[e]) ++e;
    for (int k = b; k < e; ++k) class_of[k] = int(classes.size());
    classes.push_back({b, e - 1});
    b = e;
  }
  std::vector<uint32_t> stamp(n, 0);
  uint32_t gen = 0;
  std::vector<int> stack;
  auto closure = [&](std::vector<int>& set) {
    ++gen;
    stack = set;
    for (int x : set) stamp[x] = gen;
    while (!stack.empty()) {
      int x = stack.back();
      stack.pop_back();
      for (int y : nfa.eps[x])
        if (stamp[y] != gen) { stamp[y] = gen; set.push_back(y); stack.push_back(y); }
    }
    // Keep only states that matter: those with byte edges, plus the final state.
    size_t w = 0;
    for (size_t k = 0; k < set.size(); ++k)
      if (!nfa.edges[set[k]].empty() || set[k] == final_state) set[w++] = set[k];
    set.resize(w);
    std::sort(set.begin(), set.end());
  };
  std::map<std::vector<int>, int32_t> ids;
  std::vector<std::vector<int>> work;
  std::vector<int> s0{start};
  closure(s0);
  ids[s0] = 0;
  work.push_back(s0);
  out = Dfa{};
  out.next.push_back({});
  out.next[0].fill(-1);
  out.accept.push_back(0);
  std::vector<std::vector<int>> per_class(classes.size());
  for (size_t processed = 0; processed < work.size(); ++processed) {
    int32_t id = int32_t(processed);
    for (auto& v : per_class) v.clear();
    for (int x : work[processed]) {
      if (x == final_state) out.accept[id] = 1;
      for (const auto& e : nfa.edges[x])
        for (int c = class_of[e.lo]; c <= class_of[e.hi]; ++c) per_class[c].push_back(e.to);
    }
    for (size_t c = 0; c < classes.size(); ++c) {
      if (per_class[c].empty()) continue;
      std::vector<int> t = per_class[c];
      std::sort(t.begin(), t.end());
      t.erase(std::unique(t.begin(), t.end()), t.end());
      closure(t);
      auto it = ids.find(t);
      int32_t tid;
      if (it == ids.end()) {
        if (out.next.size() >= max_states) return false;
        tid = int32_t(out.next.size());
        ids.emplace(t, tid);
        out.next.push_back({});
        out.next.back().fill(-1);
        out.accept.push_back(0);
        work.push_back(std::move(t));
      } else {
        tid = it->second;
      }
      for (int b = classes[c].first; b <= classes[c].second; ++b) out.next[id][b] = tid;
    }
  }
  return true;
}

}  // namespace

bool Dfa::empty_language() const {
  std::vector<uint8_t> seen(next.size(), 0);
  std::vector<int32_t> st{start};
  seen[start] = 1;
  while (!st.empty()) {
    int32_t s = st.back();
    st.pop_back();
    if (accept[s]) return false;
    for (int32_t t : next[s])
      if (t >= 0 && !seen[t]) { seen[t] = 1; st.push_back(t); }
  }
  return true;
}

void dfa_prune(Dfa& d) {
  size_t n = d.next.size();
  std::vector<std::vector<int32_t>> rev(n);
  for (size_t s = 0; s < n; ++s)
    for (int32_t t : d.next[s])
      if (t >= 0) rev[t].push_back(int32_t(s));
  std::vector<uint8_t> live(n, 0);
  std::vector<int32_t> st;
  for (size_t s = 0; s < n; ++s)
    if (d.accept[s]) { live[s] = 1; st.push_back(int32_t(s)); }
  while (!st.empty()) {
    int32_t s = st.back();
    st.pop_back();
    for (int32_t p : rev[s])
      if (!live[p]) { live[p] = 1; st.push_back(p); }
  }
  for (size_t s = 0; s < n; ++s)
    for (auto& t : d.next[s])
      if (t >= 0 && !live[t]) t = -1;
}

bool dfa_matches(const Dfa& d, std::string_view s) {
  int32_t q = d.start;
  for (unsigned char c : s) {
    q = d.next[q][c];
    if (q < 0) return false;
  }
  return d.accept[q] != 0;
}

RegexOutcome compile_regex(std::string_view pattern, bool full_match, size_t max_states) {
  RegexOutcome r;
  RegexParser p;
  p.full_match_ = full_match;
  if (!decode_utf8(pattern, p.s)) {
    r.error = "pattern is not valid UTF-8";
    return r;
  }
  NodeP ast = p.alternation(true);
  if (ast && !p.eof()) p.fail("unbalanced ')' in pattern");
  if (!ast || !p.err.empty()) {
    r.error = p.err.empty() ? "bad pattern" : p.err;
    return r;
  }
  NfaBuilder nb;
  nb.limit = 60000;
  auto [s, e] = nb.build(*ast);
  if (nb.overflow) {
    r.error = "pattern too large";
    return r;
  }
  if (!subset_construct(nb.nfa, s, e, max_states, r.dfa)) {
    r.error = "pattern too complex (DFA state limit)";
    return r;
  }
  dfa_prune(r.dfa);
  r.ok = true;
  return r;
}

namespace {
template <bool kMinus>
Dfa product(const Dfa& a, const Dfa& b, size_t max_states) {
  // b state -1 stands for "b has rejected" (relevant for the difference only).
  std::unordered_map<uint64_t, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> work;
  Dfa out;
  auto key = [](int32_t x, int32_t y) { return (uint64_t(uint32_t(x)) << 32) | uint32_t(y); };
  auto get = [&](int32_t x, int32_t y) -> int32_t {
    auto it = ids.find(key(x, y));
    if (it != ids.end()) return it->second;
    if (out.next.size() >= max_states) return -2;
    int32_t id = int32_t(out.next.size());
    ids.emplace(key(x, y), id);
    out.next.push_back({});
    out.next.back().fill(-1);
    bool acc = kMinus ? (a.accept[x] && (y < 0 || !b.accept[y])) : (a.accept[x] && b.accept[y]);
    out.accept.push_back(acc ? 1 : 0);
    work.push_back({x, y});
    return id;
  };
  out.start = get(a.start, b.start);
  for (size_t k = 0; k < work.size(); ++k) {
    auto [x, y] = work[k];
    for (int c = 0; c < 256; ++c) {
      int32_t x2 = a.next[x][c];
      if (x2 < 0) continue;
      int32_t y2 = y < 0 ? -1 : b.next[y][c];
      if (!kMinus && y2 < 0) continue;
      int32_t t = get(x2, y2);
      if (t == -2) return Dfa{};  // caller checks for emptiness (refuses)
      out.next[k][c] = t;
    }
  }
  dfa_prune(out);
  return out;
}
}  // namespace

Dfa dfa_intersect(const Dfa& a, const Dfa& b, size_t max_states) { return product<false>(a, b, max_states); }
Dfa dfa_minus(const Dfa& a, const Dfa& b, size_t max_states) { return product<true>(a, b, max_states); }

Dfa dfa_literals(const std::vector<std::string>& words) {
  Dfa d;
  d.next.push_back({});
  d.next[0].fill(-1);
  d.accept.push_back(0);
  for (const auto& w : words) {
    int32_t q = 0;
    for (unsigned char c : w) {
      if (d.next[q][c] < 0) {
        d.next[q][c] = int32_t(d.next.size());
        d.next.push_back({});
        d.next.back().fill(-1);
        d.accept.push_back(0);
      }
      q = d.next[q][c];
    }
    d.accept[q] = 1;
  }
  return d;
}

namespace {
// Same-length range [lo, hi] of digit strings (leading zeros allowed: these are suffixes).
std::string same_len(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  auto cls = [](char a, char b) {
    return a == b ? std::string(1, a) : "[" + std::string(1, a) + "-" + std::string(1, b) + "]";
  };
  if (lo.size() == 1) return cls(lo[0], hi[0]);
  if (lo[0] == hi[0]) return std::string(1, lo[0]) + "(" + same_len(lo.substr(1), hi.substr(1)) + ")";
  size_t n = lo.size() - 1;
  // A suffix range that is complete ("0..0" to "9..9") folds into the middle class; this keeps
  // the regex linear in the number of digits.
  bool lo_full = lo.find_first_not_of('0', 1) == std::string::npos;
  bool hi_full = hi.find_first_not_of('9', 1) == std::string::npos;
  char a = lo_full ? lo[0] : char(lo[0] + 1), b = hi_full ? hi[0] : char(hi[0] - 1);
  std::vector<std::string> parts;
  if (!lo_full) parts.push_back(std::string(1, lo[0]) + "(" + same_len(lo.substr(1), std::string(n, '9')) + ")");
  if (a <= b) parts.push_back(cls(a, b) + "[0-9]{" + std::to_string(n) + "}");
  if (!hi_full) parts.push_back(std::string(1, hi[0]) + "(" + same_len(std::string(n, '0'), hi.substr(1)) + ")");
  std::string out;
  for (size_t k = 0; k < parts.size(); ++k) out += (k ? "|" : "") + parts[k];
  return out;
}
}  // namespace

std::string nonneg_range_regex(int64_t lo, int64_t hi) {
  if (lo < 0) lo = 0;
  if (hi >= 0 && hi < lo) return "";
  std::string a = std::to_string(lo);
  std::vector<std::string> parts;
  size_t max_len = hi >= 0 ? std::to_string(hi).size() : a.size();
  for (size_t len = a.size(); len <= max_len; ++len) {
    std::string l = len == a.size() ? a : "1" + std::string(len - 1, '0');
    std::string h = (hi >= 0 && len == max_len) ? std::to_string(hi) : std::string(len, '9');
    if (len == 1 && l == "0" && h == "0") { parts.push_back("0"); continue; }
    parts.push_back(same_len(l, h));
  }
  if (hi < 0) parts.push_back("[1-9][0-9]{" + std::to_string(a.size()) + ",}");
  std::string out;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (k) out += "|";
    out += "(" + parts[k] + ")";
  }
  return out;
}

}  // namespace picolm::grammar::detail
