// Prometheus counters for the provider (GET /metrics, text exposition format 0.0.4).
// Thread-safety: every method may be called from any thread (atomics, plus a mutex for the
// per-endpoint table).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace picolm {

// Prompt-cache figures read at render time (from PromptCacheStore::stats()).
struct PromptCacheFigures {
  int64_t disk_bytes = 0, ram_bytes = 0, files_written = 0, files_rejected = 0;
  int64_t disk_evictions = 0, ram_evictions = 0;
};

class Metrics {
 public:
  void count_request(std::string_view endpoint, int status);
  void add_prompt_tokens(int64_t evaluated, int64_t cached) { prompt_tokens_ += evaluated; cached_tokens_ += cached; }
  void add_completion_tokens(int64_t n) { completion_tokens_ += n; }
  void add_prefill_ms(double ms) { prefill_us_ += static_cast<int64_t>(ms * 1000.0); }
  void add_decode_ms(double ms) { decode_us_ += static_cast<int64_t>(ms * 1000.0); }
  void count_cancelled() { ++cancelled_; }
  void count_timeout() { ++timeouts_; }
  void count_rejected() { ++rejected_; }
  void count_kv_reuse(bool hit) { ++(hit ? kv_hits_ : kv_misses_); }
  void count_prompt_cache(bool hit) { ++(hit ? cache_hits_ : cache_misses_); }
  // Jump-forward decoding: decode evaluations (one per generating slot per step, a forced run
  // evaluated as one batch item counts once) and the tokens the grammar forced (scheduler.h).
  void count_decode_step() { ++decode_steps_; }
  void add_jump_forward_tokens(int64_t n) { jump_forward_tokens_ += n; }
  void set_queue_depth_source(std::function<size_t()> fn);
  void set_prompt_cache_source(std::function<PromptCacheFigures()> fn);
  // Parallel slots: their number (once, when the engine is created), how many are busy, the
  // sequences of each evaluation step, and tokens generated per slot.
  void set_slots(int n);
  void set_slots_busy(int busy) { slots_busy_ = busy; }
  void observe_batch(int64_t sequences);
  void add_slot_tokens(int slot, int64_t n);
  // Rendered as picolm_instance_info{instance_id="..."} 1, so replicas behind one proxy tell apart.
  void set_instance_id(std::string id);

  int64_t cancelled() const { return cancelled_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  int64_t decode_steps() const { return decode_steps_; }
  int64_t jump_forward_tokens() const { return jump_forward_tokens_; }

  std::string render() const;

 private:
  std::atomic<int64_t> prompt_tokens_{0}, cached_tokens_{0}, completion_tokens_{0};
  std::atomic<int64_t> prefill_us_{0}, decode_us_{0};
  std::atomic<int64_t> cancelled_{0}, timeouts_{0}, rejected_{0};
  std::atomic<int64_t> kv_hits_{0}, kv_misses_{0}, cache_hits_{0}, cache_misses_{0};
  std::atomic<int64_t> decode_steps_{0}, jump_forward_tokens_{0};
  std::atomic<int> slots_busy_{0};
  // Sequences per evaluation step: cumulative histogram buckets (le 1, 2, 4, 8, 16, +Inf), sum.
  static constexpr int kBatchBuckets = 6;
  std::atomic<int64_t> batch_buckets_[kBatchBuckets] = {};
  std::atomic<int64_t> batch_sum_{0}, batch_count_{0};
  // [slot] generated tokens; allocated once by set_slots before the engine's worker starts, read
  // under mu_ (n_slots_ says how many exist).
  std::unique_ptr<std::atomic<int64_t>[]> slot_tokens_;
  int n_slots_ = 0;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (endpoint, status) -> count
  std::string instance_id_;
  std::function<size_t()> queue_depth_;
  std::function<PromptCacheFigures()> prompt_cache_;
};

}  // namespace picolm
