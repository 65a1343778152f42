// See cli_common.h.
#include "cli_common.h"

#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "build_info.h"
#include "hf_download.h"
#include "kernels/kernels.h"

namespace picolm::cli {

namespace {

// Sizes are the hub's file sizes rounded. RAM is the measured peak resident memory of one sequence with
// the default 4096-token context (picolm-bench -c 4096 -p 512 on a picolm-synth file of the same shape and
// llama.cpp's recipe, docs/BENCHMARKS.md), rounded; each further --parallel slot adds its KV cache. The
// mixture-of-experts files run in less RAM than that, slower (their experts are read from the file).
constexpr RecommendedModel kModels[] = {
    {"Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf", "0.6 GB", "1.3 GB", "Qwen3, thinking and tool calls, small boards"},
    {"unsloth/Qwen3-1.7B-GGUF/Qwen3-1.7B-Q4_K_M.gguf", "1.1 GB", "1.9 GB", "Qwen3, better answers, Pi 4/5 with 4 GB+"},
    {"Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf", "0.5 GB", "0.7 GB",
     "fastest useful tool caller, 1 GB boards"},
    {"Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_k_m.gguf", "1.0 GB", "1.3 GB",
     "good tool calls, 2 GB boards"},
    {"bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q4_K_M.gguf", "0.8 GB", "1.2 GB",
     "Llama 3.2 tool format"},
    {"HuggingFaceTB/SmolLM2-360M-Instruct-GGUF/smollm2-360m-instruct-q8_0.gguf", "0.4 GB", "0.6 GB",
     "tiny, 512 MB boards (weak tool calls)"},
    {"unsloth/Qwen3.5-2B-GGUF/Qwen3.5-2B-Q4_K_M.gguf", "1.3 GB", "1.8 GB",
     "Qwen3.5 hybrid, its XML tool calls, 4 GB boards"},
    {"LiquidAI/LFM2.5-1.2B-Instruct-GGUF/LFM2.5-1.2B-Instruct-Q4_K_M.gguf", "0.7 GB", "1.0 GB",
     "LFM2.5 hybrid, edge tool caller, 2 GB boards"},
    {"ggml-org/gemma-3-1b-it-GGUF/gemma-3-1b-it-Q4_K_M.gguf", "0.8 GB", "1.2 GB", "Gemma 3, 2 GB boards"},
    {"unsloth/gemma-4-E2B-it-GGUF/gemma-4-E2B-it-Q4_K_M.gguf", "3.2 GB", "2.6 GB",
     "Gemma 4 native tool calls, 4 GB boards"},
    {"LiquidAI/LFM2-8B-A1B-GGUF/LFM2-8B-A1B-Q4_K_M.gguf", "5.0 GB", "5.2 GB",
     "mixture of experts, decodes like a 1B; 8 GB boards"},
    {"unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF/Qwen3-30B-A3B-Instruct-2507-Q4_K_M.gguf", "18.6 GB", "17 GB",
     "mixture of experts, strong tool caller for 24-32 GB machines; answers in 12 GB, slower"},
};

std::string features_text(const CpuFeatures& f) {
  std::string s;
  const auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512vnni, "avx512vnni");
  add(f.avx512bf16, "avx512bf16");
  add(f.neon, "neon");
  add(f.dotprod, "dotprod");
  add(f.i8mm, "i8mm");
  return s.empty() ? "none (scalar)" : s;
}

std::string format_duration(double sec) {
  if (!(sec >= 0) || sec > 99 * 3600) return "?";
  const long s = long(sec + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

std::span<const RecommendedModel> recommended_models() { return kModels; }

void print_recommended_models(std::FILE* out) {
  std::fprintf(out, "Recommended models (sizes approximate; download with --hf SPEC):\n");
  for (const auto& m : kModels) std::fprintf(out, "  %-72s %7s file, %7s RAM  %s\n", m.spec, m.size, m.ram, m.comment);
}

std::string version_text(const char* program) {
  return std::string(program) + " " + build_info::version() + " (git " + build_info::commit() + ")\nkernels: " +
         best_kernels().name + " (CPU: " + features_text(detect_cpu_features()) + ")\n";
}

ProgressMeter::ProgressMeter(std::FILE* out, std::string label, Unit unit, bool terminal, double line_every_sec)
    : out_(out), label_(std::move(label)), unit_(unit), terminal_(terminal), line_every_(line_every_sec) {}

std::string ProgressMeter::describe(Unit unit, uint64_t done, uint64_t total, double rate) {
  char buf[160];
  std::string s;
  if (unit == Unit::Bytes) {
    const double M = 1024.0 * 1024.0;
    if (total > 0)
      std::snprintf(buf, sizeof buf, "%3d%% %.1f/%.1f MiB, %.1f MiB/s", int(done * 100 / total), double(done) / M,
                    double(total) / M, rate / M);
    else
      std::snprintf(buf, sizeof buf, "%.1f MiB, %.1f MiB/s", double(done) / M, rate / M);
  } else {
    if (total > 0)
      std::snprintf(buf, sizeof buf, "%3d%% %llu/%llu tokens, %.1f tok/s", int(done * 100 / total),
                    static_cast<unsigned long long>(done), static_cast<unsigned long long>(total), rate);
    else
      std::snprintf(buf, sizeof buf, "%llu tokens, %.1f tok/s", static_cast<unsigned long long>(done), rate);
  }
  s = buf;
  if (total > 0 && done < total && rate > 0) s += ", ETA " + format_duration(double(total - done) / rate);
  return s;
}

void ProgressMeter::update(uint64_t done, uint64_t total, uint64_t base) {
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    t0_ = last_ = now;
  }
  const double elapsed = std::chrono::duration<double>(now - t0_).count();
  const double since = std::chrono::duration<double>(now - last_).count();
  // A terminal is redrawn at most 10 times a second; a log gets a line every line_every_ seconds.
  const bool final_update = total > 0 && done >= total;
  if (shown_ && since < (terminal_ ? 0.1 : line_every_) && !final_update) return;
  if (!shown_ && elapsed < (terminal_ ? 0.0 : line_every_) && !final_update) return;
  if (!terminal_ && final_update && !shown_) return;  // quick work: the caller's summary is enough
  const double rate = elapsed > 0 ? double(done - std::min(done, base)) / elapsed : 0;
  const std::string text = describe(unit_, done, total, rate);
  if (terminal_) {
    constexpr int kWidth = 24;
    const int fill = total > 0 ? int(std::min<uint64_t>(done, total) * kWidth / total) : 0;
    std::string bar(size_t(fill), '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r%s [%s] %s\033[K", label_.c_str(), total > 0 ? bar.c_str() : "", text.c_str());
  } else {
    std::fprintf(out_, "%s: %s\n", label_.c_str(), text.c_str());
  }
  std::fflush(out_);
  shown_ = true;
  last_ = now;
}

void ProgressMeter::finish() {
  if (terminal_ && shown_) {
    std::fprintf(out_, "\n");
    std::fflush(out_);
  }
  shown_ = false;
}

Result<std::string> fetch_hf_model(const char* program, const std::string& spec) {
  auto ref = download::parse_model_ref(spec);
  if (!ref) return Error{ref.error()};
  ProgressMeter meter(stderr, std::string(program) + ": " + ref->file, ProgressMeter::Unit::Bytes,
                      isatty(STDERR_FILENO) != 0);
  download::FetchOptions o;
  o.progress = [&](const download::Progress& p) { meter.update(p.done, p.total, p.resumed_from); };
  o.log = [&](std::string_view msg) {
    meter.finish();
    std::fprintf(stderr, "%s: %.*s\n", program, int(msg.size()), msg.data());
  };
  auto path = download::fetch_model(*ref, o);
  meter.finish();
  return path;
}

}  // namespace picolm::cli
