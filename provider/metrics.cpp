#include "metrics.h"

#include <cstdio>
#include <vector>

namespace picolm {

void Metrics::count_request(std::string_view endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{std::string(endpoint), status}];
}

void Metrics::set_instance_id(std::string id) {
  std::lock_guard<std::mutex> lock(mu_);
  instance_id_ = std::move(id);
}

void Metrics::set_queue_depth_source(std::function<size_t()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_depth_ = std::move(fn);
}

void Metrics::set_prompt_cache_source(std::function<PromptCacheFigures()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_cache_ = std::move(fn);
}

void Metrics::set_slots(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (n <= n_slots_) return;  // a restarted engine keeps the counters of its slots
  auto fresh = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) fresh[i] = i < n_slots_ ? slot_tokens_[i].load() : 0;
  slot_tokens_ = std::move(fresh);
  n_slots_ = n;
}

void Metrics::add_slot_tokens(int slot, int64_t n) {
  // The worker only calls this for slots set_slots created; the array is never replaced while
  // the engine runs (set_slots runs before its worker starts).
  if (slot >= 0 && slot < n_slots_) slot_tokens_[slot] += n;
}

void Metrics::observe_batch(int64_t sequences) {
  static constexpr int64_t kBounds[kBatchBuckets - 1] = {1, 2, 4, 8, 16};
  for (int b = 0; b < kBatchBuckets; ++b)
    if (b == kBatchBuckets - 1 || sequences <= kBounds[b]) ++batch_buckets_[b];
  batch_sum_ += sequences;
  ++batch_count_;
}

namespace {
void counter(std::string& out, const char* name, const char* help, int64_t v) {
  out += "# HELP "; out += name; out += ' '; out += help; out += '\n';
  out += "# TYPE "; out += name; out += " counter\n";
  out += name; out += ' '; out += std::to_string(v); out += '\n';
}
void seconds_counter(std::string& out, const char* name, const char* help, int64_t us) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(us) / 1e6);
  out += "# HELP "; out += name; out += ' '; out += help; out += '\n';
  out += "# TYPE "; out += name; out += " counter\n";
  out += name; out += ' '; out += buf; out += '\n';
}
void gauge(std::string& out, const char* name, const char* help, int64_t v) {
  out += "# HELP "; out += name; out += ' '; out += help; out += '\n';
  out += "# TYPE "; out += name; out += " gauge\n";
  out += name; out += ' '; out += std::to_string(v); out += '\n';
}
}  // namespace

std::string Metrics::render() const {
  std::string out;
  std::function<size_t()> depth;
  std::function<PromptCacheFigures()> cache;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!instance_id_.empty()) {
      // A label value escapes backslash, double quote and newline (exposition format 0.0.4).
      std::string v;
      for (char c : instance_id_) {
        if (c == '\\' || c == '"') v += '\\';
        if (c == '\n') v += "\\n";
        else v += c;
      }
      out += "# HELP picolm_instance_info The replica's --instance-id.\n";
      out += "# TYPE picolm_instance_info gauge\n";
      out += "picolm_instance_info{instance_id=\"" + v + "\"} 1\n";
    }
    out += "# HELP picolm_requests_total HTTP requests by endpoint and status.\n";
    out += "# TYPE picolm_requests_total counter\n";
    for (const auto& [k, v] : requests_) {
      out += "picolm_requests_total{endpoint=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"} " +
             std::to_string(v) + "\n";
    }
    depth = queue_depth_;
    cache = prompt_cache_;
  }
  counter(out, "picolm_prompt_tokens_total", "Prompt tokens evaluated (prefill).", prompt_tokens_);
  counter(out, "picolm_prompt_tokens_cached_total", "Prompt tokens reused from the KV or prompt cache.", cached_tokens_);
  counter(out, "picolm_completion_tokens_total", "Generated tokens.", completion_tokens_);
  seconds_counter(out, "picolm_prefill_seconds_total", "Wall time spent in prefill.", prefill_us_);
  seconds_counter(out, "picolm_decode_seconds_total", "Wall time spent decoding.", decode_us_);
  counter(out, "picolm_requests_cancelled_total", "Generations stopped because the client went away.", cancelled_);
  counter(out, "picolm_requests_timed_out_total", "Generations stopped by the per-request timeout.", timeouts_);
  counter(out, "picolm_requests_rejected_total", "Requests refused with 429 because the queue was full.", rejected_);
  counter(out, "picolm_kv_prefix_hits_total", "Requests that reused a prefix already in the KV slot.", kv_hits_);
  counter(out, "picolm_kv_prefix_misses_total", "Requests that reused nothing from the KV slot.", kv_misses_);
  counter(out, "picolm_prompt_cache_hits_total", "Prompt-cache restores.", cache_hits_);
  counter(out, "picolm_prompt_cache_misses_total", "Prompt-cache lookups that found nothing.", cache_misses_);
  counter(out, "picolm_decode_steps_total", "Decode evaluations (a forced run evaluated as one batch item counts once).",
          decode_steps_);
  counter(out, "picolm_jump_forward_tokens_total", "Generated tokens the grammar forced (written, not sampled).",
          jump_forward_tokens_);
  if (cache) {
    const PromptCacheFigures f = cache();
    gauge(out, "picolm_prompt_cache_disk_bytes", "Bytes of KV-cache files in the cache directory.", f.disk_bytes);
    gauge(out, "picolm_prompt_cache_ram_bytes", "Bytes of prefix snapshots kept in RAM.", f.ram_bytes);
    counter(out, "picolm_prompt_cache_files_written_total", "KV-cache files written.", f.files_written);
    counter(out, "picolm_prompt_cache_files_rejected_total",
            "KV-cache files ignored and deleted (wrong model/tokenizer, corrupt, truncated).", f.files_rejected);
    counter(out, "picolm_prompt_cache_disk_evictions_total", "KV-cache files evicted to keep the disk budget.",
            f.disk_evictions);
    counter(out, "picolm_prompt_cache_ram_evictions_total", "RAM snapshots evicted to keep the RAM budget.",
            f.ram_evictions);
  }
  gauge(out, "picolm_queue_depth", "Jobs waiting for the engine.", depth ? static_cast<int64_t>(depth()) : 0);
  const int busy = slots_busy_;
  gauge(out, "picolm_engine_busy", "1 while a generation runs.", busy > 0 ? 1 : 0);
  int n_slots = 0;
  std::vector<int64_t> per_slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n_slots = n_slots_;
    for (int i = 0; i < n_slots_; ++i) per_slot.push_back(slot_tokens_[i]);
  }
  gauge(out, "picolm_slots_total", "Parallel slots (sequences that can generate at once).", n_slots);
  gauge(out, "picolm_slots_busy", "Slots holding a request (prefilling or generating).", busy);
  out += "# HELP picolm_batch_sequences Sequences evaluated together per engine step.\n";
  out += "# TYPE picolm_batch_sequences histogram\n";
  static constexpr const char* kLe[] = {"1", "2", "4", "8", "16", "+Inf"};
  for (int b = 0; b < kBatchBuckets; ++b)
    out += std::string("picolm_batch_sequences_bucket{le=\"") + kLe[b] + "\"} " + std::to_string(batch_buckets_[b]) + "\n";
  out += "picolm_batch_sequences_sum " + std::to_string(batch_sum_) + "\n";
  out += "picolm_batch_sequences_count " + std::to_string(batch_count_) + "\n";
  out += "# HELP picolm_slot_completion_tokens_total Tokens generated, per slot.\n";
  out += "# TYPE picolm_slot_completion_tokens_total counter\n";
  for (size_t i = 0; i < per_slot.size(); ++i)
    out += "picolm_slot_completion_tokens_total{slot=\"" + std::to_string(i) + "\"} " + std::to_string(per_slot[i]) + "\n";
  return out;
}

}  // namespace picolm
