// Recognizer (sets of stacks over the byte-level grammar), Vocabulary tables and the Matcher.
#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cstring>
#include <deque>
#include <optional>
#include <stdexcept>
#include <set>

#include "grammar/grammar_impl.h"

namespace picolm::grammar {

using namespace detail;

namespace detail {

namespace {
enum StrSub : uint8_t {
  S0 = 0, C1, C2, C3, SE0, SED, SF0, SF4, ESC, U1, U2, U2D, U3, U4, H3, H4, P0, P1, P2, P3, P4, P5
};
static_assert(P5 + 1 == kStrSubStates);

bool is_hex(int b) { return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

std::array<std::array<uint8_t, 256>, kStrSubStates> make_strchar_table() {
  std::array<std::array<uint8_t, 256>, kStrSubStates> t;
  for (auto& row : t) row.fill(kStrReject);
  for (int b = 0x20; b <= 0x7F; ++b)
    if (b != '"' && b != '\\') t[S0][b] = kStrDone;
  t[S0]['\\'] = ESC;
  for (int b = 0xC2; b <= 0xDF; ++b) t[S0][b] = C1;
  t[S0][0xE0] = SE0;
  for (int b = 0xE1; b <= 0xEC; ++b) t[S0][b] = C2;
  t[S0][0xED] = SED;
  t[S0][0xEE] = C2;
  t[S0][0xEF] = C2;
  t[S0][0xF0] = SF0;
  for (int b = 0xF1; b <= 0xF3; ++b) t[S0][b] = C3;
  t[S0][0xF4] = SF4;
  for (int b = 0x80; b <= 0xBF; ++b) {
    t[C1][b] = kStrDone;
    t[C2][b] = C1;
    t[C3][b] = C2;
  }
  for (int b = 0xA0; b <= 0xBF; ++b) t[SE0][b] = C1;
  for (int b = 0x80; b <= 0x9F; ++b) t[SED][b] = C1;  // no UTF-8 encoded surrogates
  for (int b = 0x90; b <= 0xBF; ++b) t[SF0][b] = C2;
  for (int b = 0x80; b <= 0x8F; ++b) t[SF4][b] = C2;
  for (int b : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) t[ESC][b] = kStrDone;
  t[ESC]['u'] = U1;
  for (int b = 0; b < 256; ++b) {
    if (!is_hex(b)) continue;
    t[U1][b] = (b == 'd' || b == 'D') ? U2D : U2;
    t[U2][b] = U3;
    t[U3][b] = U4;
    t[U4][b] = kStrDone;
    t[H3][b] = H4;
    t[H4][b] = P0;
    t[P4][b] = P5;
    t[P5][b] = kStrDone;
  }
  // \uD800-\uDBFF must be followed by \uDC00-\uDFFF; a lone low surrogate is refused.
  for (int b = '0'; b <= '7'; ++b) t[U2D][b] = U3;
  for (int b : {'8', '9', 'a', 'b', 'A', 'B'}) t[U2D][b] = H3;
  t[P0]['\\'] = P1;
  t[P1]['u'] = P2;
  t[P2]['d'] = P3;
  t[P2]['D'] = P3;
  for (int b : {'c', 'd', 'e', 'f', 'C', 'D', 'E', 'F'}) t[P3][b] = P4;
  return t;
}
}  // namespace

const std::array<std::array<uint8_t, 256>, kStrSubStates>& strchar_table() {
  static const auto table = make_strchar_table();  // immutable after first use
  return table;
}

// Advances sets of stacks. Stack sets are stored flat: [len, e_0 .. e_{len-1}]*, bottom first,
// sorted and deduplicated so that equal states have equal bytes (the mask-cache key).
class Recognizer {
 public:
  explicit Recognizer(const Grammar& g) : g_(g), table_(strchar_table()) {}

  void initial(std::vector<uint32_t>& out) {
    out.clear();
    std::vector<uint32_t> st{g_.start_pos};
    expand(st, 0, out);
    canonicalize(out);
  }

  // out = state after `byte`; returns false if no stack survives. tags() is then the union of the
  // KeyTag bits of the terminals that consumed it.
  bool advance(const std::vector<uint32_t>& in, uint8_t byte, std::vector<uint32_t>& out) {
    out.clear();
    tags_ = 0;
    size_t i = 0, n = in.size();
    while (i < n) {
      uint32_t len = in[i];
      const uint32_t* s = &in[i + 1];
      i += 1 + len;
      if (len == 0) continue;
      uint32_t top = s[len - 1];
      uint32_t pos = top & kPosMask;
      const Elem& e = g_.elems[pos];
      if (e.kind == ElemKind::Class) {
        if (!byteset_has(g_.classes[e.arg], byte)) continue;
        tags_ = uint8_t(tags_ | e.tag);
        st_.assign(s, s + len);
        st_.back() = pos + 1;
        expand(st_, 0, out);
      } else {  // StrChar / StrCharLoop / StrCharRaw
        const uint32_t sub = top >> kPosBits;
        uint8_t nx = table_[sub][byte];
        if (e.kind == ElemKind::StrCharRaw && sub == 0 && byte < 0x80)
          nx = byteset_has(g_.classes[e.arg], byte) ? kStrDone : kStrReject;
        if (nx == kStrReject) continue;
        st_.assign(s, s + len);
        if (nx == kStrDone) {
          st_.back() = pos + 1;
          expand(st_, 0, out);
        } else {
          st_.back() = pos | (uint32_t(nx) << kPosBits);
          emit(st_, out);
        }
      }
    }
    canonicalize(out);
    return !out.empty();
  }
  uint8_t tags() const { return tags_; }

 private:
  static void emit(const std::vector<uint32_t>& st, std::vector<uint32_t>& out) {
    out.push_back(uint32_t(st.size()));
    out.insert(out.end(), st.begin(), st.end());
  }

  // Resolves Ref/End at the top of `st` until every resulting stack has a terminal on top (or is
  // empty = complete). Consumes `st`.
  void expand(std::vector<uint32_t>& st, int depth, std::vector<uint32_t>& out) {
    if (depth > 2000) return;  // runaway (left-recursive) expansion: treat as dead, never accept
    while (!st.empty()) {
      uint32_t pos = st.back() & kPosMask;
      const Elem& e = g_.elems[pos];
      if (e.kind == ElemKind::End) {
        st.pop_back();
        continue;
      }
      if (e.kind != ElemKind::Ref) break;
      st.pop_back();
      if (g_.elems[pos + 1].kind != ElemKind::End) st.push_back(pos + 1);  // tail calls push nothing
      uint32_t b = g_.rule_alt_begin[e.arg], en = g_.rule_alt_begin[e.arg + 1];
      for (uint32_t a = b; a < en; ++a) {
        if (a + 1 == en) {
          st.push_back(g_.alt_starts[a]);
          expand(st, depth + 1, out);
        } else {
          // Per-depth scratch buffers keep their capacity: no allocation in the steady state.
          if (scratch_.size() <= size_t(depth)) scratch_.resize(size_t(depth) + 1);
          std::vector<uint32_t>& copy = scratch_[size_t(depth)];
          copy.assign(st.begin(), st.end());
          copy.push_back(g_.alt_starts[a]);
          expand(copy, depth + 1, out);
        }
      }
      return;
    }
    emit(st, out);
  }

  void canonicalize(std::vector<uint32_t>& data) {
    spans_.clear();
    size_t i = 0;
    while (i < data.size()) {
      spans_.push_back({uint32_t(i), data[i]});
      i += 1 + data[i];
    }
    if (spans_.size() <= 1) return;
    const uint32_t* d = data.data();
    auto less = [d](const std::pair<uint32_t, uint32_t>& a, const std::pair<uint32_t, uint32_t>& b) {
      return std::lexicographical_compare(d + a.first, d + a.first + 1 + a.second, d + b.first,
                                          d + b.first + 1 + b.second);
    };
    auto eq = [d](const std::pair<uint32_t, uint32_t>& a, const std::pair<uint32_t, uint32_t>& b) {
      return a.second == b.second && std::equal(d + a.first, d + a.first + 1 + a.second, d + b.first);
    };
    bool sorted = true;
    for (size_t k = 1; k < spans_.size() && sorted; ++k) sorted = less(spans_[k - 1], spans_[k]);
    if (sorted) return;
    std::sort(spans_.begin(), spans_.end(), less);
    spans_.erase(std::unique(spans_.begin(), spans_.end(), eq), spans_.end());
    tmp_.clear();
    for (auto [off, len] : spans_) tmp_.insert(tmp_.end(), d + off, d + off + 1 + len);
    data.swap(tmp_);
  }

  const Grammar& g_;
  const std::array<std::array<uint8_t, 256>, kStrSubStates>& table_;
  std::vector<uint32_t> st_;
  std::deque<std::vector<uint32_t>> scratch_;  // [expansion depth]; deque: growing keeps references valid
  std::vector<std::pair<uint32_t, uint32_t>> spans_;
  std::vector<uint32_t> tmp_;
  uint8_t tags_ = 0;
};

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Grammar finalization

namespace {

// Longest chains of one terminal kind, for the mask fast paths (Grammar::strchar_run and
// class_run). A chain link is `p: T Ref(r)` where an alternative of r starts with a matching T at
// q (the same class for Class; StrChar or StrCharLoop for StrChar). run(p) = 1 + max run(q), the
// longest path from p; kRunInf when p reaches a cycle (`([a-z][a-z])*`, loops). Iterative DFS:
// counted chains are 10^5 links long.
enum class ChainKind { StrChar, Class, StrCharRaw };

void chain_runs(const Grammar& g, std::vector<uint32_t>& run, ChainKind kind) {
  const size_t n = g.elems.size();
  run.assign(n, 0);
  auto is_link = [&](uint32_t p) {
    const Elem& e = g.elems[p];
    switch (kind) {
      case ChainKind::StrChar: return e.kind == ElemKind::StrChar || e.kind == ElemKind::StrCharLoop;
      case ChainKind::Class: return e.kind == ElemKind::Class && g.elems[p + 1].kind == ElemKind::Ref;
      case ChainKind::StrCharRaw: return e.kind == ElemKind::StrCharRaw;
    }
    return false;
  };
  auto matches = [&](uint32_t p, uint32_t q) {
    const Elem& a = g.elems[p];
    const Elem& b = g.elems[q];
    switch (kind) {
      case ChainKind::StrChar: return b.kind == ElemKind::StrChar || b.kind == ElemKind::StrCharLoop;
      case ChainKind::Class:
        return b.kind == ElemKind::Class && b.arg == a.arg && g.elems[q + 1].kind == ElemKind::Ref;
      case ChainKind::StrCharRaw: return b.kind == ElemKind::StrCharRaw && b.arg == a.arg;
    }
    return false;
  };
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the DFS stack, 2 done
  struct Frame {
    uint32_t p, alt, alt_end;
    uint64_t best;
  };
  std::vector<Frame> stack;
  for (uint32_t root = 0; root < n; ++root) {
    if (color[root] || !is_link(root)) continue;
    auto push = [&](uint32_t p) {
      color[p] = 1;
      Frame f{p, 0, 0, 0};
      if (g.elems[p].kind == ElemKind::StrCharLoop) {
        f.best = Grammar::kRunInf;  // loops on itself
      } else if (g.elems[p + 1].kind == ElemKind::Ref) {
        uint32_t r = g.elems[p + 1].arg;
        f.alt = g.rule_alt_begin[r];
        f.alt_end = g.rule_alt_begin[r + 1];
      }
      stack.push_back(f);
    };
    push(root);
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.alt < f.alt_end && f.best < Grammar::kRunInf) {
        uint32_t q = g.alt_starts[f.alt++];
        if (!matches(f.p, q)) continue;
        if (color[q] == 1) f.best = Grammar::kRunInf;  // a cycle
        else if (color[q] == 2) f.best = std::max<uint64_t>(f.best, run[q]);
        else push(q);  // invalidates f
        continue;
      }
      uint32_t p = f.p;
      uint64_t v = f.best >= Grammar::kRunInf - 1 ? Grammar::kRunInf : f.best + 1;
      run[p] = uint32_t(v);
      color[p] = 2;
      stack.pop_back();
      if (!stack.empty()) {
        Frame& parent = stack.back();
        parent.best = std::max<uint64_t>(parent.best, run[p]);
      }
    }
  }
}

void compute_runs(Grammar& g) {
  std::vector<uint32_t> raw_run;
  chain_runs(g, g.strchar_run, ChainKind::StrChar);
  chain_runs(g, g.class_run, ChainKind::Class);
  chain_runs(g, raw_run, ChainKind::StrCharRaw);
  // Only Class positions keep class runs; string runs of both kinds share strchar_run.
  for (size_t p = 0; p < g.elems.size(); ++p) {
    if (g.elems[p].kind != ElemKind::Class) g.class_run[p] = 0;
    if (g.elems[p].kind == ElemKind::StrCharRaw) g.strchar_run[p] = raw_run[p];
    else if (g.elems[p].kind != ElemKind::StrChar && g.elems[p].kind != ElemKind::StrCharLoop) g.strchar_run[p] = 0;
  }
}

}  // namespace

std::shared_ptr<Grammar> Grammar::build(RuleBuilder& rb, uint32_t root, std::string& err) {
  size_t nr = rb.rules.size();
  // Productivity by worklist (linear; long counted chains would make a naive fixpoint quadratic).
  std::vector<uint8_t> prod(nr, 0);
  std::vector<std::pair<uint32_t, uint32_t>> alt_owner;     // [alt] (rule, unproductive refs left)
  std::vector<std::vector<uint32_t>> uses(nr);              // [rule] alts referencing it
  std::vector<uint32_t> work;
  for (size_t r = 0; r < nr; ++r)
    for (const auto& alt : rb.rules[r]) {
      uint32_t id = uint32_t(alt_owner.size());
      uint32_t refs = 0;
      for (const auto& e : alt)
        if (e.kind == ElemKind::Ref) {
          uses[e.arg].push_back(id);
          ++refs;
        }
      alt_owner.push_back({uint32_t(r), refs});
      if (refs == 0 && !prod[r]) {
        prod[r] = 1;
        work.push_back(uint32_t(r));
      }
    }
  while (!work.empty()) {
    uint32_t r = work.back();
    work.pop_back();
    for (uint32_t a : uses[r]) {
      if (--alt_owner[a].second == 0 && !prod[alt_owner[a].first]) {
        prod[alt_owner[a].first] = 1;
        work.push_back(alt_owner[a].first);
      }
    }
  }
  if (!prod[root]) {
    err = "the schema admits no instance that this engine can generate (unsatisfiable or too restrictive)";
    return nullptr;
  }
  auto g = std::make_shared<Grammar>();
  g->classes = rb.classes;
  g->elems.push_back({ElemKind::Ref, root});
  g->elems.push_back({ElemKind::End, 0});
  g->start_pos = 0;
  g->rule_alt_begin.resize(nr + 1);
  for (size_t r = 0; r < nr; ++r) {
    g->rule_alt_begin[r] = uint32_t(g->alt_starts.size());
    if (!prod[r]) continue;
    for (const auto& alt : rb.rules[r]) {
      bool ok = true;
      for (const auto& e : alt)
        if (e.kind == ElemKind::Ref && !prod[e.arg]) { ok = false; break; }
      if (!ok) continue;
      g->alt_starts.push_back(uint32_t(g->elems.size()));
      g->elems.insert(g->elems.end(), alt.begin(), alt.end());
      g->elems.push_back({ElemKind::End, 0});
    }
  }
  g->rule_alt_begin[nr] = uint32_t(g->alt_starts.size());
  g->self_loop_class.assign(g->elems.size(), -1);
  for (size_t r = 0; r < nr; ++r)
    for (uint32_t a = g->rule_alt_begin[r]; a < g->rule_alt_begin[r + 1]; ++a) {
      uint32_t p = g->alt_starts[a];
      const auto& e = g->elems;
      if (e[p].kind == ElemKind::Class && e[p + 1].kind == ElemKind::Ref && e[p + 1].arg == r &&
          e[p + 2].kind == ElemKind::End)
        g->self_loop_class[p] = int32_t(e[p].arg);
    }
  for (int32_t c : g->self_loop_class)
    if (c >= 0 && std::find(g->loop_class_ids.begin(), g->loop_class_ids.end(), c) == g->loop_class_ids.end())
      g->loop_class_ids.push_back(c);
  if (g->elems.size() >= kPosMask) {
    err = "grammar too large";
    return nullptr;
  }
  compute_runs(*g);
  // Keys are tracked only where some key can close at a tagged terminal (free JSON keys, XML and
  // Python names): objects with listed JSON keys only cost nothing.
  for (const Elem& e : g->elems) {
    if (e.kind != ElemKind::Class || !(e.tag & (kTagKeyOpen | kTagKeyClose))) continue;
    if (e.tag & kTagKeyClose) g->has_key_tags = true;
    for (size_t w = 0; w < 4; ++w) {
      if (e.tag & kTagKeyOpen) g->key_open_bytes[w] |= g->classes[e.arg][w];
      if (e.tag & kTagKeyClose) g->key_close_bytes[w] |= g->classes[e.arg][w];
    }
  }
  for (size_t p = 0; p < g->elems.size(); ++p) {
    int32_t c = int32_t(g->elems[p].arg);
    bool wanted = (g->elems[p].kind == ElemKind::Class && g->class_run[p] >= Grammar::kMinClassRun) ||
                  g->elems[p].kind == ElemKind::StrCharRaw;
    if (wanted && std::find(g->loop_class_ids.begin(), g->loop_class_ids.end(), c) == g->loop_class_ids.end())
      g->loop_class_ids.push_back(c);
  }
  compute_min_lengths(*g);
  return g;
}

std::string Grammar::dump() const {
  auto cls_text = [&](const ByteSet& s) {
    std::string o = "[";
    for (int b = 0; b < 256; ++b) {
      if (!byteset_has(s, uint8_t(b))) continue;
      int e = b;
      while (e + 1 < 256 && byteset_has(s, uint8_t(e + 1))) ++e;
      auto one = [](int c) {
        char buf[8];
        if (c >= 0x21 && c < 0x7F && c != '\\' && c != ']' && c != '-') return std::string(1, char(c));
        std::snprintf(buf, sizeof buf, "\\x%02X", c);
        return std::string(buf);
      };
      o += one(b);
      if (e > b) o += "-" + one(e);
      b = e;
    }
    return o + "]";
  };
  std::string out;
  size_t nr = rule_alt_begin.size() - 1;
  for (size_t r = 0; r < nr; ++r) {
    if (rule_alt_begin[r] == rule_alt_begin[r + 1]) continue;
    out += "r" + std::to_string(r) + " ::=";
    for (uint32_t a = rule_alt_begin[r]; a < rule_alt_begin[r + 1]; ++a) {
      if (a != rule_alt_begin[r]) out += " |";
      for (uint32_t p = alt_starts[a]; elems[p].kind != ElemKind::End; ++p) {
        const Elem& e = elems[p];
        switch (e.kind) {
          case ElemKind::Ref: out += " r" + std::to_string(e.arg); break;
          case ElemKind::Class: out += " " + cls_text(classes[e.arg]); break;
          case ElemKind::StrChar: out += " <strchar>"; break;
          case ElemKind::StrCharLoop: out += " <strchar*>"; break;
          case ElemKind::StrCharRaw: out += " <raw" + cls_text(classes[e.arg]) + ">"; break;
          case ElemKind::End: break;
        }
      }
      if (elems[alt_starts[a]].kind == ElemKind::End) out += " \"\"";
    }
    out += "\n";
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Vocabulary

namespace {

class VocabularyImpl final : public Vocabulary {
 public:
  struct Node {
    uint8_t byte;
    uint8_t all_safe;  // every token in this subtree is string-safe (see below)
    uint16_t depth;    // 1 = child of the root
    uint32_t end;      // index one past this node's subtree (nodes are in DFS order)
    uint32_t tok_begin, tok_end;  // range in node_tokens_ of tokens whose bytes end here
  };

  VocabularyImpl(std::vector<std::string> toks, std::vector<int32_t> eog)
      : tokens_(std::move(toks)), eog_(std::move(eog)) {
    size_t n = tokens_.size();
    words_ = (n + 31) / 32;
    is_eog_.assign(n, 0);
    for (int32_t id : eog_)
      if (id >= 0 && size_t(id) < n) is_eog_[id] = 1;
    // A token is "string-safe" if the StrChar automaton, looping back after each character,
    // consumes all its bytes (it may stop inside a character or an escape). From a StrCharLoop
    // position such a token keeps the recognizer alive, and the string can still be closed.
    const auto& t = strchar_table();
    std::vector<uint8_t> safe(n, 0);
    std::vector<uint32_t> chars(n, 0);  // string characters a safe token starts
    safe_mask_.assign(words_, 0);
    for (size_t id = 0; id < n; ++id) {
      if (is_eog_[id] || tokens_[id].empty()) continue;
      uint8_t sub = 0;
      bool ok = true;
      for (unsigned char c : tokens_[id]) {
        if (sub == 0) ++chars[id];
        uint8_t nx = t[sub][c];
        if (nx == kStrReject) { ok = false; break; }
        sub = nx == kStrDone ? 0 : nx;
      }
      if (ok) {
        safe[id] = 1;
        safe_mask_[id / 32] |= 1u << (id % 32);
        max_safe_chars_ = std::max(max_safe_chars_, chars[id]);
      }
    }
    // Trie in DFS order from the sorted token list.
    std::vector<int32_t> order;
    for (size_t id = 0; id < n; ++id)
      if (!is_eog_[id] && !tokens_[id].empty()) order.push_back(int32_t(id));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return tokens_[a] < tokens_[b] || (tokens_[a] == tokens_[b] && a < b);
    });
    std::vector<uint32_t> path;  // node index per depth-1
    const std::string* prev = nullptr;
    for (int32_t id : order) {
      const std::string& s = tokens_[id];
      size_t lcp = 0;
      if (prev) {
        size_t m = std::min(prev->size(), s.size());
        while (lcp < m && (*prev)[lcp] == s[lcp]) ++lcp;
      }
      while (path.size() > lcp) {
        nodes_[path.back()].end = uint32_t(nodes_.size());
        path.pop_back();
      }
      for (size_t d = lcp; d < s.size(); ++d) {
        Node nd{};
        nd.byte = uint8_t(s[d]);
        nd.depth = uint16_t(std::min<size_t>(d + 1, 65535));
        nd.tok_begin = nd.tok_end = uint32_t(node_tokens_.size());
        path.push_back(uint32_t(nodes_.size()));
        nodes_.push_back(nd);
      }
      Node& last = nodes_[path.back()];
      node_tokens_.push_back(id);
      last.tok_end = uint32_t(node_tokens_.size());
      max_depth_ = std::max(max_depth_, s.size());
      prev = &s;
    }
    while (!path.empty()) {
      nodes_[path.back()].end = uint32_t(nodes_.size());
      path.pop_back();
    }
    node_max_chars_.assign(nodes_.size(), 0);
    for (size_t i = nodes_.size(); i-- > 0;) {
      Node& nd = nodes_[i];
      bool ok = true;
      uint32_t mc = 0;
      for (uint32_t k = nd.tok_begin; k < nd.tok_end && ok; ++k) {
        ok = safe[node_tokens_[k]];
        mc = std::max(mc, chars[node_tokens_[k]]);
      }
      for (uint32_t j = uint32_t(i + 1); j < nd.end && ok; j = nodes_[j].end) {
        ok = nodes_[j].all_safe;
        mc = std::max(mc, node_max_chars_[j]);
      }
      nd.all_safe = ok;
      node_max_chars_[i] = mc;
    }
    node_max_len_.assign(nodes_.size(), 0);
    for (size_t i = nodes_.size(); i-- > 0;) {
      const Node& nd = nodes_[i];
      uint32_t ml = nd.tok_end > nd.tok_begin ? nd.depth : 0;
      for (uint32_t j = uint32_t(i + 1); j < nd.end; j = nodes_[j].end) ml = std::max(ml, node_max_len_[j]);
      node_max_len_[i] = ml;
    }
    root_child_.fill(-1);
    for (size_t i = 0; i < nodes_.size(); i = nodes_[i].end) root_child_[nodes_[i].byte] = int32_t(i);
    // str_ok_[node]: bit s set if, starting the looping StrChar automaton in sub-state s, the
    // node's byte and every continuation in its subtree are consumed. below_ok_[node]: the AND
    // of str_ok_ over the children, i.e. which sub-states reached AFTER the node accept the whole
    // rest of the subtree (mask fast path below the trie root, e.g. after an escape or mid-UTF-8).
    str_ok_.assign(nodes_.size(), 0);
    below_ok_.assign(nodes_.size(), 0);
    for (size_t i = nodes_.size(); i-- > 0;) {
      const Node& nd = nodes_[i];
      uint32_t below = ~0u;
      for (uint32_t j = uint32_t(i + 1); j < nd.end; j = nodes_[j].end) below &= str_ok_[j];
      below_ok_[i] = below;
      uint32_t ok = 0;
      for (int sub = 0; sub < kStrSubStates; ++sub) {
        uint8_t nx = t[sub][nd.byte];
        if (nx == kStrReject) continue;
        int after = nx == kStrDone ? 0 : nx;
        if ((below >> after) & 1) ok |= 1u << sub;
      }
      str_ok_[i] = ok;
    }
    // The same for raw characters (StrCharRaw: no escapes; which ASCII bytes a chain accepts is
    // its class's business, answered by the class loop tables): per token, per subtree, and which
    // sub-states after a node accept everything below it.
    {
      auto raw = t;
      raw[0]['\\'] = kStrReject;
      raw_safe_mask_.assign(words_, 0);
      std::vector<uint8_t> raw_safe(n, 0);
      for (size_t id = 0; id < n; ++id) {
        if (!safe[id]) continue;
        uint8_t sub = 0;
        bool ok = true;
        for (unsigned char c : tokens_[id]) {
          uint8_t nx = raw[sub][c];
          if (nx == kStrReject) { ok = false; break; }
          sub = nx == kStrDone ? 0 : nx;
        }
        if (ok) {
          raw_safe[id] = 1;
          raw_safe_mask_[id / 32] |= 1u << (id % 32);
        }
      }
      all_raw_safe_.assign(nodes_.size(), 0);
      raw_below_ok_.assign(nodes_.size(), 0);
      std::vector<uint32_t> raw_ok(nodes_.size(), 0);
      for (size_t i = nodes_.size(); i-- > 0;) {
        const Node& nd = nodes_[i];
        bool all = true;
        for (uint32_t k = nd.tok_begin; k < nd.tok_end && all; ++k) all = raw_safe[node_tokens_[k]];
        uint32_t below = ~0u;
        for (uint32_t j = uint32_t(i + 1); j < nd.end; j = nodes_[j].end) {
          below &= raw_ok[j];
          all = all && all_raw_safe_[j];
        }
        all_raw_safe_[i] = all;
        raw_below_ok_[i] = below;
        uint32_t ok = 0;
        for (int sub = 0; sub < kStrSubStates; ++sub) {
          uint8_t nx = raw[size_t(sub)][nd.byte];
          if (nx == kStrReject) continue;
          int after = nx == kStrDone ? 0 : nx;
          if ((below >> after) & 1) ok |= 1u << sub;
        }
        raw_ok[i] = ok;
      }
    }
    // Fingerprint of the contents: keys the shared mask caches, so equal vocabularies share
    // entries and a different vocabulary can never hit another's masks.
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const void* p, size_t len) {
      const unsigned char* c = static_cast<const unsigned char*>(p);
      for (size_t k = 0; k < len; ++k) { h ^= c[k]; h *= 1099511628211ull; }
    };
    for (const auto& s : tokens_) {
      uint64_t len = s.size();
      mix(&len, sizeof len);
      mix(s.data(), s.size());
    }
    for (int32_t id : eog_) mix(&id, sizeof id);
    fingerprint_ = h;
  }

  // Tables for one byte class C: which tokens consist only of bytes in C, and which trie subtrees
  // contain only such tokens. Built on first use per class and kept (bounded) for the lifetime of
  // the vocabulary: grammars of one deployment use few distinct loop classes.
  struct LoopTables {
    std::vector<uint32_t> token_mask;  // bitset over token ids
    std::vector<uint8_t> subtree_in;   // [node]: the path from the root and everything below are in C
    std::vector<uint8_t> below_in;     // [node]: everything strictly below the node is in C
  };
  std::shared_ptr<const LoopTables> loop_tables(const ByteSet& c) const {
    {
      std::lock_guard<std::mutex> lock(loop_mu_);
      auto it = loop_tables_.find(c);
      if (it != loop_tables_.end()) return it->second;
      if (loop_tables_.size() >= 256) return nullptr;
    }
    // Linear passes over the DFS-ordered trie: a node's subtree is the index range [i, end), so
    // "everything below is in C" is a range query on prefix counts of nodes whose byte is not in C.
    auto t = std::make_shared<LoopTables>();
    t->token_mask.assign(words_, 0);
    size_t nn = nodes_.size();
    std::vector<uint32_t> bad_before(nn + 1, 0);
    std::vector<uint8_t> path_ok(max_depth_ + 1, 1);
    t->subtree_in.assign(nn, 0);
    for (size_t i = 0; i < nn; ++i) {
      const Node& nd = nodes_[i];
      bool in = byteset_has(c, nd.byte);
      bad_before[i + 1] = bad_before[i] + (in ? 0 : 1);
      bool ok = in && path_ok[nd.depth - 1];
      path_ok[nd.depth] = ok;
      t->subtree_in[i] = ok;  // completed below: the path to here is in C ...
      if (ok)
        for (uint32_t k = nd.tok_begin; k < nd.tok_end; ++k) {
          int32_t id = node_tokens_[k];
          t->token_mask[size_t(id) / 32] |= 1u << (id % 32);
        }
    }
    t->below_in.assign(nn, 0);
    for (size_t i = 0; i < nn; ++i) {
      uint32_t end = nodes_[i].end;
      t->below_in[i] = bad_before[end] == bad_before[i + 1];
      t->subtree_in[i] = t->subtree_in[i] && t->below_in[i];  // ... and so is everything below
    }
    std::lock_guard<std::mutex> lock(loop_mu_);
    loop_tables_.emplace(c, t);
    return t;
  }

  // Unique keys: the tokens that can close a key (holding a byte of `close`, the bytes of the
  // grammar's key-closing terminals). Built on first use per byte set (one pass over the tokens)
  // and kept.
  // Their bytes are copied into one buffer: a matcher reads them for every new recognizer state,
  // and the vocabulary's own strings, scattered over the heap, made that a cache miss per token.
  struct KeyTokenSet {
    std::vector<int32_t> ids;    // ascending
    std::vector<uint32_t> off;   // [ids.size() + 1]: token j is bytes[off[j], off[j + 1])
    std::string bytes;
    std::vector<uint16_t> last;  // [j]: index of the token's last byte in the set
    std::string_view token(size_t j) const { return std::string_view(bytes).substr(off[j], off[j + 1] - off[j]); }
    // Index of token `id`, or -1.
    int64_t find(int32_t id) const {
      auto it = std::lower_bound(ids.begin(), ids.end(), id);
      return it != ids.end() && *it == id ? it - ids.begin() : -1;
    }
  };
  std::shared_ptr<const KeyTokenSet> key_close_tokens(const ByteSet& close) const {
    {
      std::lock_guard<std::mutex> lock(loop_mu_);
      auto it = key_lists_.find(close);
      if (it != key_lists_.end()) return it->second;
    }
    auto t = std::make_shared<KeyTokenSet>();
    t->off.push_back(0);
    for (size_t id = 0; id < tokens_.size(); ++id) {
      if (is_eog_[id]) continue;
      const std::string& tok = tokens_[id];
      size_t last = tok.size();
      while (last-- > 0 && !byteset_has(close, uint8_t(tok[last]))) {
      }
      if (last == size_t(-1) || last > UINT16_MAX) continue;
      t->ids.push_back(int32_t(id));
      t->bytes += tok;
      t->off.push_back(uint32_t(t->bytes.size()));
      t->last.push_back(uint16_t(last));
    }
    std::lock_guard<std::mutex> lock(loop_mu_);
    key_lists_.emplace(close, t);
    return t;
  }

  // Trie child of `node` (-1 = the root) by byte, or -1.
  int32_t child(int32_t node, uint8_t b) const {
    if (node < 0) return root_child_[b];
    for (uint32_t j = uint32_t(node) + 1; j < nodes_[size_t(node)].end; j = nodes_[j].end)
      if (nodes_[j].byte == b) return int32_t(j);
    return -1;
  }

  size_t size() const override { return tokens_.size(); }
  const std::string& token(int32_t id) const override { return tokens_.at(size_t(id)); }
  const std::vector<int32_t>& eog_ids() const override { return eog_; }

  std::vector<std::string> tokens_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> is_eog_;
  size_t words_ = 0;
  std::vector<uint32_t> safe_mask_;  // bitset over token ids
  uint32_t max_safe_chars_ = 0;      // most string characters a safe token starts
  std::vector<uint32_t> node_max_chars_;  // [node] the same over the subtree (when all_safe)
  std::vector<uint32_t> node_max_len_;    // [node] bytes of the longest token in the subtree
  std::vector<uint32_t> raw_safe_mask_;   // bitset: tokens of raw (unescaped) string characters
  std::vector<uint8_t> all_raw_safe_;     // [node] every token in the subtree is raw-safe
  std::vector<uint32_t> raw_below_ok_;    // [node] sub-states after the node accepting all below, raw
  std::vector<Node> nodes_;
  std::vector<int32_t> node_tokens_;
  std::array<int32_t, 256> root_child_;  // [byte] top-level trie node, -1 if none
  std::vector<uint32_t> str_ok_, below_ok_;  // [node], bit per StrChar sub-state
  size_t max_depth_ = 0;
  uint64_t fingerprint_ = 0;
  mutable std::mutex loop_mu_;
  mutable std::map<ByteSet, std::shared_ptr<const LoopTables>> loop_tables_;
  mutable std::map<ByteSet, std::shared_ptr<const KeyTokenSet>> key_lists_;  // guarded by loop_mu_
};

// ---- unique keys ----
// The compiler tags object and key delimiters (KeyTag); the matcher keeps, per open object, the
// keys written so far, and refuses a byte that would close a key equal to one of them.

// The value of complete JSON string content: escapes decoded (\u surrogate pairs joined), so
// "\u0061" and "a" are the same key.
std::string decode_json_key(std::string_view s) {
  if (s.find('\\') == std::string_view::npos) return std::string(s);
  auto hex4 = [&](size_t i) {
    uint32_t v = 0;
    for (size_t k = i; k < i + 4; ++k) {
      const char c = s[k];
      v = v * 16 + uint32_t(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char e = s[++i];
    switch (e) {
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'u': {
        if (i + 4 >= s.size()) {  // incomplete (the grammar never closes a key there): keep as is
          out.append(s.substr(i - 1));
          i = s.size();
          break;
        }
        uint32_t cp = hex4(i + 1);
        i += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < s.size() && s[i + 1] == '\\' && s[i + 2] == 'u') {
          const uint32_t lo = hex4(i + 3);
          if (lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
          }
        }
        if (cp < 0x80) {
          out.push_back(char(cp));
        } else if (cp < 0x800) {
          out.push_back(char(0xC0 | (cp >> 6)));
          out.push_back(char(0x80 | (cp & 0x3F)));
        } else if (cp < 0x10000) {
          out.push_back(char(0xE0 | (cp >> 12)));
          out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
          out.push_back(char(0x80 | (cp & 0x3F)));
        } else {
          out.push_back(char(0xF0 | (cp >> 18)));
          out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
          out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
          out.push_back(char(0x80 | (cp & 0x3F)));
        }
        break;
      }
      default: out.push_back(e);  // \" \\ \/
    }
  }
  return out;
}

bool is_json_space(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }

// The key being written.
struct KeyCursor {
  bool in_key = false;
  bool json = false;     // JSON string content: compared decoded
  bool skip_ws = false;  // leading whitespace is not part of it (Python keywords after ", ")
  std::string buf;       // its bytes so far, as written

  void append(uint8_t b) {
    if (skip_ws && buf.empty() && is_json_space(b)) return;
    buf.push_back(char(b));
  }
  std::string name() const { return json ? decode_json_key(buf) : buf; }
};

// The keys written in each open object (innermost last) and the key being written; changes are
// logged so rollback can undo them.
struct KeySets {
  std::vector<std::set<std::string>> scopes;  // ordered: prefix queries
  KeyCursor cur;
  struct Undo {
    enum Kind : uint8_t { Push, Pop, Add } kind;
    uint32_t scope = 0;
    std::string key;                        // Add
    std::set<std::string> saved;  // Pop: the popped object's keys
  };
  std::vector<Undo> undo;

  void undo_to(size_t len) {
    while (undo.size() > len) {
      Undo& u = undo.back();
      switch (u.kind) {
        case Undo::Push: scopes.pop_back(); break;
        case Undo::Pop: scopes.push_back(std::move(u.saved)); break;
        case Undo::Add: scopes[u.scope].erase(u.key); break;
      }
      undo.pop_back();
    }
  }
  // Whether any key was written in an open object, or one is being written: only then can a
  // token repeat a key (short of writing a whole object with two equal keys in one token).
  bool active() const {
    if (cur.in_key) return true;
    for (const auto& s : scopes)
      if (!s.empty()) return true;
    return false;
  }
};

// The effect of some bytes (a token, a completion) on KeySets, before it is committed.
struct KeyOverlay {
  const KeySets* base;
  size_t depth;                                           // base objects still open: [0, depth)
  std::vector<std::vector<std::string>> pushed;           // objects opened by these bytes
  std::vector<std::pair<uint32_t, std::string>> added;    // (base object, key)
  KeyCursor cur;

  explicit KeyOverlay(const KeySets& b) : base(&b), depth(b.scopes.size()), cur(b.cur) {}

  // Whether the innermost open object already has key `name`.
  bool has(const std::string& name) const {
    if (!pushed.empty()) return std::find(pushed.back().begin(), pushed.back().end(), name) != pushed.back().end();
    if (depth == 0) return false;
    const uint32_t idx = uint32_t(depth - 1);
    if (base->scopes[idx].count(name)) return true;
    for (const auto& [i, k] : added)
      if (i == idx && k == name) return true;
    return false;
  }
  // Whether some key of the innermost open object starts with `p`.
  bool prefix_of_written(const std::string& p) const {
    auto starts = [&p](const std::string& k) { return k.compare(0, p.size(), p) == 0; };
    if (!pushed.empty()) return std::any_of(pushed.back().begin(), pushed.back().end(), starts);
    if (depth == 0) return false;
    const uint32_t idx = uint32_t(depth - 1);
    const auto& set = base->scopes[idx];
    if (auto it = set.lower_bound(p); it != set.end() && starts(*it)) return true;
    for (const auto& [i, k] : added)
      if (i == idx && starts(k)) return true;
    return false;
  }
  // The bytes that follow `p` in the keys of the innermost open object that start with it.
  ByteSet written_next(const std::string& p) const {
    ByteSet out{};
    auto add = [&](const std::string& k) {
      if (k.size() > p.size() && k.compare(0, p.size(), p) == 0) byteset_add(out, uint8_t(k[p.size()]));
    };
    if (!pushed.empty()) {
      for (const auto& k : pushed.back()) add(k);
      return out;
    }
    if (depth == 0) return out;
    const uint32_t idx = uint32_t(depth - 1);
    const auto& set = base->scopes[idx];
    for (auto it = set.lower_bound(p); it != set.end() && it->compare(0, p.size(), p) == 0; ++it) add(*it);
    for (const auto& [i, k] : added)
      if (i == idx) add(k);
    return out;
  }
  // Whether a byte with these tags would close a key that repeats one.
  bool repeats(uint8_t tags) const { return (tags & kTagKeyClose) && cur.in_key && has(cur.name()); }

  // Applies one byte that the recognizer consumed with `tags`; false (the overlay is then
  // unusable) when it closes a key already written in its object.
  bool step(uint8_t tags, uint8_t byte) {
    if (tags & kTagKeyClose) {
      if (!cur.in_key) return true;
      std::string k = cur.name();
      cur.in_key = false;
      cur.buf.clear();
      if (has(k)) return false;
      if (!pushed.empty()) pushed.back().push_back(std::move(k));
      else if (depth > 0) added.emplace_back(uint32_t(depth - 1), std::move(k));
      return true;
    }
    if (tags & kTagObjClose) {
      if (!pushed.empty()) pushed.pop_back();
      else if (depth > 0) --depth;
      cur.in_key = false;
      cur.buf.clear();
    }
    if (tags & kTagObjOpen) pushed.emplace_back();
    if (tags & kTagKeyOpen) {
      cur.in_key = true;
      cur.json = (tags & kTagKeyJson) != 0;
      cur.skip_ws = (tags & kTagKeySkipWs) != 0;
      cur.buf.clear();
    } else if (tags == 0 && cur.in_key) {
      cur.append(byte);
    }
    return true;
  }

  void commit(KeySets& ks) {
    using U = KeySets::Undo;
    for (auto& [idx, k] : added) {
      ks.scopes[idx].insert(k);
      ks.undo.push_back({U::Add, idx, std::move(k), {}});
    }
    while (ks.scopes.size() > depth) {
      ks.undo.push_back({U::Pop, 0, {}, std::move(ks.scopes.back())});
      ks.scopes.pop_back();
    }
    for (auto& keys : pushed) {
      ks.scopes.emplace_back(keys.begin(), keys.end());
      ks.undo.push_back({U::Push, 0, {}, {}});
    }
    ks.cur = std::move(cur);
  }
};

}  // namespace

std::shared_ptr<const Vocabulary> Vocabulary::create(std::vector<std::string> token_bytes,
                                                     std::vector<int32_t> eog_ids) {
  return std::make_shared<VocabularyImpl>(std::move(token_bytes), std::move(eog_ids));
}

// ---------------------------------------------------------------------------------------------
// Matcher

struct Matcher::Impl {
  struct Snapshot {
    std::vector<uint32_t> state;
    size_t text_len;
    bool terminated;
    size_t keys_undo_len;  // KeySets::undo entries before this step
    KeyCursor key;
  };

  std::shared_ptr<const Grammar> g;
  std::shared_ptr<const VocabularyImpl> v;
  Recognizer rec;
  std::vector<uint32_t> state;
  std::vector<Snapshot> history;
  std::string text;
  bool terminated = false;
  // scratch
  std::vector<uint32_t> tmp_a, tmp_b;
  mutable std::vector<std::vector<uint32_t>> levels;  // [trie depth] recognizer state
  std::vector<uint8_t> same_as_root;                   // [trie depth] levels[d] == levels[0]
  std::vector<std::vector<uint32_t>> root_memo;        // [byte] state after byte from the root
  std::array<int8_t, 256> root_memo_ok{};              // [byte] -1 not advanced, 0 refused, 1 root_memo holds it
  std::array<uint8_t, 256> root_memo_tags{};           // [byte] the KeyTag bits of that advance
  // compute_mask's classification of key tokens (classify_walked): the tags of the byte at each
  // trie depth, whether a byte up to that depth opened or closed a key, and the tokens classified.
  std::vector<uint8_t> walk_tags, walk_key_path;
  std::vector<uint32_t> walked_done;                   // bit per token
  // Unique keys (only for grammars with key tags): the keys written per open object, the
  // overlay of the token being accepted, and which tokens can close a key.
  KeySets keys;
  std::optional<KeyOverlay> pending_keys;
  std::shared_ptr<const VocabularyImpl::KeyTokenSet> key_lists;  // tokens holding a key-opening or -closing byte
  std::vector<uint32_t> sim_a, sim_b, sim_c;
  std::vector<std::vector<uint32_t>> first_state;  // [byte] key_tokens' shared first advances
  std::string key_scratch;

  // The canonical shortest completion of the current state and, per suffix, the fewest tokens
  // spelling it: min_tok[k] for comp[k..] (kNoTok if unspellable). `off` bytes of comp have been
  // accepted since it was computed: the completion is suffix-closed, so accepting a prefix of it
  // only moves `off`, and min_completion_tokens() drops by exactly one per closing-mode token.
  struct Plan {
    bool valid = false;  // computed for the current state
    bool built = false;  // comp is a whole completion
    bool ok = false;     // a completion exists and the vocabulary spells it
    std::string comp;
    std::vector<int32_t> min_tok;
    size_t off = 0;
  };
  static constexpr int32_t kNoTok = INT32_MAX / 2;
  static constexpr uint64_t kMaxPlanBytes = uint64_t(1) << 22;
  Plan plan;

  Impl(std::shared_ptr<const Grammar> gg, std::shared_ptr<const VocabularyImpl> vv)
      : g(std::move(gg)), v(std::move(vv)), rec(*g) {
    rec.initial(state);
    // Build (or fetch) the vocabulary's tables for this grammar's self-loop classes now, so the
    // one-time cost lands in the constructor rather than in a fill_mask call.
    for (int32_t c : g->loop_class_ids) tables_for(c);
    if (g->has_key_tags) {
      ByteSet both;
      for (size_t w = 0; w < 4; ++w) both[w] = g->key_open_bytes[w] | g->key_close_bytes[w];
      key_lists = v->key_close_tokens(both);
    }
  }

  bool complete() const {
    if (terminated) return true;
    for (size_t i = 0; i < state.size(); i += 1 + state[i])
      if (state[i] == 0) return true;
    return false;
  }
  bool only_complete() const {
    for (size_t i = 0; i < state.size(); i += 1 + state[i])
      if (state[i] != 0) return false;
    return true;
  }

  // On success with key tags, pending_keys holds the bytes' effect on the key sets (committed by
  // push_history's caller through commit_keys). A byte closing a repeated key is refused, and so
  // are bytes that end inside a key whose every completion repeats one.
  bool advance_bytes(std::string_view bytes, std::vector<uint32_t>& out) {
    tmp_a = state;
    if (g->has_key_tags) pending_keys.emplace(keys);
    for (unsigned char c : bytes) {
      if (!rec.advance(tmp_a, c, tmp_b)) return false;
      tmp_a.swap(tmp_b);
      if (pending_keys && !pending_keys->step(rec.tags(), c)) return false;
    }
    // As the mask: no stopping inside a key that can only repeat one (e.g. "fo" + "o" under
    // maxLength 3 once "foo" is written).
    if (pending_keys && key_dead(tmp_a, *pending_keys)) return false;
    out.swap(tmp_a);
    return true;
  }
  void commit_keys() {
    if (pending_keys) pending_keys->commit(keys);
    pending_keys.reset();
  }

  void push_history() { history.push_back({state, text.size(), terminated, keys.undo.size(), keys.cur}); }

  // Whether the key being written (o.cur) can no longer close on a new key: every way the grammar
  // lets it go on closes on a key its object has. Only a prefix of a written key can be dead (any
  // other prefix completes to a new key: every grammar state can be completed), so the search
  // explores prefixes of written keys only; past a budget of advances it answers "alive".
  bool key_dead(const std::vector<uint32_t>& st, const KeyOverlay& o) {
    if (!o.cur.in_key || (o.cur.json && o.cur.buf.find('\\') != std::string::npos)) return false;
    if (!o.prefix_of_written(o.cur.buf)) return false;
    {
      // Usually settled without advancing: a byte the grammar takes next that no written key has
      // there leads to a new key (every state can be completed).
      ByteSet next;
      next_bytes(st, next);
      const ByteSet w = o.written_next(o.cur.buf);
      for (size_t i = 0; i < 4; ++i)
        if (next[i] & ~w[i] & ~g->key_close_bytes[i]) {
          if (!(o.cur.skip_ws && o.cur.buf.empty())) return false;
          // After Python's ", ": a space is not part of the key; look at the rest.
          ByteSet other = next;
          for (uint8_t b : {' ', '\n', '\t', '\r'}) other[b >> 6] &= ~(uint64_t(1) << (b & 63));
          for (size_t j = 0; j < 4; ++j)
            if (other[j] & ~w[j] & ~g->key_close_bytes[j]) return false;
          break;
        }
    }
    struct Node {
      std::vector<uint32_t> st;
      KeyCursor key;
    };
    std::vector<Node> todo{{st, o.cur}};
    std::vector<uint32_t> nst;
    int budget = 4096;
    while (!todo.empty()) {
      Node n = std::move(todo.back());
      todo.pop_back();
      ByteSet next;
      next_bytes(n.st, next);
      for (int b = 0; b < 256; ++b) {
        if (!byteset_has(next, uint8_t(b))) continue;
        if (--budget < 0) return false;
        if (!rec.advance(n.st, uint8_t(b), nst)) continue;
        const uint8_t t = rec.tags();
        if (t & kTagKeyClose) {
          if (!o.has(n.key.name())) return false;
          continue;
        }
        if (t != 0) return false;  // the key ends some other way (cannot happen)
        Node child{nst, n.key};
        child.key.append(uint8_t(b));
        if (child.key.buf.find('\\') != std::string::npos || !o.prefix_of_written(child.key.buf)) return false;
        todo.push_back(std::move(child));
      }
    }
    return true;
  }

  // Whether token `t`, allowed by the grammar from the current state, keeps every object's keys
  // unique and does not end inside a key that can only repeat one. A token whose only key-closing
  // byte ends the key being written (and opens no other) is answered by one lookup; anything
  // else by advancing the recognizer and the key sets over its bytes.
  bool token_keeps_keys_unique(const std::string& t) {
    if (keys.cur.in_key) {
      size_t i = 0;
      while (i < t.size() && !byteset_has(g->key_close_bytes, uint8_t(t[i]))) ++i;
      bool simple = i < t.size() && !(keys.cur.json && (keys.cur.buf.find('\\') != std::string::npos ||
                                                        t.find('\\') < i));
      for (size_t j = i + 1; j < t.size() && simple; ++j)
        if (byteset_has(g->key_close_bytes, uint8_t(t[j])) || byteset_has(g->key_open_bytes, uint8_t(t[j])))
          simple = false;
      if (simple) {
        if (keys.scopes.empty()) return true;
        key_scratch = keys.cur.buf;
        for (size_t j = 0; j < i; ++j)
          if (!(keys.cur.skip_ws && key_scratch.empty() && is_json_space(uint8_t(t[j])))) key_scratch.push_back(t[j]);
        return keys.scopes.back().count(key_scratch) == 0;
      }
    }
    KeyOverlay o(keys);
    sim_a = state;
    for (unsigned char c : t) {
      if (!rec.advance(sim_a, c, sim_b)) return true;  // not allowed anyway (cannot happen)
      sim_a.swap(sim_b);
      if (!o.step(rec.tags(), c)) return false;
    }
    return !key_dead(sim_a, o);
  }

  // The tokens allowed by `mask` (the grammar's mask of the current state) that close a key or
  // open one and end inside it. A function of the recognizer state, cached with the mask
  // (Grammar::key_token_cache). Only tokens holding a key-opening or -closing byte are tried (a
  // few thousand with a 152k vocabulary): the advance by a token's first byte is shared, and a
  // token whose first byte opens a key and whose other bytes can neither open nor close one ends
  // inside that key without further advances (`"abc` at a key position).
  // compute_mask's part of key_tokens: a token accepted at trie node depth `len`, whose bytes'
  // tags walk_tags[1..len] the walk has just computed (the same advances key_tokens would make).
  void classify_walked(int32_t id, size_t len, KeyTokenLists& out) {
    walked_done[size_t(id) / 32] |= 1u << (id % 32);
    if (!walk_key_path[len]) return;  // no byte opened or closed a key
    const int64_t j = key_lists->find(id);
    if (j < 0) return;  // cannot happen: a byte of the token carries a key tag
    const std::string_view t = key_lists->token(size_t(j));
    bool in_key = false, scope_op = false, opened = false;
    uint32_t key_at = 0;
    for (size_t k = 0; k < len; ++k) {
      const uint8_t tags = walk_tags[k + 1];
      if (tags & kTagKeyClose) {
        out.closing.push_back(id);
        bool more = false;
        for (size_t j = k + 1; j < len && !more; ++j) more = walk_tags[j + 1] & (kTagKeyOpen | kTagKeyClose);
        if (more || t.find('\\') != std::string_view::npos || scope_op) {
          out.closing_more.push_back(id);
        } else if (opened) {
          size_t from = key_at;
          while (from < k && is_json_space(uint8_t(t[from]))) ++from;
          out.closing_keyed.push_back({std::string(t.substr(from, k - from)), id});
        }
        return;
      }
      if (tags & (kTagObjClose | kTagObjOpen)) scope_op = true;
      if (tags & kTagObjClose) in_key = false;
      if (tags & kTagKeyOpen) {
        opened = true;
        in_key = true;
        key_at = uint32_t(k + 1);
      }
    }
    if (!in_key) return;
    while (key_at < t.size() && is_json_space(uint8_t(t[key_at]))) ++key_at;
    out.opening.push_back({int32_t(j), key_at});
  }

  // `walked`: the lists compute_mask made while walking the trie (it classifies the tokens it
  // reaches one node at a time from the tags of their bytes, see classify_walked); the tokens it
  // marked in `walked_done` are not walked again here.
  std::shared_ptr<const KeyTokenLists> key_tokens(const uint32_t* mask, std::shared_ptr<KeyTokenLists> walked = {}) {
    auto out = walked ? std::move(walked) : std::make_shared<KeyTokenLists>();
    const bool skip_done = out->from_walk;
    // Advances from the current state, memoized per byte, and whether they come back to it (inside
    // a string, every plain character does): a token's bytes are advanced for real only from its
    // first byte that leaves the state.
    std::array<int8_t, 256> memo_ok;
    memo_ok.fill(-1);
    std::array<uint8_t, 256> memo_tags{}, memo_stays{};
    if (first_state.size() < 256) first_state.resize(256);
    std::array<const std::vector<uint32_t>*, 256> first{};  // -> first_state[b] or compute_mask's root_memo[b]
    for (size_t b = 0; b < 256; ++b) {
      first[b] = &first_state[b];
      if (skip_done && root_memo_ok[b] >= 0) {  // the walk advanced this byte from this state already
        memo_ok[b] = root_memo_ok[b];
        memo_tags[b] = root_memo_tags[b];
        first[b] = &root_memo[b];
        memo_stays[b] = *first[b] == state;
      }
    }
    std::unordered_map<uint32_t, uint32_t> memo_pair;  // (first byte, second byte) -> pair_states index
    std::deque<std::vector<uint32_t>> pair_states;     // deque: pointers into it stay valid
    std::vector<uint8_t> pair_tags;                    // 0xFF: the pair is refused
    const auto& ks = *key_lists;
    std::vector<std::pair<uint32_t, uint32_t>> opening;  // (index in ks, key_at)
    for (size_t j = 0; j < ks.ids.size(); ++j) {
      const int32_t id = ks.ids[j];
      if (!((mask[size_t(id) / 32] >> (id % 32)) & 1)) continue;
      if (skip_done && ((walked_done[size_t(id) / 32] >> (id % 32)) & 1)) continue;
      const std::string_view t = ks.token(j);
      // Only bytes of the key classes carry key tags: past the last one the token can neither open
      // nor close a key, so it is not walked further (most tokens holding a '"' open or close a
      // string value, not a key, and would otherwise be advanced byte by byte to their end).
      const size_t last = ks.last[j];
      bool at_start = true, in_key = false, closes = false, dead = false, scope_op = false, opened = false;
      uint32_t key_at = 0;
      const std::vector<uint32_t>* now = &state;  // the state after the bytes so far (not copied)
      for (size_t k = 0; k < t.size(); ++k) {
        const uint8_t b = uint8_t(t[k]);
        uint8_t tags;
        if (at_start) {
          if (memo_ok[b] < 0) {
            memo_ok[b] = rec.advance(state, b, first_state[b]) ? 1 : 0;
            memo_tags[b] = rec.tags();
            memo_stays[b] = first_state[b] == state;
          }
          if (!memo_ok[b]) {
            dead = true;  // cannot happen: the token is allowed
            break;
          }
          tags = memo_tags[b];
          if (!memo_stays[b]) {
            now = first[b];
            at_start = false;
          }
        } else if (k == 1 && now == first[uint8_t(t[0])]) {
          // The second byte after a first one that left the state: memoized per byte pair too
          // (` "` then a letter, `{"`, `",`: the prefixes most of these tokens share).
          const uint32_t pair = uint32_t(uint8_t(t[0])) << 8 | b;
          auto [it, fresh] = memo_pair.emplace(pair, uint32_t(pair_states.size()));
          if (fresh) {
            pair_states.emplace_back();
            const bool ok = rec.advance(*now, b, pair_states.back());
            pair_tags.push_back(ok ? rec.tags() : uint8_t(0xFF));
          }
          if (pair_tags[it->second] == 0xFF) {
            dead = true;
            break;
          }
          now = &pair_states[it->second];
          tags = pair_tags[it->second];
        } else {
          if (!rec.advance(*now, b, sim_b)) {
            dead = true;
            break;
          }
          sim_a.swap(sim_b);
          now = &sim_a;
          tags = rec.tags();
        }
        if (tags & kTagKeyClose) {
          // Closes a key. Checked one by one unless it does nothing more and holds no escape: then
          // either the key was open before the token (filter_duplicate_keys walks the trie for
          // those), or the token opened it in the innermost object (closing_keyed).
          closes = true;
          out->closing.push_back(id);
          // Whether the rest of the token opens or closes another key (a byte that could is not
          // enough: `": "` opens a string value).
          bool more = false;
          if (k < last) {
            sim_c = *now;
            for (size_t j = k + 1; j < t.size() && !more; ++j) {
              more = !rec.advance(sim_c, uint8_t(t[j]), sim_b) || (rec.tags() & (kTagKeyOpen | kTagKeyClose));
              sim_c.swap(sim_b);
            }
          }
          if (more || t.find('\\') != std::string_view::npos || scope_op) {
            out->closing_more.push_back(id);
          } else if (opened) {
            size_t from = key_at;
            while (from < k && is_json_space(uint8_t(t[from]))) ++from;
            out->closing_keyed.push_back({std::string(t.substr(from, k - from)), id});
          }
          break;
        }
        if (tags & (kTagObjClose | kTagObjOpen)) scope_op = true;
        if (tags & kTagObjClose) in_key = false;
        if (tags & kTagKeyOpen) {
          opened = true;
          in_key = true;
          key_at = uint32_t(k + 1);
        }
        if (k >= last) break;  // inside this key to the token's end, or outside any key
      }
      if (closes || dead || !in_key) continue;
      while (key_at < t.size() && is_json_space(uint8_t(t[key_at]))) ++key_at;  // Python's ", " (harmless elsewhere)
      opening.push_back({uint32_t(j), key_at});
    }
    std::sort(out->closing_keyed.begin(), out->closing_keyed.end());
    // By the key's bytes, so the tokens spelling a given prefix are one binary search away.
    for (const auto& [j, key_at] : out->opening) opening.push_back({uint32_t(j), key_at});  // from the walk
    std::sort(opening.begin(), opening.end(), [&](const auto& a, const auto& b) {
      return ks.token(a.first).substr(a.second) < ks.token(b.first).substr(b.second);
    });
    out->opening.clear();
    for (const auto& [j, key_at] : opening) out->opening.push_back({int32_t(j), key_at});
    return out;
  }

  // Clears the tokens of `mask` that would close a key repeating one written in its object, or
  // leave a key that can only repeat one.
  void filter_duplicate_keys(uint32_t* mask, const KeyTokenLists& lists) {
    auto clear_if_bad = [&](int32_t id) {
      uint32_t& w = mask[size_t(id) / 32];
      const uint32_t bit = 1u << (id % 32);
      if ((w & bit) && !token_keeps_keys_unique(v->tokens_[size_t(id)])) w &= ~bit;
    };
    // Tokens that close a key. From inside a key whose bytes so far have no escape, a token that
    // closes it and nothing more repeats a key exactly when it spells the rest of a written key
    // and then a closing byte: those are found by walking the trie (below); the others, and every
    // closing token from outside a key (which opens the key it closes), are checked one by one.
    // A key written with escapes: its closing tokens are checked one by one, but only when its
    // value so far starts some written key (else no way of closing it can repeat one).
    bool escaped = keys.cur.json && keys.cur.buf.find('\\') != std::string::npos;
    if (escaped && !keys.scopes.empty()) {
      const std::string& b = keys.cur.buf;
      size_t ok = 0;  // the bytes of complete characters and escapes
      for (size_t i = 0; i < b.size();) {
        size_t need = b[i] != '\\' ? 1 : i + 1 < b.size() && b[i + 1] == 'u' ? 6 : 2;
        if (need == 6 && i + 6 <= b.size() && (b[i + 2] | 0x20) == 'd' && std::strchr("89abAB", b[i + 3])) need = 12;
        if (i + need > b.size()) break;
        i += need;
        ok = i;
      }
      const std::string p = decode_json_key(std::string_view(b).substr(0, ok));
      const auto& scope = keys.scopes.back();
      auto it = scope.lower_bound(p);
      escaped = it != scope.end() && it->compare(0, p.size(), p) == 0;
    }
    for (int32_t id : escaped ? lists.closing : lists.closing_more) clear_if_bad(id);
    if (!keys.cur.in_key && !keys.scopes.empty()) {
      // Opened and closed by the token, in the innermost object: a repeat iff a written key.
      for (const std::string& w : keys.scopes.back()) {
        auto lo = std::lower_bound(lists.closing_keyed.begin(), lists.closing_keyed.end(), w,
                                   [](const auto& e, const std::string& x) { return e.first < x; });
        for (; lo != lists.closing_keyed.end() && lo->first == w; ++lo)
          mask[size_t(lo->second) / 32] &= ~(1u << (lo->second % 32));
      }
    }
    // Tokens that open a key and stop inside it: only a prefix of a written key can be dead, so
    // per written key (of any open object: a token may close one before opening the key) the
    // tokens spelling one of its prefixes.
    if (!lists.opening.empty()) {
      const auto& ks = *key_lists;
      auto key_of = [&](const std::pair<int32_t, uint32_t>& e) { return ks.token(size_t(e.first)).substr(e.second); };
      for (const auto& scope : keys.scopes)
        for (const std::string& w : scope)
          for (size_t len = 0; len <= w.size(); ++len) {
            const std::string_view p(w.data(), len);
            auto lo = std::lower_bound(lists.opening.begin(), lists.opening.end(), p,
                                       [&](const auto& e, std::string_view x) { return key_of(e) < x; });
            for (; lo != lists.opening.end() && key_of(*lo) == p; ++lo) clear_if_bad(ks.ids[size_t(lo->first)]);
          }
    }
    // From inside a key: tokens that go on spelling a written key (found by walking the trie
    // along the rest of each written key that starts with the key so far).
    if (keys.cur.in_key && !keys.scopes.empty() &&
        !(keys.cur.json && keys.cur.buf.find('\\') != std::string::npos)) {
      const auto& scope = keys.scopes.back();
      const std::string& buf = keys.cur.buf;
      for (auto it = scope.lower_bound(buf); it != scope.end() && it->compare(0, buf.size(), buf) == 0; ++it) {
        // A JSON key holding '"', '\\' or a control character is spelled with escapes: its
        // tokens have a backslash and are checked one by one (closing_more).
        if (keys.cur.json && std::any_of(it->begin(), it->end(), [](char ch) {
              return ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20;
            }))
          continue;
        for (int lead = 0; lead < 2; ++lead) {
          if (lead && !(keys.cur.skip_ws && buf.empty())) break;
          const std::string rest = (lead ? " " : "") + it->substr(buf.size());
          // Tokens that stop inside the written key: refused where that prefix is dead. The tokens
          // ending at one trie node share the bytes, so the state and the answer.
          int32_t node = -1;
          KeyOverlay o(keys);
          sim_a = state;
          for (size_t d = 0; d < rest.size(); ++d) {
            node = v->child(node, uint8_t(rest[d]));
            if (node < 0) break;
            if (!rec.advance(sim_a, uint8_t(rest[d]), sim_b)) {
              node = -1;
              break;
            }
            sim_a.swap(sim_b);
            o.cur.append(uint8_t(rest[d]));
            const auto& nd = v->nodes_[size_t(node)];
            bool any = false;
            for (uint32_t k = nd.tok_begin; k < nd.tok_end && !any; ++k) {
              const int32_t id = v->node_tokens_[k];
              any = (mask[size_t(id) / 32] >> (id % 32)) & 1;
            }
            if (any && key_dead(sim_a, o))
              for (uint32_t k = nd.tok_begin; k < nd.tok_end; ++k) {
                const int32_t id = v->node_tokens_[k];
                mask[size_t(id) / 32] &= ~(1u << (id % 32));
              }
          }
          if (node < 0 && !rest.empty()) continue;
          // Tokens that spell all of it and then close it: they repeat it.
          for (int c = 0; c < 256; ++c) {
            if (!byteset_has(g->key_close_bytes, uint8_t(c))) continue;
            const int32_t at = v->child(node, uint8_t(c));
            if (at < 0) continue;
            const auto& nd = v->nodes_[size_t(at)];
            for (uint32_t k = nd.tok_begin, e = v->nodes_[nd.end - 1].tok_end; k < e; ++k) {
              const int32_t id = v->node_tokens_[k];
              mask[size_t(id) / 32] &= ~(1u << (id % 32));
            }
          }
        }
      }
    }
  }

  // A key that may not close with the byte the completion prefers (it repeats one): the shortest
  // extension of it, preferred bytes first, that closes on a new key. Breadth-first by length
  // over the key's next bytes from `cur` (a level's closes are tried before its children, and a
  // child's closes as soon as it is made: the same order, found after few advances). On success
  // appends the bytes (the closing one included) to `out` and moves `cur` and `ko` past them.
  bool extend_key(std::vector<uint32_t>& cur, KeyOverlay& ko, std::string& out,
                  const std::array<uint8_t, 256>& by_rank) {
    struct Node {
      std::vector<uint32_t> st;
      KeyCursor key;
      std::string path;
    };
    std::vector<uint32_t> nst;
    auto try_close = [&](const Node& n) {
      ByteSet next;
      next_bytes(n.st, next);
      for (uint8_t b : by_rank) {
        if (!byteset_has(next, b) || !byteset_has(g->key_close_bytes, b)) continue;
        if (!rec.advance(n.st, b, nst)) continue;
        const uint8_t t = rec.tags();
        if (!(t & kTagKeyClose) || ko.has(n.key.name())) continue;
        ko.cur = n.key;
        ko.step(t, b);
        cur = nst;
        out += n.path;
        out.push_back(char(b));
        return true;
      }
      return false;
    };
    std::vector<Node> level{{cur, ko.cur, {}}}, next_level;
    size_t made = 0;
    if (try_close(level[0])) return true;
    while (!level.empty() && level[0].path.size() < 64) {
      next_level.clear();
      for (const Node& n : level) {
        ByteSet next;
        next_bytes(n.st, next);
        for (uint8_t b : by_rank) {
          if (!byteset_has(next, b) || byteset_has(g->key_close_bytes, b)) continue;
          if (!rec.advance(n.st, b, nst) || rec.tags() != 0 || state_cost(nst) >= Grammar::kCostInf) continue;
          Node child{nst, n.key, n.path};
          child.key.append(b);
          child.path.push_back(char(b));
          if (try_close(child)) return true;
          if (++made > 4096) return false;
          next_level.push_back(std::move(child));
        }
      }
      level.swap(next_level);
    }
    return false;
  }

  // ---- shortest completion ----
  uint64_t stack_cost(const uint32_t* s, uint32_t len) const {
    if (len == 0) return 0;
    uint32_t top = s[len - 1];
    uint32_t pos = top & kPosMask, sub = top >> kPosBits;
    uint64_t c = sub == 0 ? g->min_suffix[pos] : strchar_rest()[sub] + g->min_suffix[pos + 1];
    for (uint32_t k = 0; k + 1 < len; ++k) c += g->min_suffix[s[k]];  // return positions
    return std::min(c, Grammar::kCostInf);
  }
  uint64_t state_cost(const std::vector<uint32_t>& st) const {
    uint64_t best = Grammar::kCostInf;
    for (size_t i = 0; i < st.size(); i += 1 + st[i]) best = std::min(best, stack_cost(&st[i + 1], st[i]));
    return best;
  }
  // Where keys are tracked, the shortest completion may have to spell a key longer than the
  // grammar's shortest to keep keys unique (one written already, or several new ones): the plan
  // knows. (It is rebuilt after a token that leaves it: ~2-50 us, see docs/GRAMMAR.md.)
  uint64_t completion_bytes() {
    if (terminated) return 0;
    if (key_lists) {
      const Plan& p = current_plan();
      if (p.built) return p.comp.size() - p.off;
    }
    return state_cost(state);
  }

  // Byte by byte: among the bytes that start a shortest completion (the cheapest bytes of the
  // top terminals of the cheapest stacks), take the preferred one. Each step is one recognizer
  // advance, and the cost drops by exactly one.
  void build_plan() {
    plan = Plan{};
    plan.valid = true;
    if (terminated) {
      plan.ok = true;
      plan.min_tok = {0};
      return;
    }
    std::array<uint8_t, 256> by_rank;  // bytes, preferred first
    for (int b = 0; b < 256; ++b) by_rank[completion_byte_rank()[size_t(b)]] = uint8_t(b);
    const auto& table = strchar_table();
    const auto& rest = strchar_rest();
    std::vector<uint32_t> cur = state, nxt;
    uint64_t c = state_cost(cur);
    if (c > kMaxPlanBytes) return;  // e.g. minLength 10^5 nested in minItems 10^5: no plan
    plan.comp.reserve(size_t(c));
    std::optional<KeyOverlay> ko;
    // Where the key being written opened: a repeated key is replaced from there (its bytes before
    // the plan are fixed, the plan's own may change).
    std::vector<uint32_t> key_state;
    size_t key_len = 0;
    KeyCursor key_cur;
    if (g->has_key_tags) {
      ko.emplace(keys);
      if (keys.cur.in_key) key_state = cur, key_cur = keys.cur;
    }
    while (c > 0) {
      ByteSet opt{};
      for (size_t i = 0; i < cur.size(); i += 1 + cur[i]) {
        uint32_t len = cur[i];
        if (len == 0 || stack_cost(&cur[i + 1], len) != c) continue;
        uint32_t top = cur[i + len];
        uint32_t pos = top & kPosMask, sub = top >> kPosBits;
        const Elem& e = g->elems[pos];
        if (e.kind == ElemKind::Class) {
          for (int w = 0; w < 4; ++w) opt[size_t(w)] |= g->classes[e.arg][size_t(w)];
          continue;
        }
        if (e.kind == ElemKind::StrCharRaw && sub == 0) {
          // One-byte characters: the ASCII half of its class (never empty, see the compiler).
          for (int w = 0; w < 2; ++w) opt[size_t(w)] |= g->classes[e.arg][size_t(w)];
          continue;
        }
        for (int b = 0; b < 256; ++b) {
          uint8_t nx = table[sub][size_t(b)];
          if (nx == kStrReject) continue;
          if ((nx == kStrDone ? 0 : rest[nx]) + 1 == rest[sub]) byteset_add(opt, uint8_t(b));
        }
      }
      int best = -1;
      for (uint8_t b : by_rank)
        if (byteset_has(opt, b)) {
          best = b;
          break;
        }
      if (best < 0 || !rec.advance(cur, uint8_t(best), nxt)) return;  // cannot happen: costs are exact
      if (ko) {
        const uint8_t t = rec.tags();
        if (ko->repeats(t)) {
          // The shortest key repeats one of its object: write the shortest new one instead.
          plan.comp.resize(key_len);
          cur = key_state;
          ko->cur = key_cur;
          if (!extend_key(cur, *ko, plan.comp, by_rank)) return;
          c = state_cost(cur);
          if (plan.comp.size() + c > kMaxPlanBytes) return;
          continue;
        }
        ko->step(t, uint8_t(best));
        if (t & kTagKeyOpen) {
          key_state = nxt;
          key_len = plan.comp.size() + 1;
          key_cur = ko->cur;
        }
      }
      plan.comp.push_back(char(best));
      cur.swap(nxt);
      --c;
    }
    plan.built = true;
    // Fewest tokens per suffix: walk the trie from each position, every token ending on the way
    // is a candidate first token.
    const size_t n = plan.comp.size();
    plan.min_tok.assign(n + 1, kNoTok);
    plan.min_tok[n] = 0;
    for (size_t k = n; k-- > 0;) {
      int32_t best = kNoTok;
      int32_t node = v->child(-1, uint8_t(plan.comp[k]));
      for (size_t d = 1; node >= 0; ++d) {
        const auto& nd = v->nodes_[size_t(node)];
        if (nd.tok_end > nd.tok_begin && plan.min_tok[k + d] < kNoTok)
          best = std::min(best, 1 + plan.min_tok[k + d]);
        if (k + d >= n) break;
        node = v->child(node, uint8_t(plan.comp[k + d]));
      }
      plan.min_tok[k] = best;
    }
    plan.ok = plan.min_tok[0] < kNoTok;
  }
  const Plan& current_plan() {
    if (!plan.valid) build_plan();
    return plan;
  }
  // After `bytes` were accepted: keep the plan when they were a prefix of the completion.
  void shift_plan(std::string_view bytes) {
    if (!plan.valid) return;
    if (plan.ok && plan.comp.size() - plan.off >= bytes.size() &&
        plan.comp.compare(plan.off, bytes.size(), bytes) == 0)
      plan.off += bytes.size();
    else
      plan.valid = false;
  }

  void closing_mask(uint32_t* mask, int tokens_left) {
    const Plan& p = current_plan();
    std::memset(mask, 0, v->words_ * sizeof(uint32_t));
    const size_t n = p.comp.size();
    if (p.off == n) {
      set_eog_bits(mask);
      return;
    }
    const int32_t limit = std::max<int32_t>(tokens_left, p.min_tok[p.off]);
    int32_t node = v->child(-1, uint8_t(p.comp[p.off]));
    for (size_t d = 1; node >= 0; ++d) {
      const auto& nd = v->nodes_[size_t(node)];
      if (nd.tok_end > nd.tok_begin && p.min_tok[p.off + d] < kNoTok && 1 + p.min_tok[p.off + d] <= limit)
        for (uint32_t k = nd.tok_begin; k < nd.tok_end; ++k) {
          int32_t id = v->node_tokens_[k];
          mask[id / 32] |= 1u << (id % 32);
        }
      if (p.off + d >= n) break;
      node = v->child(node, uint8_t(p.comp[p.off + d]));
    }
  }

  // The union of the next bytes the stacks of `st` accept; false when a stack is empty (the
  // instance is complete there: end-of-generation is one more option).
  bool next_bytes(const std::vector<uint32_t>& st, ByteSet& out) const {
    const auto& table = strchar_table();
    out = ByteSet{};
    for (size_t i = 0; i < st.size(); i += 1 + st[i]) {
      const uint32_t len = st[i];
      if (len == 0) return false;
      const uint32_t top = st[i + len];
      const uint32_t pos = top & kPosMask, sub = top >> kPosBits;
      const Elem& e = g->elems[pos];
      if (e.kind == ElemKind::Class) {
        for (size_t w = 0; w < 4; ++w) out[w] |= g->classes[e.arg][w];
        continue;
      }
      // StrChar automaton; a raw character's ASCII bytes come from its class instead (as
      // Recognizer::advance reads them).
      const bool raw_ascii = e.kind == ElemKind::StrCharRaw && sub == 0;
      for (int b = 0; b < 256; ++b) {
        const bool ok = raw_ascii && b < 0x80 ? byteset_has(g->classes[e.arg], uint8_t(b))
                                              : table[sub][size_t(b)] != kStrReject;
        if (ok) byteset_add(out, uint8_t(b));
      }
    }
    return true;
  }

  std::string forced_continuation(size_t max_bytes) {
    std::string out;
    if (terminated) return out;
    std::vector<uint32_t> cur = state, nxt;
    ByteSet next;
    std::optional<KeyOverlay> ko;
    if (key_lists) ko.emplace(keys);
    while (out.size() < max_bytes && next_bytes(cur, next)) {
      int only = -1;
      for (size_t w = 0; w < 4; ++w) {
        if (next[w] == 0) continue;
        // Two bits anywhere (in one word, or a second non-empty word) end the run.
        if (only >= 0 || (next[w] & (next[w] - 1)) != 0) return out;
        only = int(w) * 64 + std::countr_zero(next[w]);
      }
      if (only < 0 || !rec.advance(cur, uint8_t(only), nxt)) return out;  // no stack (cannot happen: pruned)
      if (ko && !ko->step(rec.tags(), uint8_t(only))) return out;  // it would repeat a key
      out.push_back(char(only));
      cur.swap(nxt);
    }
    return out;
  }

  void set_eog_bits(uint32_t* mask) const {
    for (int32_t id : v->eog_)
      if (id >= 0 && size_t(id) < v->size()) mask[id / 32] |= 1u << (id % 32);
  }

  bool subtree_loop_accepts(const std::vector<uint32_t>& st, size_t node) const {
    for (size_t i = 0; i < st.size(); i += 1 + st[i]) {
      uint32_t len = st[i];
      if (len == 0) continue;
      uint32_t top = st[i + len];
      uint32_t sub = top >> kPosBits;
      if (g->elems[top & kPosMask].kind == ElemKind::StrCharLoop) {
        if ((v->below_ok_[node] >> sub) & 1) return true;
        continue;
      }
      if (g->elems[top & kPosMask].kind == ElemKind::StrCharRaw) {
        // Raw characters below, their ASCII bytes in the chain's class, and few enough of them.
        const uint32_t run = g->strchar_run[top & kPosMask];
        if (!((v->raw_below_ok_[node] >> sub) & 1)) continue;
        if (run < v->max_safe_chars_ && !(v->nodes_[node].all_safe && v->node_max_chars_[node] <= run)) continue;
        const auto* t = tables_for(int32_t(g->elems[top & kPosMask].arg));
        if (t && t->below_in[node]) return true;
        continue;
      }
      if (sub != 0) continue;
      const uint32_t pos = top & kPosMask;
      int32_t c = g->self_loop_class[pos];
      if (c >= 0) {
        const auto* t = tables_for(c);
        if (t && t->below_in[node]) return true;
        continue;
      }
      // A finite class chain: the bytes below must be in its class and no more than its run.
      const uint32_t run = g->class_run[pos];
      if (run < Grammar::kMinClassRun || v->node_max_len_[node] - v->nodes_[node].depth > run) continue;
      const auto* t = tables_for(int32_t(g->elems[pos].arg));
      if (t && t->below_in[node]) return true;
    }
    return false;
  }

  // Per-matcher memo of the vocabulary's loop tables (avoids its mutex in the trie walk).
  const VocabularyImpl::LoopTables* tables_for(int32_t c) const {
    if (loop_memo.size() < g->classes.size()) loop_memo.resize(g->classes.size());
    auto& slot = loop_memo[size_t(c)];
    if (!slot.first) {
      slot.first = true;
      slot.second = v->loop_tables(g->classes[size_t(c)]);
    }
    return slot.second.get();
  }
  mutable std::vector<std::pair<bool, std::shared_ptr<const VocabularyImpl::LoopTables>>> loop_memo;

  // `keyed` (grammars with key tags): also classifies, into it, the tokens whose bytes the walk
  // advances one by one (classify_walked); key_tokens then finishes the lists.
  void compute_mask(uint32_t* mask, KeyTokenLists* keyed = nullptr) {
    size_t words = v->words_;
    std::memset(mask, 0, words * sizeof(uint32_t));
    if (keyed) {
      keyed->from_walk = true;
      walked_done.assign(words, 0);
      if (walk_tags.size() < v->max_depth_ + 1) walk_tags.resize(v->max_depth_ + 1);
      if (walk_key_path.size() < v->max_depth_ + 1) walk_key_path.resize(v->max_depth_ + 1);
      walk_key_path[0] = 0;
    }
    bool skip_safe = false;
    uint32_t chain = 0;  // longest counted string chain at a stack top (characters)
    std::vector<int32_t> loop_classes;
    std::vector<std::pair<const VocabularyImpl::LoopTables*, uint32_t>> class_runs;  // (class tables, run)
    std::vector<std::pair<const VocabularyImpl::LoopTables*, uint32_t>> raw_runs;    // StrCharRaw (tables, run)
    for (size_t i = 0; i < state.size(); i += 1 + state[i]) {
      uint32_t len = state[i];
      if (len == 0) continue;
      uint32_t top = state[i + len];
      if ((top >> kPosBits) != 0) continue;
      uint32_t pos = top & kPosMask;
      if (g->elems[pos].kind == ElemKind::StrCharLoop) skip_safe = true;
      if (g->elems[pos].kind == ElemKind::StrChar) {
        // A chain longer than any safe token is as good as the loop.
        if (g->strchar_run[pos] >= v->max_safe_chars_) skip_safe = true;
        else chain = std::max(chain, g->strchar_run[pos]);
      }
      if (g->elems[pos].kind == ElemKind::StrCharRaw) {
        const auto* t = tables_for(int32_t(g->elems[pos].arg));
        if (t) raw_runs.push_back({t, g->strchar_run[pos]});
      }
      int32_t c = g->self_loop_class[pos];
      if (c < 0 && g->class_run[pos] >= v->max_depth_) c = int32_t(g->elems[pos].arg);  // as good as a loop
      if (c >= 0 && std::find(loop_classes.begin(), loop_classes.end(), c) == loop_classes.end())
        loop_classes.push_back(c);
      if (c < 0 && g->class_run[pos] >= Grammar::kMinClassRun) {
        const auto* t = tables_for(int32_t(g->elems[pos].arg));
        if (t) class_runs.push_back({t, g->class_run[pos]});
      }
    }
    if (skip_safe) std::memcpy(mask, v->safe_mask_.data(), words * sizeof(uint32_t));
    std::vector<std::shared_ptr<const VocabularyImpl::LoopTables>> loops;
    for (int32_t c : loop_classes) {
      auto t = v->loop_tables(g->classes[c]);
      if (!t) continue;
      for (size_t w = 0; w < words; ++w) mask[w] |= t->token_mask[w];
      loops.push_back(std::move(t));
    }
    if (levels.size() < v->max_depth_ + 1) levels.resize(v->max_depth_ + 1);
    levels[0] = state;
    // Inside loops (strings, free text) the state after a byte is often the root state again, and
    // the same bytes are then advanced from it over and over: memoize advances from the root.
    if (same_as_root.size() < levels.size()) same_as_root.resize(levels.size());
    same_as_root[0] = 1;
    std::array<int8_t, 256>& memo_ok = root_memo_ok;
    memo_ok.fill(-1);
    if (root_memo.size() < 256) root_memo.resize(256);
    const auto& nodes = v->nodes_;
    size_t i = 0, n = nodes.size();
    while (i < n) {
      const auto& nd = nodes[i];
      bool skip = skip_safe && nd.all_safe;
      for (size_t k = 0; k < loops.size() && !skip; ++k) skip = loops[k]->subtree_in[i];
      if (skip) {
        i = nd.end;
        continue;
      }
      bool run_ok = false;
      for (const auto& [t, k] : class_runs)
        if (t->subtree_in[i] && v->node_max_len_[i] <= k) {
          run_ok = true;
          break;
        }
      for (size_t r = 0; r < raw_runs.size() && !run_ok; ++r)
        run_ok = v->all_raw_safe_[i] && raw_runs[r].first->subtree_in[i] &&
                 (raw_runs[r].second >= v->max_safe_chars_ || v->node_max_chars_[i] <= raw_runs[r].second);
      if (run_ok || (chain > 0 && nd.all_safe && v->node_max_chars_[i] <= chain)) {
        // Every token below is short enough for a chain at a stack top and made of what the chain
        // accepts (string-safe characters, or bytes of its class): all accepted.
        for (uint32_t k = nd.tok_begin, e = nodes[nd.end - 1].tok_end; k < e; ++k) {
          int32_t id = v->node_tokens_[k];
          mask[id / 32] |= 1u << (id % 32);
        }
        i = nd.end;
        continue;
      }
      bool alive;
      std::vector<uint32_t>& out = levels[nd.depth];
      uint8_t tags;
      if (same_as_root[nd.depth - 1]) {
        int8_t& m = memo_ok[nd.byte];
        if (m < 0) {
          m = rec.advance(levels[0], nd.byte, root_memo[nd.byte]) ? 1 : 0;
          root_memo_tags[nd.byte] = rec.tags();
        }
        alive = m == 1;
        if (alive) out = root_memo[nd.byte];
        tags = root_memo_tags[nd.byte];
      } else {
        alive = rec.advance(levels[nd.depth - 1], nd.byte, out);
        tags = rec.tags();
      }
      if (!alive) {
        i = nd.end;
        continue;
      }
      if (keyed) {
        walk_tags[nd.depth] = tags;
        walk_key_path[nd.depth] = uint8_t(walk_key_path[nd.depth - 1] | (tags & (kTagKeyOpen | kTagKeyClose)));
      }
      same_as_root[nd.depth] = out.size() == levels[0].size() &&
                               std::equal(out.begin(), out.end(), levels[0].begin());
      // Below this node, a self-loop on class C in the new state accepts every token whose
      // remaining bytes are all in C (free text after a partial trigger, for example).
      if (nd.end > i + 1 && subtree_loop_accepts(levels[nd.depth], i)) {
        for (uint32_t k = nd.tok_begin, e = v->nodes_[nd.end - 1].tok_end; k < e; ++k) {
          int32_t id = v->node_tokens_[k];
          mask[id / 32] |= 1u << (id % 32);
        }
        i = nd.end;
        continue;
      }
      for (uint32_t k = nd.tok_begin; k < nd.tok_end; ++k) {
        int32_t id = v->node_tokens_[k];
        mask[id / 32] |= 1u << (id % 32);
        if (keyed) classify_walked(id, nd.depth, *keyed);
      }
      ++i;
    }
    if (complete()) set_eog_bits(mask);
  }
};

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab) {
  if (!grammar) throw std::invalid_argument("Matcher: null grammar");
  auto v = std::dynamic_pointer_cast<const VocabularyImpl>(vocab);
  if (!v) throw std::invalid_argument("Matcher: vocabulary must come from Vocabulary::create");
  impl_ = std::make_unique<Impl>(std::move(grammar), std::move(v));
}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

bool Matcher::accept_token(int32_t id) {
  Impl& m = *impl_;
  if (m.terminated || id < 0 || size_t(id) >= m.v->size()) return false;
  if (m.v->is_eog_[id]) {
    if (!m.complete()) return false;
    m.push_history();
    m.terminated = true;
    m.shift_plan({});
    if (m.plan.valid && m.plan.off != m.plan.comp.size()) m.plan.valid = false;
    return true;
  }
  const std::string& bytes = m.v->tokens_[id];
  if (bytes.empty()) return false;
  std::vector<uint32_t> next;
  if (!m.advance_bytes(bytes, next)) return false;
  m.push_history();
  m.commit_keys();
  m.state.swap(next);
  m.text += bytes;
  m.shift_plan(bytes);
  return true;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  Impl& m = *impl_;
  if (m.terminated) return false;
  std::vector<uint32_t> next;
  if (!m.advance_bytes(bytes, next)) return false;
  m.push_history();
  m.commit_keys();
  m.state.swap(next);
  m.text.append(bytes);
  m.shift_plan(bytes);
  return true;
}

void Matcher::rollback(int n_tokens) {
  Impl& m = *impl_;
  if (n_tokens > 0 && !m.history.empty()) m.plan.valid = false;
  while (n_tokens-- > 0 && !m.history.empty()) {
    auto& s = m.history.back();
    m.state.swap(s.state);
    m.text.resize(s.text_len);
    m.terminated = s.terminated;
    m.keys.undo_to(s.keys_undo_len);
    m.keys.cur = std::move(s.key);
    m.history.pop_back();
  }
}

bool Matcher::is_complete() const { return impl_->complete(); }

bool Matcher::is_terminated() const { return impl_->terminated || impl_->only_complete(); }

void Matcher::fill_mask(uint32_t* mask) const {
  Impl& m = *impl_;
  size_t words = m.v->words_;
  if (m.terminated || m.only_complete()) {
    std::memset(mask, 0, words * sizeof(uint32_t));
    m.set_eog_bits(mask);
    return;
  }
  std::string key;
  key.resize(sizeof(uint64_t) + m.state.size() * sizeof(uint32_t));
  std::memcpy(key.data(), &m.v->fingerprint_, sizeof(uint64_t));
  std::memcpy(key.data() + sizeof(uint64_t), m.state.data(), m.state.size() * sizeof(uint32_t));
  // Unique keys: the cache holds the grammar's mask (a function of the recognizer state alone);
  // the keys written so far are this matcher's own, applied to the few tokens that close a key.
  const bool keys_on = m.key_lists && m.keys.active();
  std::shared_ptr<const KeyTokenLists> closing;
  bool hit = false;
  {
    std::lock_guard<std::mutex> lock(m.g->cache_mu);
    auto it = m.g->mask_cache.find(key);
    if (it != m.g->mask_cache.end()) {
      std::memcpy(mask, it->second->data(), words * sizeof(uint32_t));
      hit = true;
      if (keys_on)
        if (auto kt = m.g->key_token_cache.find(key); kt != m.g->key_token_cache.end()) closing = kt->second;
    }
  }
  if (!hit) {
    // With key tags, the key-token lists are made with the mask (most of them from the trie walk
    // itself), also before a key is written: a state first visited without keys is usually
    // visited again with some, and listing them then, in a walk of their own, cost a first visit
    // up to twice the mask (issue 29).
    std::shared_ptr<KeyTokenLists> walked;
    if (m.key_lists) walked = std::make_shared<KeyTokenLists>();
    m.compute_mask(mask, walked.get());
    if (walked) closing = m.key_tokens(mask, std::move(walked));
    auto stored = std::make_shared<const std::vector<uint32_t>>(mask, mask + words);
    std::lock_guard<std::mutex> lock(m.g->cache_mu);
    if (m.g->mask_cache.size() >= Grammar::kMaskCacheMax) {
      m.g->mask_cache.clear();
      m.g->key_token_cache.clear();
    }
    m.g->mask_cache.emplace(key, std::move(stored));
    if (closing) m.g->key_token_cache.emplace(key, closing);
  }
  if (!keys_on) return;
  if (!closing) {
    closing = m.key_tokens(mask);
    std::lock_guard<std::mutex> lock(m.g->cache_mu);
    if (m.g->key_token_cache.size() >= Grammar::kMaskCacheMax) m.g->key_token_cache.clear();
    m.g->key_token_cache.emplace(std::move(key), closing);
  }
  m.filter_duplicate_keys(mask, *closing);
}

const std::string& Matcher::text() const { return impl_->text; }

std::string detail::MatcherTestAccess::state_key(const Matcher& m) {
  const auto& st = m.impl_->state;
  std::string key(st.size() * sizeof(uint32_t) + 1, '\0');
  if (!st.empty()) std::memcpy(key.data(), st.data(), st.size() * sizeof(uint32_t));
  key.back() = m.impl_->terminated ? 'T' : 'L';
  return key;
}

size_t Matcher::min_completion_bytes() const { return size_t(impl_->completion_bytes()); }

std::string Matcher::shortest_completion() const {
  const auto& p = impl_->current_plan();
  return p.comp.substr(p.off);
}

int Matcher::min_completion_tokens() const {
  const auto& p = impl_->current_plan();
  if (!p.ok) return -1;
  return p.min_tok[p.off];
}

std::string Matcher::forced_continuation(size_t max_bytes) const {
  return impl_->forced_continuation(max_bytes);
}

void Matcher::fill_mask_closing(uint32_t* mask, int tokens_left) const {
  Impl& m = *impl_;
  if (m.terminated || !m.current_plan().ok) {
    fill_mask(mask);
    return;
  }
  m.closing_mask(mask, tokens_left);
}

}  // namespace picolm::grammar
