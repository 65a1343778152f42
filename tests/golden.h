// Reads ../shared/golden/*.json (format "llama.cpp-golden-1", see its README).
#pragma once
#include <simdjson.h>

#include <cstdint>
#include <string>
#include <vector>

namespace golden {

struct TopProbe {
  std::vector<std::pair<int32_t, float>> top;  // 32 (id, logit), descending
  std::vector<float> probe;                    // logits of probe_ids
};

struct PromptRun {
  // "full" format: n rows of n_vocab; "top_probe": n TopProbe entries
  std::vector<std::vector<float>> prefill_full, sequential_full;
  std::vector<TopProbe> prefill_tp, sequential_tp;
  std::vector<int32_t> greedy_tokens;
  std::vector<float> greedy_margin;
  // Mixture-of-experts models: the prefill's router logits, one entry per MoE layer
  // (router_layers[i]), [position][n_expert] (make_golden's "router_logits"); empty otherwise.
  int32_t n_expert = 0;
  std::vector<int32_t> router_layers;
  std::vector<std::vector<float>> router_logits;
};

struct Prompt {
  std::string text;
  std::vector<int32_t> tokens, tokens_parse_special_false, tokens_add_special_false;
  std::string detokenized;
};

struct File {
  std::string model_file;
  int32_t n_vocab = 0;
  bool full = true;
  std::vector<int32_t> probe_ids;
  std::vector<Prompt> prompts;
  std::vector<std::pair<std::string, std::vector<PromptRun>>> runs;  // "reference"/"quantized"/"file"
  const std::vector<PromptRun>* run(const std::string& name) const {
    for (auto& [n, r] : runs)
      if (n == name) return &r;
    return nullptr;
  }
};

// Throws std::runtime_error on a missing or malformed file (the test then fails loudly).
File load(const std::string& path);

}  // namespace golden
