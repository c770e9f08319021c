#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define FUSELM_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace fuselm::kernels {
namespace {

#ifdef FUSELM_X86
struct X86Features {
  bool avx2 = false, fma = false, f16c = false, os_ymm = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, os_zmm = false;
  bool avx512bf16 = false, amx_bf16 = false, amx_tile = false, os_tiles = false;
};

X86Features read_x86_features() {
  X86Features f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  if (osxsave && avx) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    f.os_ymm = (lo & 0x6) == 0x6;            // SSE and AVX state
    f.os_zmm = f.os_ymm && (lo & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM state
    f.os_tiles = (lo & 0x60000) == 0x60000;        // XTILECFG, XTILEDATA state
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = b & (1u << 5);
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.amx_bf16 = d & (1u << 22);
    f.amx_tile = d & (1u << 24);
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = a & (1u << 5);
  return f;
}
// Linux hands out tile data state only to processes that ask for it (arch_prctl
// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); asked once per process.
bool os_permits_tiles() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  static const bool ok = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return ok;
#else
  return false;
#endif
}
#endif

bool supports(Isa isa) {
  switch (isa) {
    case Isa::generic:
      return true;
#ifdef FUSELM_X86
    case Isa::avx2: {
      static const X86Features f = read_x86_features();
      return f.os_ymm && f.avx2 && f.fma && f.f16c;
    }
    case Isa::avx512: {
      static const X86Features f = read_x86_features();
      return f.os_zmm && f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl &&
             f.avx512dq;
    }
    case Isa::avx512bf16: {
      static const X86Features f = read_x86_features();
      return supports(Isa::avx512) && f.avx512bf16;
    }
    case Isa::amx: {
      static const X86Features f = read_x86_features();
      return supports(Isa::avx512bf16) && f.amx_bf16 && f.amx_tile && f.os_tiles && os_permits_tiles();
    }
#endif
    default:
      return false;
  }
}

Isa decide_isa() {
  const Isa best = detect_cpu_isa();
  const char* env = std::getenv("FUSELM_CPU_ISA");
  if (!env || !*env) return best;
  const std::optional<Isa> asked = parse_isa(env);
  if (!asked)
    throw std::invalid_argument(
        fmt::format("FUSELM_CPU_ISA='{}': expected generic, avx2, avx512, avx512bf16 or amx", env));
  if (!supports(*asked)) {
    fmt::print(stderr, "fuselm: FUSELM_CPU_ISA={} is not supported by this CPU; using {}\n", env,
               isa_name(best));
    return best;
  }
  return *asked;
}

constexpr int kUndecided = -1;
std::atomic<int> g_isa{kUndecided};

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512bf16: return "avx512bf16";
    case Isa::amx: return "amx";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : kAllIsas)
    if (name == isa_name(isa)) return isa;
  return std::nullopt;
}

bool cpu_supports(Isa isa) { return supports(isa); }

Isa detect_cpu_isa() {
  if (supports(Isa::amx)) return Isa::amx;
  if (supports(Isa::avx512bf16)) return Isa::avx512bf16;
  if (supports(Isa::avx512)) return Isa::avx512;
  if (supports(Isa::avx2)) return Isa::avx2;
  return Isa::generic;
}

Isa cpu_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v == kUndecided) {
    static const Isa decided = decide_isa();  // thread-safe, once
    int expected = kUndecided;
    g_isa.compare_exchange_strong(expected, static_cast<int>(decided));
    v = g_isa.load(std::memory_order_relaxed);
  }
  return static_cast<Isa>(v);
}

ScopedCpuIsa::ScopedCpuIsa(Isa isa) : previous_(cpu_isa()) {
  if (!supports(isa))
    throw std::invalid_argument(
        fmt::format("ScopedCpuIsa: this CPU does not support the {} path", isa_name(isa)));
  g_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
}

ScopedCpuIsa::~ScopedCpuIsa() { g_isa.store(static_cast<int>(previous_), std::memory_order_relaxed); }

}  // namespace fuselm::kernels
