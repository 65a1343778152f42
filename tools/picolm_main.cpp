// picolm: run a GGUF model on a prompt. Generated text goes to stdout; load info, timings and
// errors go to stderr.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "cli_common.h"
#include "kernels/thread_pool.h"
#include "model.h"
#include "prompt_cache.h"
#include "sampler.h"

using namespace picolm;

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: picolm (-m MODEL | --hf OWNER/REPO/FILE.gguf) -p PROMPT [-n N] [options]\n"
               "  -m, --model FILE       GGUF model\n"
               "  --hf OWNER/REPO/FILE   download the model from $HF_ENDPOINT (default https://huggingface.co) into\n"
               "                         $PICOLM_MODELS (default ~/.cache/picolm/models), or reuse it from there;\n"
               "                         resumes an interrupted download; HF_TOKEN for gated repositories\n"
               "  --list-models          print recommended models for --hf and exit\n"
               "  -p, --prompt TEXT      prompt (special tokens such as <|im_start|> are recognised)\n"
               "  -f, --file FILE        read the prompt from a file\n"
               "  -n, --n-predict N      tokens to generate (default 64)\n"
               "  --temp T               temperature, 0 = greedy (default 0.8)\n"
               "  --top-k K --top-p P --min-p M --repeat-penalty R --seed S\n"
               "  -j, --threads N        threads (default: physical cores)\n"
               "  -c, --ctx-size N       context size (default: min(train ctx, 4096))\n"
               "  --exact                F32 activations (reference accuracy, slower)\n"
               "  --mlock                lock the model in RAM (no paging out)\n"
               "  --repack auto|on|off   repack the weights at load for the fast kernels (default auto: on\n"
               "                         where the CPU has them and the model is under half the RAM)\n"
               "  --dump-logits FILE     write {\"pos\",\"token\",\"logits\"} per evaluated position (JSON lines)\n"
               "  --tokenize             print the prompt's token ids and exit\n"
               "  --no-bos               do not add BOS even if the vocabulary asks for it\n"
               "  --prompt-cache DIR     reuse and save the prompt's KV cache in DIR ('default': $XDG_CACHE_HOME/picolm);\n"
               "                         ignored with --dump-logits\n"
               "  --ignore-eos           keep generating after end-of-generation tokens\n"
               "  --version              print version, git commit and the CPU features in use, and exit\n"
               "  -h, --help\n");
}

struct Args {
  std::string model, hf, prompt, dump_logits, prompt_cache;
  int n_predict = 64, threads = 0, ctx = 0;
  Repack repack = Repack::Auto;
  bool tokenize = false, exact = false, mlock = false, no_bos = false, ignore_eos = false, have_prompt = false;
  SamplerParams sp;
};

bool parse_num(const char* s, double& out) {
  char* end = nullptr;
  out = std::strtod(s, &end);
  return end && *end == '\0' && end != s;
}

// 0: run; -1: done (help, version), exit 0; > 0: bad arguments, exit with it.
int parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "picolm: %s needs a value\n", k.c_str());
        return nullptr;
      }
      return argv[++i];
    };
    auto num = [&](double& out) -> bool {
      const char* v = val();
      if (!v) return false;
      if (!parse_num(v, out)) {
        std::fprintf(stderr, "picolm: %s: '%s' is not a number\n", k.c_str(), v);
        return false;
      }
      return true;
    };
    double d = 0;
    if (k == "-h" || k == "--help") { usage(stdout); return -1; }
    else if (k == "--version") { std::fputs(cli::version_text("picolm").c_str(), stdout); return -1; }
    else if (k == "--list-models") { cli::print_recommended_models(stdout); return -1; }
    else if (k == "-m" || k == "--model") { const char* v = val(); if (!v) return 1; a.model = v; }
    else if (k == "--hf") { const char* v = val(); if (!v) return 1; a.hf = v; }
    else if (k == "-p" || k == "--prompt") { const char* v = val(); if (!v) return 1; a.prompt = v; a.have_prompt = true; }
    else if (k == "-f" || k == "--file") {
      const char* v = val(); if (!v) return 1;
      std::ifstream in(v, std::ios::binary);
      if (!in) { std::fprintf(stderr, "picolm: cannot read prompt file '%s'\n", v); return 1; }
      a.prompt.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      a.have_prompt = true;
    }
    else if (k == "-n" || k == "--n-predict") { if (!num(d)) return 1; a.n_predict = int(d); }
    else if (k == "--temp") { if (!num(d)) return 1; a.sp.temperature = float(d); }
    else if (k == "--top-k") { if (!num(d)) return 1; a.sp.top_k = int(d); }
    else if (k == "--top-p") { if (!num(d)) return 1; a.sp.top_p = float(d); }
    else if (k == "--min-p") { if (!num(d)) return 1; a.sp.min_p = float(d); }
    else if (k == "--repeat-penalty") { if (!num(d)) return 1; a.sp.repeat_penalty = float(d); }
    else if (k == "--seed") { if (!num(d)) return 1; a.sp.seed = uint64_t(d); }
    else if (k == "-j" || k == "--threads") { if (!num(d)) return 1; a.threads = int(d); }
    else if (k == "-c" || k == "--ctx-size") { if (!num(d)) return 1; a.ctx = int(d); }
    else if (k == "--dump-logits") { const char* v = val(); if (!v) return 1; a.dump_logits = v; }
    else if (k == "--prompt-cache") { const char* v = val(); if (!v) return 1; a.prompt_cache = v; }
    else if (k == "--tokenize") a.tokenize = true;
    else if (k == "--exact") a.exact = true;
    else if (k == "--mlock") a.mlock = true;
    else if (k == "--repack") {
      const char* v = val();
      if (!v) return 1;
      const auto r = parse_repack(v);
      if (!r) { std::fprintf(stderr, "picolm: --repack takes auto, on or off, not '%s'\n", v); return 1; }
      a.repack = *r;
    }
    else if (k == "--no-bos") a.no_bos = true;
    else if (k == "--ignore-eos") a.ignore_eos = true;
    else { std::fprintf(stderr, "picolm: unknown option '%s' (see --help)\n", k.c_str()); return 1; }
  }
  if (!a.model.empty() && !a.hf.empty()) { std::fprintf(stderr, "picolm: give -m or --hf, not both\n"); return 1; }
  if (a.model.empty() && a.hf.empty()) {
    std::fprintf(stderr, "picolm: no model given (-m MODEL or --hf OWNER/REPO/FILE.gguf; --list-models)\n");
    return 1;
  }
  if (!a.have_prompt) { std::fprintf(stderr, "picolm: no prompt given (-p PROMPT)\n"); return 1; }
  if (a.n_predict < 0 || a.threads < 0 || a.ctx < 0) { std::fprintf(stderr, "picolm: negative count\n"); return 1; }
  return 0;
}

void write_logits(std::FILE* f, size_t pos, int32_t token, std::span<const float> l) {
  std::fprintf(f, "{\"pos\":%zu,\"token\":%d,\"logits\":[", pos, token);
  for (size_t i = 0; i < l.size(); ++i) std::fprintf(f, i ? ",%.9g" : "%.9g", double(l[i]));
  std::fprintf(f, "]}\n");
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// --prompt-cache DIR: a store whose problems (rejected files, I/O errors) are reported on stderr.
std::unique_ptr<PromptCacheStore> open_prompt_cache(const std::string& dir) {
  if (dir.empty()) return nullptr;
  PromptCacheOptions o;
  o.dir = dir == "default" ? PromptCacheStore::default_dir() : dir;
  o.log = [](PromptCacheLogLevel level, std::string_view msg) {
    if (level != PromptCacheLogLevel::Debug) std::fprintf(stderr, "picolm: %.*s\n", int(msg.size()), msg.data());
  };
  return std::make_unique<PromptCacheStore>(std::move(o));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = parse_args(argc, argv, a)) return rc < 0 ? 0 : rc;
  const bool tty = isatty(STDERR_FILENO);
  if (!a.hf.empty()) {
    auto path = cli::fetch_hf_model("picolm", a.hf);
    if (!path) {
      std::fprintf(stderr, "picolm: %s\n", path.error().c_str());
      return 1;
    }
    a.model = *path;
  }

  auto t_load = std::chrono::steady_clock::now();
  // Loading maps the file and, with repacking, rewrites the weights: seconds on a slow board.
  if (tty) std::fprintf(stderr, "loading %s ...\r", a.model.c_str());
  const int threads = a.threads > 0 ? a.threads : ThreadPool::default_threads();
  ThreadPool pool(threads);
  ModelOptions mo;
  mo.activations = a.exact ? ActivationMode::Exact : ActivationMode::Quantized;
  mo.mlock = a.mlock;
  mo.repack = a.repack;
  mo.pool = &pool;
  auto model = Model::load(a.model, mo);
  if (!model) {
    std::fprintf(stderr, "picolm: %s\n", model.error().c_str());
    return 1;
  }
  std::shared_ptr<const Model> m = model.value();
  if (a.mlock && !m->memory_locked()) std::fprintf(stderr, "picolm: warning: mlock failed (see ulimit -l); continuing\n");
  const Tokenizer& tok = m->tokenizer();
  std::vector<int32_t> ids = tok.encode(a.prompt, /*add_special=*/!a.no_bos, /*parse_special=*/true);
  if (a.tokenize) {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
    return 0;
  }
  if (ids.empty()) {
    std::fprintf(stderr, "picolm: the prompt is empty after tokenization\n");
    return 1;
  }
  SessionOptions so;
  so.n_ctx = a.ctx;
  Session session(m, pool, so);
  char packed[96] = "";
  if (m->packed_bytes() > 0)
    std::snprintf(packed, sizeof packed, " (repacked %zu MiB in %.2f s, %.0f MiB/s)", m->packed_bytes() >> 20,
                  m->pack_seconds(), double(m->packed_bytes()) / 1048576.0 / std::max(m->pack_seconds(), 1e-6));
  std::fprintf(stderr, "model: %s | kernels: %s%s | threads: %d | ctx: %d | load %.0f ms\n", m->description().c_str(),
               best_kernels().name, packed, threads, session.n_ctx(), ms_since(t_load));
  if (int64_t(ids.size()) + a.n_predict > session.n_ctx()) {
    std::fprintf(stderr, "picolm: prompt (%zu tokens) + %d tokens to generate exceed the context (%d)\n", ids.size(),
                 a.n_predict, session.n_ctx());
    return 1;
  }

  std::FILE* dump = nullptr;
  if (!a.dump_logits.empty()) {
    dump = std::fopen(a.dump_logits.c_str(), "w");
    if (!dump) {
      std::fprintf(stderr, "picolm: cannot write '%s'\n", a.dump_logits.c_str());
      return 1;
    }
  }

  auto t_pre = std::chrono::steady_clock::now();
  // A bar for long prompts on a terminal (rate, ETA); in a pipe the final timing line is enough.
  cli::ProgressMeter meter(stderr, "prefill", cli::ProgressMeter::Unit::Tokens, tty);
  auto progress = [&](size_t done, size_t total) {
    if (tty && total > 64) meter.update(done, total);
  };
  // A cache hit skips the prefix, whose logits --dump-logits needs: no cache when dumping.
  std::unique_ptr<PromptCacheStore> cache = dump ? nullptr : open_prompt_cache(a.prompt_cache);
  PrefillWithCacheOptions pco;
  pco.all_logits = dump != nullptr;
  pco.defer_store = true;  // saved after generation, so that writing the file does not delay the first token
  pco.progress = progress;
  auto pre = prefill_with_cache(cache.get(), session, ids, /*stable_len=*/ids.size(), pco);
  meter.finish();
  if (!pre) {
    std::fprintf(stderr, "picolm: %s\n", pre.error().c_str());
    return 1;
  }
  const double pre_ms = ms_since(t_pre);
  if (dump)
    for (size_t i = 0; i < ids.size(); ++i) write_logits(dump, i, ids[i], session.logits_at(i));

  Sampler sampler(a.sp);
  for (int32_t id : ids) sampler.accept(id);
  StreamDecoder dec(tok);
  std::vector<float> logits;
  auto t_gen = std::chrono::steady_clock::now();
  int generated = 0;
  for (; generated < a.n_predict; ++generated) {
    auto l = session.logits();
    logits.assign(l.begin(), l.end());
    int32_t next = sampler.sample(logits);
    if (next < 0) break;
    if (!a.ignore_eos && tok.is_eog(next)) break;
    sampler.accept(next);
    std::string piece = dec.push(next);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    if (generated + 1 == a.n_predict) { ++generated; break; }
    int32_t one[1] = {next};
    if (Status st = session.eval(one); !st) {
      std::fprintf(stderr, "\npicolm: %s\n", st.error().c_str());
      return 1;
    }
    if (dump) write_logits(dump, size_t(session.n_past() - 1), next, session.logits());
  }
  std::string rest = dec.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::printf("\n");
  const double gen_ms = ms_since(t_gen);
  if (dump) std::fclose(dump);
  if (cache) cache->store(session, ids.size());  // decoding left positions < ids.size() untouched
  std::fprintf(stderr, "prefill: %zu tokens (%zu from the prompt cache) in %.1f ms (%.1f tok/s) | decode: %d tokens in %.1f ms (%.1f tok/s)\n",
               ids.size(), pre->cached_tokens, pre_ms, pre->evaluated_tokens * 1000.0 / std::max(pre_ms, 1e-3), generated, gen_ms,
               generated * 1000.0 / std::max(gen_ms, 1e-3));
  return 0;
}
