// Kernel benchmark: matmul throughput per table, type and thread count, on weight sets larger than
// the last-level cache (so decode-like runs measure memory bandwidth). Not a test; no assertions.
// Usage: bench_kernels [types=Q4_K,Q6_K,...] [threads=1,2] [tokens=1] [mb=128] [reps=5] [tables=avx2,avx512]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/thread_pool.h"

using namespace picolm;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t q = s.find(',', p);
    out.push_back(s.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return out;
}

GgmlType type_by_name(const std::string& n) {
  for (uint32_t id = 0; id < 32; ++id) {
    const GgmlTypeTraits* t = ggml_type_traits(id);
    if (t != nullptr && n == t->name) return static_cast<GgmlType>(id);
  }
  std::fprintf(stderr, "unknown type %s\n", n.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string types = "Q4_K,Q6_K,Q8_0,Q5_0,Q4_0,F16", threads = "1,2", mode_s = "q", tables_s;
  int64_t n_tokens = 1, mb = 128;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string k = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (k == "types") types = v;
    else if (k == "threads") threads = v;
    else if (k == "tokens") n_tokens = std::atoll(v.c_str());
    else if (k == "mb") mb = std::atoll(v.c_str());
    else if (k == "reps") reps = std::atoi(v.c_str());
    else if (k == "mode") mode_s = v;
    else if (k == "tables") tables_s = "," + v + ",";
  }
  const ActivationMode mode = mode_s == "exact" ? ActivationMode::Exact : ActivationMode::Quantized;
  const KernelTable* tables[8];
  const int n_tables = available_kernels(tables, 8);
  const int64_t rows = 5632, cols = 2048;  // TinyLlama ffn_up shape
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> rowf(static_cast<size_t>(cols));
  std::vector<float> X(static_cast<size_t>(cols * n_tokens)), Y(static_cast<size_t>(rows * n_tokens));
  for (auto& x : X) x = nd(rng) * 50;
  for (const std::string& tn : split(types)) {
    const GgmlType t = type_by_name(tn);
    const size_t mat_bytes = row_bytes(t, cols) * rows;
    const int n_mats = std::max<int>(1, static_cast<int>((mb << 20) / static_cast<int64_t>(mat_bytes)));
    std::vector<uint8_t> W(mat_bytes * n_mats);
    // Quantize one matrix's worth of distinct rows, copy for the others (content does not matter).
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& x : rowf) x = nd(rng);
      quantize_row_weights_ref(t, rowf.data(), W.data() + r * row_bytes(t, cols), cols);
    }
    for (int m = 1; m < n_mats; ++m) std::memcpy(W.data() + m * mat_bytes, W.data(), mat_bytes);
    for (const std::string& ts : split(threads)) {
      ThreadPool pool(std::atoi(ts.c_str()));
      for (int ki = 0; ki < n_tables; ++ki) {
        const KernelTable& k = *tables[ki];
        if (!tables_s.empty() && tables_s.find("," + std::string(k.name) + ",") == std::string::npos) continue;
        // The table's kernels on the GGUF rows, then (where it has them) on packed weights.
        const size_t pbytes = mode == ActivationMode::Quantized ? packed_bytes(k, t, rows, cols) : 0;
        std::vector<uint8_t> P;
        uint8_t* packed = nullptr;
        if (pbytes > 0) {
          P.resize(pbytes * n_mats + 64);
          packed = P.data() + (64 - reinterpret_cast<uintptr_t>(P.data()) % 64) % 64;
          pack_weights(k, &pool, t, W.data(), rows, cols, packed);
          for (int m = 1; m < n_mats; ++m) std::memcpy(packed + m * pbytes, packed, pbytes);
        }
        for (int variant = 0; variant < (pbytes > 0 ? 2 : 1); ++variant) {
        const std::string label = std::string(k.name) + (variant ? "+packed" : "");
        // Wall time, and the owner thread's CPU time (robust on a loaded machine for 1 thread).
        std::vector<double> secs, cpu;
        for (int rep = 0; rep < reps; ++rep) {
          timespec c0, c1;
          clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
          const auto t0 = std::chrono::steady_clock::now();
          for (int m = 0; m < n_mats; ++m)
            matmul(k, pool, mode, t, W.data() + m * mat_bytes, rows, cols, X.data(), n_tokens, Y.data(),
                   variant ? packed + m * pbytes : nullptr);
          secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
          cpu.push_back(static_cast<double>(c1.tv_sec - c0.tv_sec) + 1e-9 * static_cast<double>(c1.tv_nsec - c0.tv_nsec));
        }
        std::sort(secs.begin(), secs.end());
        std::sort(cpu.begin(), cpu.end());
        // Fastest owner CPU time: on a shared machine, interference only ever adds time.
        const double med = secs[secs.size() / 2], cmed = cpu[0];
        std::printf("%-5s %-14s threads %s tokens %lld: %8.3f ms/matmul %7.2f GB/s %8.2f GMAC/s | min owner cpu %7.2f GB/s %8.2f GMAC/s\n",
                    tn.c_str(), label.c_str(), ts.c_str(), static_cast<long long>(n_tokens), med / n_mats * 1e3,
                    static_cast<double>(mat_bytes) * n_mats / med / 1e9,
                    static_cast<double>(rows) * cols * n_tokens * n_mats / med / 1e9,
                    static_cast<double>(mat_bytes) * n_mats / cmed / 1e9,
                    static_cast<double>(rows) * cols * n_tokens * n_mats / cmed / 1e9);
        }
      }
    }
  }
  return 0;
}
