// Shortest completions: per-rule and per-position minimum lengths (computed once per grammar),
// the StrChar automaton's distances, and the byte order that picks the canonical completion.
#include <queue>
#include <utility>

#include "grammar/grammar_impl.h"

namespace picolm::grammar::detail {

namespace {

uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t s = a + b;
  return s > Grammar::kCostInf ? Grammar::kCostInf : s;
}

std::array<uint8_t, kStrSubStates> make_strchar_rest() {
  // Bellman-Ford on 22 states: rest[s] = 1 + min over bytes of rest[next], rest[Done] = 0.
  const auto& t = strchar_table();
  std::array<uint8_t, kStrSubStates> rest;
  rest.fill(0xFF);
  bool changed = true;
  while (changed) {
    changed = false;
    for (int s = 0; s < kStrSubStates; ++s)
      for (int b = 0; b < 256; ++b) {
        uint8_t nx = t[s][b];
        if (nx == kStrReject) continue;
        int r = nx == kStrDone ? 1 : (rest[nx] == 0xFF ? 0x100 : rest[nx] + 1);
        if (r < rest[s]) {
          rest[s] = uint8_t(r);
          changed = true;
        }
      }
  }
  return rest;
}

std::array<uint8_t, 256> make_byte_rank() {
  // Lower rank = preferred. The order only decides between bytes that are equally short, i.e.
  // what fills a string that needs more characters, which enum value or digit is written. Letters
  // and digits first: they merge into few tokens in every BPE/SentencePiece vocabulary, so the
  // canonical completion tokenizes short; non-ASCII bytes last.
  std::array<uint8_t, 256> rank{};
  int next = 0;
  auto give = [&](int lo, int hi) {
    for (int b = lo; b <= hi; ++b) rank[size_t(b)] = uint8_t(next++);
  };
  give('a', 'z');
  give('0', '9');
  give('A', 'Z');
  for (int b = 0x21; b < 0x7F; ++b)
    if (!((b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z'))) give(b, b);
  give(' ', ' ');
  give(0x00, 0x1F);
  give(0x7F, 0xFF);
  return rank;
}

}  // namespace

const std::array<uint8_t, kStrSubStates>& strchar_rest() {
  static const auto rest = make_strchar_rest();  // immutable after first use
  return rest;
}

const std::array<uint8_t, 256>& completion_byte_rank() {
  static const auto rank = make_byte_rank();  // immutable after first use
  return rank;
}

void compute_min_lengths(Grammar& g) {
  // Knuth's generalization of Dijkstra to grammars (1977): a rule's length is final when popped
  // from the queue; an alternative's length is known once all its referenced rules are final.
  // Linear-ish (n log n) even for long counted chains, where a naive fixpoint is quadratic.
  const size_t nr = g.rule_alt_begin.size() - 1;
  const size_t na = g.alt_starts.size();
  std::vector<uint32_t> alt_owner(na), pending(na, 0);
  std::vector<uint64_t> acc(na, 0);
  std::vector<std::vector<uint32_t>> uses(nr);  // [rule] alternatives referencing it (per occurrence)
  for (size_t r = 0; r < nr; ++r)
    for (uint32_t a = g.rule_alt_begin[r]; a < g.rule_alt_begin[r + 1]; ++a) {
      alt_owner[a] = uint32_t(r);
      for (uint32_t p = g.alt_starts[a]; g.elems[p].kind != ElemKind::End; ++p) {
        if (g.elems[p].kind == ElemKind::Ref) {
          uses[g.elems[p].arg].push_back(a);
          ++pending[a];
        } else {
          acc[a] = sat_add(acc[a], 1);  // every terminal consumes at least one byte
        }
      }
    }
  g.min_rule_len.assign(nr, Grammar::kCostInf);
  std::vector<uint8_t> done(nr, 0);
  using Item = std::pair<uint64_t, uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> pq;
  auto relax = [&](uint32_t r, uint64_t v) {
    if (v < g.min_rule_len[r]) {
      g.min_rule_len[r] = v;
      pq.push({v, r});
    }
  };
  for (size_t a = 0; a < na; ++a)
    if (pending[a] == 0) relax(alt_owner[a], acc[a]);
  while (!pq.empty()) {
    auto [v, r] = pq.top();
    pq.pop();
    if (done[r] || v != g.min_rule_len[r]) continue;
    done[r] = 1;
    for (uint32_t a : uses[r]) {
      acc[a] = sat_add(acc[a], v);
      if (--pending[a] == 0) relax(alt_owner[a], acc[a]);
    }
  }
  g.min_suffix.assign(g.elems.size(), 0);
  for (size_t p = g.elems.size(); p-- > 0;) {
    const Elem& e = g.elems[p];
    if (e.kind == ElemKind::End) {
      g.min_suffix[p] = 0;
      continue;
    }
    uint64_t c = e.kind == ElemKind::Ref ? g.min_rule_len[e.arg] : 1;
    g.min_suffix[p] = sat_add(c, g.min_suffix[p + 1]);
  }
}

}  // namespace picolm::grammar::detail
