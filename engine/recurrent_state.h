// Internal: the per-sequence state of the recurrent layers of a hybrid model (a member of
// Session::Impl) and the scratch their blocks compute in (a member of EvalWorkspace). See
// engine/recurrent.h for the blocks.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "model.h"

namespace picolm {

struct RecurrentState {
  // Every recurrent layer's state at position n_past, one buffer (a snapshot is a copy of it):
  //   DeltaNet layer l at off[l]: conv history [dn_conv - 1][channels] (the conv inputs of the last
  //     positions, oldest first), then the delta-rule state [v_heads][head_dim (key)][head_dim (value)]
  //   ShortConv layer l at off[l]: conv history [sc_taps - 1][n_embd] (B * x of the last positions)
  // Zero at position 0 (llama.cpp's initial state).
  std::vector<float> data;
  std::vector<size_t> off;  // [n_layer], floats; attention layers have none
  std::vector<StateSnapshot> snapshots;  // kept by Session::keep_state_snapshot, ascending n_past

  bool empty() const { return data.empty(); }
  void clear() { std::fill(data.begin(), data.end(), 0.0f); }
  size_t bytes() const;  // state + snapshots (Session::memory_bytes)
};

// Scratch of the recurrent blocks for one micro-batch (a member of the shared EvalWorkspace, since
// the projections run over the rows of every sequence at once), grown to the largest micro-batch:
struct RecurrentScratch {
  std::vector<float> proj;      // [T][channels]: the conv's inputs (delta net qkv; short conv B * x)
  // Per segment s (in Forward::segs order): its history then its rows, taps - 1 + n rows starting at
  // row (row0 + s * (taps - 1)): each segment is convolved with its own sequence's history.
  std::vector<float> conv_in;
  std::vector<float> conv_out;  // [T][channels]
  std::vector<float> gate;      // [T][...]: delta net z; gated attention's gate; short conv's B|C|x
  std::vector<float> qg;        // [T][2 * n_head * head_dim]: gated attention's q+gate rows
  std::vector<float> beta, decay;  // [T][v_heads]
  std::vector<float> o;         // [T][v_heads * head_dim]: delta-rule output; short conv's C * conv

  size_t bytes() const;
};

// Sizes the state for the model's recurrent layers (nothing for a model without any), zeroed.
void init_recurrent_state(RecurrentState& r, const HParams& hp);

}  // namespace picolm
