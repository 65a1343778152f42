#include "metrics.h"

#include <cstdio>

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
  gauge(out, "picolm_engine_busy", "1 while a generation runs.", busy_ ? 1 : 0);
  return out;
}

}  // namespace picolm
