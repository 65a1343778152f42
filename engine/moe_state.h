// Internal: the scratch of the routed FFN block (engine/moe.h) for one micro-batch, a member of the
// EvalWorkspace (like RecurrentScratch), and its instrumentation counters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace picolm {

// Bytes of weights the routed FFN blocks read, summed over forward passes until reset by the reader.
// Each expert's matrices count once per micro-batch and layer in which some row chose it (that is
// what the block reads), however many rows chose it.
struct MoeCounters {
  uint64_t expert_bytes = 0;  // gate, up and down of the chosen experts
  uint64_t router_bytes = 0;  // ffn_gate_inp
  uint64_t shared_bytes = 0;  // shared expert and its gate
  uint64_t expert_uses = 0;   // (micro-batch, layer, expert) triples read
};

struct MoeScratch {
  std::vector<float> probs;    // [T][n_expert]: router logits, then the gating's probabilities
  std::vector<float> select;   // [T][n_expert]: the scores experts are chosen by (probs + bias)
  std::vector<int32_t> chosen; // [T][n_expert_used]: expert ids, best first
  std::vector<float> weight;   // [T][n_expert_used]: their weights (normalised, scaled)
  std::vector<int32_t> start;  // [n_expert + 1]: the chosen slots grouped by expert (counting sort)
  std::vector<int32_t> slots;  // [T * n_expert_used]: slot t * n_expert_used + j, grouped by expert
  // One expert's rows at a time, or (a decode step: few slots) every chosen slot's, grouped by expert.
  std::vector<float> xg;       // [rows][n_embd]: gathered inputs
  std::vector<float> hg;       // [rows][max(n_ff_exp, n_ff_shexp)]: SiLU(gate) * up
  std::vector<float> yg;       // [rows][n_embd]: the experts' outputs
  std::vector<float> acc;      // [T][n_embd]: the weighted sum of the chosen experts
  std::vector<float> router_in;  // [T][n_embd]: the router's input when it is not xn (MoeWeights::router_scale)
  std::vector<float> dense;    // [T][n_embd]: gemma4's dense FFN branch, held while the routed branch runs
  // The few-slot path's products: per chosen expert its gate, up and down targets and their
  // matmul_groups entries (gate/up pairs, downs).
  std::vector<MatmulTarget> targets;
  std::vector<MatmulGroup> up_groups, down_groups;
  // Router margin of the last forward pass: [layer][T], the k-th best selection score minus the
  // (k+1)-th, as a difference of router logits for softmax gating without a selection bias (the
  // log of the probability ratio), else of selection scores (+inf on layers without experts, or
  // when every expert is chosen). A small margin is a near-tie: a tiny change of the input can swap
  // an expert.
  std::vector<float> margin;
  std::vector<int32_t> choice; // [layer][T][n_expert_used]: the experts each row chose, best first (same pass)
  int64_t margin_rows = 0;     // T of that pass
  MoeCounters counters;

  size_t bytes() const;
};

}  // namespace picolm
