// CPU feature detection and the choice of kernel table.
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace picolm {

namespace {

#if defined(__x86_64__) || defined(_M_X64)
uint64_t read_xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

// Tables are built once (function-local statics, thread-safe initialisation) and immutable after.
struct Tables {
  KernelTable scalar;
  KernelTable avx2, avx512, neon, neon_dotprod, neon_i8mm;
  bool has_avx2 = false, has_avx512 = false, has_neon = false;
  const KernelTable* list[6] = {};
  int count = 0;

  Tables() {
    kq::fill_scalar_table(scalar);
    list[count++] = &scalar;
    const CpuFeatures f = detect_cpu_features();
#if defined(__x86_64__) || defined(_M_X64)
    if (f.avx2 && f.fma && f.f16c) {
      kq::fill_scalar_table(avx2);
      kq::fill_avx2_table(avx2);
      kq::fill_avx2_packed(avx2);
      has_avx2 = true;
      list[count++] = &avx2;
    }
    if (has_avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni) {
      kq::fill_scalar_table(avx512);
      kq::fill_avx2_table(avx512);  // entries the AVX-512 file lacks use AVX2, not scalar
      kq::fill_avx512_table(avx512);
      kq::fill_avx512_gemm(avx512);
      has_avx512 = true;
      list[count++] = &avx512;
    }
#endif
#if defined(__aarch64__)
    if (f.neon) {
      kq::fill_scalar_table(neon);
      kq::fill_neon_table(neon);
      kq::fill_neon_packed(neon);
      has_neon = true;
      list[count++] = &neon;
    }
    if (f.neon && f.dotprod) {
      kq::fill_scalar_table(neon_dotprod);
      kq::fill_neon_dotprod_table(neon_dotprod);
      kq::fill_neon_dotprod_packed(neon_dotprod);
      list[count++] = &neon_dotprod;
    }
    // i8mm (SMMLA): the dotprod table with SMMLA prefill tiles; after it, so best_kernels() picks it.
    if (f.neon && f.dotprod && f.i8mm) {
      kq::fill_scalar_table(neon_i8mm);
      kq::fill_neon_dotprod_table(neon_i8mm);
      kq::fill_neon_i8mm_packed(neon_i8mm);
      neon_i8mm.name = "neon_i8mm";
      list[count++] = &neon_i8mm;
    }
#endif
    (void)f;
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool avx = (c >> 28) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;            // XMM and YMM state saved by the OS
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  if (!os_avx) return f;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = (b >> 5) & 1;
    if (os_avx512) {
      f.avx512f = (b >> 16) & 1;
      f.avx512bw = (b >> 30) & 1;
      f.avx512vl = (b >> 31) & 1;
      f.avx512vnni = (c >> 11) & 1;
      unsigned a1, b1, c1, d1;
      if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512bf16 = (a1 >> 5) & 1;
    }
  }
#elif defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is mandatory on AArch64
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  f.dotprod = (hw >> 20) & 1;  // HWCAP_ASIMDDP
  f.i8mm = (hw2 >> 13) & 1;    // HWCAP2_I8MM
#endif
#endif
  return f;
}

const KernelTable& scalar_kernels() { return tables().scalar; }

const KernelTable& best_kernels() {
  const Tables& t = tables();
  if (const char* env = std::getenv("PICOLM_KERNELS"); env != nullptr && *env != '\0') {
    const std::string_view want(env);
    for (int i = 0; i < t.count; ++i)
      if (want == t.list[i]->name) return *t.list[i];
    // Unknown or unsupported here: fall through to the best table (the name reports which ran).
  }
  return *t.list[t.count - 1];
}

int available_kernels(const KernelTable** out, int max_out) {
  const Tables& t = tables();
  int n = 0;
  for (int i = 0; i < t.count && n < max_out; ++i) out[n++] = t.list[i];
  return n;
}

}  // namespace picolm
