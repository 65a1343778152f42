// What picolm and picolm-provider share on their command lines: --hf (download a model),
// --list-models, --version, and the progress display for long work (downloads, prefill).
// Thread-safety: free functions are reentrant; a ProgressMeter is used by one thread at a time.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "result.h"

namespace picolm::cli {

struct RecommendedModel {
  const char* spec;     // OWNER/REPO/FILE.gguf for --hf
  const char* size;     // download size, approximate
  const char* ram;      // RAM the provider needs with the default context, approximate
  const char* comment;  // what it is good for
};
// The short list the README's "Models" section shows (a test keeps the two in step).
std::span<const RecommendedModel> recommended_models();
void print_recommended_models(std::FILE* out);

// "PROGRAM VERSION (git COMMIT)\nkernels: NAME (CPU: features...)" for --version.
std::string version_text(const char* program);

// Progress of long work on stderr: a bar redrawn in place on a terminal, else a plain line every
// `line_every_sec` seconds (logs and CI output stay readable).
class ProgressMeter {
 public:
  enum class Unit { Bytes, Tokens };
  ProgressMeter(std::FILE* out, std::string label, Unit unit, bool terminal, double line_every_sec = 5.0);
  // done/total (total 0: unknown), `base`: what was there before timing started (resumed bytes,
  // cached tokens); the rate counts only done - base.
  void update(uint64_t done, uint64_t total, uint64_t base = 0);
  void finish();  // ends the bar's line (terminal) ; no-op when nothing was shown

  // "45% 120.3/268.0 MiB, 12.3 MiB/s, ETA 0:12" (no bar); exposed for the provider-style logs and tests.
  static std::string describe(Unit unit, uint64_t done, uint64_t total, double rate_per_sec);

 private:
  std::FILE* out_;
  std::string label_;
  Unit unit_;
  bool terminal_;
  double line_every_;
  std::chrono::steady_clock::time_point t0_, last_;
  bool shown_ = false, started_ = false;
};

// --hf SPEC for a CLI: parses SPEC, downloads (or reuses) the file with a ProgressMeter on
// stderr and notes prefixed by `program`, and returns the local path.
Result<std::string> fetch_hf_model(const char* program, const std::string& spec);

}  // namespace picolm::cli
