#include "golden.h"

#include <cstring>
#include <stdexcept>

namespace golden {
namespace {

std::vector<uint8_t> b64decode(std::string_view s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    int v = val(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(uint8_t(acc >> bits));
    }
  }
  return out;
}

std::vector<float> floats_b64(std::string_view s) {
  auto b = b64decode(s);
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

std::vector<int32_t> ints(simdjson::dom::array a) {
  std::vector<int32_t> v;
  for (auto x : a) v.push_back(int32_t(int64_t(x)));
  return v;
}

float num(simdjson::dom::element e) {
  double d = 0;
  if (e.is_double()) d = double(e);
  else if (e.is_int64()) d = double(int64_t(e));
  else d = double(uint64_t(e));
  return float(d);
}

TopProbe top_probe(simdjson::dom::element e) {
  TopProbe t;
  for (auto pair : e["top"].get_array()) {
    simdjson::dom::array p = pair.get_array();
    t.top.emplace_back(int32_t(int64_t(p.at(0))), num(p.at(1)));
  }
  for (auto x : e["probe"].get_array()) t.probe.push_back(num(x));
  return t;
}

}  // namespace

File load(const std::string& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.load(path).get(doc)) throw std::runtime_error("cannot read golden file " + path);
  File f;
  f.model_file = std::string(std::string_view(doc["model_file"]));
  f.n_vocab = int32_t(int64_t(doc["n_vocab"]));
  f.full = std::string_view(doc["logits_format"]) == "full";
  if (!f.full) f.probe_ids = ints(doc["probe_ids"].get_array());
  for (auto p : doc["prompts"].get_array()) {
    Prompt pr;
    pr.text = std::string(std::string_view(p["text"]));
    pr.tokens = ints(p["tokens"].get_array());
    pr.tokens_parse_special_false = ints(p["tokens_parse_special_false"].get_array());
    pr.tokens_add_special_false = ints(p["tokens_add_special_false"].get_array());
    pr.detokenized = std::string(std::string_view(p["detokenized"]));
    f.prompts.push_back(std::move(pr));
  }
  for (auto [name, run] : doc["runs"].get_object()) {
    std::vector<PromptRun> rs;
    for (auto p : run["prompts"].get_array()) {
      PromptRun r;
      if (f.full) {
        for (auto s : p["prefill_logits_b64"].get_array()) r.prefill_full.push_back(floats_b64(std::string_view(s)));
        for (auto s : p["sequential_logits_b64"].get_array()) r.sequential_full.push_back(floats_b64(std::string_view(s)));
      } else {
        for (auto e : p["prefill_logits"].get_array()) r.prefill_tp.push_back(top_probe(e));
        for (auto e : p["sequential_logits"].get_array()) r.sequential_tp.push_back(top_probe(e));
      }
      r.greedy_tokens = ints(p["greedy"]["tokens"].get_array());
      for (auto x : p["greedy"]["margin_to_second"].get_array()) r.greedy_margin.push_back(num(x));
      simdjson::dom::element rl;
      if (!p["router_logits"].get(rl)) {  // mixture-of-experts models only
        r.n_expert = int32_t(int64_t(rl["n_expert"]));
        r.router_layers = ints(rl["layers"].get_array());
        for (auto s : rl["logits_b64"].get_array()) r.router_logits.push_back(floats_b64(std::string_view(s)));
        if (r.router_layers.size() != r.router_logits.size()) throw std::runtime_error("malformed router_logits in " + path);
      }
      rs.push_back(std::move(r));
    }
    f.runs.emplace_back(std::string(name), std::move(rs));
  }
  return f;
}

}  // namespace golden
