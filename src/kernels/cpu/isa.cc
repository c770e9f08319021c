#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// The register state the OS must save for a feature's registers (XCR0), or tile permission.
enum class OsState : unsigned char { ymm, zmm, tiles };
enum class Reg : unsigned char { eax, ebx, ecx, edx };

// Where CPUID reports a feature of FUSELM_ISA_LEVELS' targets: leaf (1 or 7), subleaf, register,
// bit. Every name a level's target uses must be here (checked below at compile time).
struct CpuidBit {
  std::string_view name;
  unsigned leaf, subleaf;
  Reg reg;
  unsigned bit;
  OsState os;
};

constexpr CpuidBit kCpuidBits[] = {
    {"avx2", 7, 0, Reg::ebx, 5, OsState::ymm},        {"fma", 1, 0, Reg::ecx, 12, OsState::ymm},
    {"f16c", 1, 0, Reg::ecx, 29, OsState::ymm},       {"avx512f", 7, 0, Reg::ebx, 16, OsState::zmm},
    {"avx512dq", 7, 0, Reg::ebx, 17, OsState::zmm},   {"avx512bw", 7, 0, Reg::ebx, 30, OsState::zmm},
    {"avx512vl", 7, 0, Reg::ebx, 31, OsState::zmm},   {"avx512vnni", 7, 0, Reg::ecx, 11, OsState::zmm},
    {"avx512bf16", 7, 1, Reg::eax, 5, OsState::zmm},  {"amx-tile", 7, 0, Reg::edx, 24, OsState::tiles},
    {"amx-bf16", 7, 0, Reg::edx, 22, OsState::tiles}, {"amx-int8", 7, 0, Reg::edx, 25, OsState::tiles},
};

constexpr const CpuidBit* find_bit(std::string_view name) {
  for (const CpuidBit& b : kCpuidBits)
    if (b.name == name) return &b;
  return nullptr;
}

// Calls f(feature) for each feature of a target string; stops (returns false) when f does.
template <class F>
constexpr bool each_feature(std::string_view t, F f) {
  while (!t.empty()) {
    const size_t comma = t.find(',');
    if (!f(t.substr(0, comma))) return false;
    t = comma == std::string_view::npos ? std::string_view{} : t.substr(comma + 1);
  }
  return true;
}

// The levels are ordered by inclusion (dispatch runs a family's highest listed level at or below
// the current one, so a level must have everything the ones below it have), and CPUID can answer
// for every feature they name.
constexpr bool levels_are_nested() {
  for (size_t i = 0; i < kIsaCount; ++i) {
    if (!each_feature(isa_target(kAllIsas[i]), [](std::string_view f) { return find_bit(f) != nullptr; }))
      return false;
    if (i > 0 && !each_feature(isa_target(kAllIsas[i - 1]),
                               [&](std::string_view f) { return isa_has(kAllIsas[i], f); }))
      return false;
  }
  return true;
}
static_assert(levels_are_nested(), "FUSELM_ISA_LEVELS: each level must include the one before it, "
                                   "and every feature needs a row in kCpuidBits");

// The one CPUID read of the process: the leaves the table uses, XCR0 and the vendor string.
struct CpuidRead {
  unsigned leaf1[4] = {}, leaf7[4] = {}, leaf7_1[4] = {};
  uint64_t xcr0 = 0;
  char vendor[13] = {};
};

CpuidRead read_cpuid() {
  CpuidRead r;
#ifdef FUSELM_X86
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    std::memcpy(r.vendor, &b, 4);
    std::memcpy(r.vendor + 4, &d, 4);
    std::memcpy(r.vendor + 8, &c, 4);
  }
  if (!__get_cpuid(1, &r.leaf1[0], &r.leaf1[1], &r.leaf1[2], &r.leaf1[3])) return r;
  const bool osxsave = r.leaf1[2] & (1u << 27), avx = r.leaf1[2] & (1u << 28);
  if (osxsave && avx) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    r.xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  __get_cpuid_count(7, 0, &r.leaf7[0], &r.leaf7[1], &r.leaf7[2], &r.leaf7[3]);
  __get_cpuid_count(7, 1, &r.leaf7_1[0], &r.leaf7_1[1], &r.leaf7_1[2], &r.leaf7_1[3]);
#endif
  return r;
}

const CpuidRead& cpuid() {
  static const CpuidRead r = read_cpuid();  // thread-safe, once
  return r;
}

// Linux hands out tile data state only to processes that ask for it (arch_prctl
// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); asked once per process, when a tile feature is.
bool os_permits_tiles() {
#if defined(FUSELM_X86) && defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  static const bool ok = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return ok;
#else
  return false;
#endif
}

bool os_saves(OsState s) {
  const uint64_t x = cpuid().xcr0;
  const bool ymm = (x & 0x6) == 0x6;  // SSE and AVX state
  switch (s) {
    case OsState::ymm: return ymm;
    case OsState::zmm: return ymm && (x & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM state
    case OsState::tiles: return (x & 0x60000) == 0x60000 && os_permits_tiles();  // XTILECFG, XTILEDATA
  }
  return false;
}

bool has(const CpuidBit& f) {
  const CpuidRead& r = cpuid();
  const unsigned* regs = f.leaf == 1 ? r.leaf1 : f.subleaf == 0 ? r.leaf7 : r.leaf7_1;
  return (regs[static_cast<int>(f.reg)] >> f.bit & 1u) && os_saves(f.os);
}

bool supports(Isa isa) {
  return each_feature(isa_target(isa), [](std::string_view f) { return has(*find_bit(f)); });
}

std::string isa_names() {
  std::string s;
  for (Isa isa : kAllIsas) s += fmt::format("{}{}", s.empty() ? "" : ", ", isa_name(isa));
  return s;
}

Isa decide_isa() {
  const Isa best = detect_cpu_isa();
  const char* env = std::getenv("FUSELM_CPU_ISA");
  if (!env || !*env) return best;
  const std::optional<Isa> asked = parse_isa(env);
  if (!asked)
    throw std::invalid_argument(fmt::format("FUSELM_CPU_ISA='{}': expected one of {}", env, isa_names()));
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
#define FUSELM_ISA_NAME(name, target) \
  if (isa == Isa::name) return #name;
  FUSELM_ISA_LEVELS(FUSELM_ISA_NAME)
#undef FUSELM_ISA_NAME
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : kAllIsas)
    if (name == isa_name(isa)) return isa;
  return std::nullopt;
}

bool cpu_supports(Isa isa) { return supports(isa); }

bool cpu_has(std::string_view feature) {
  const CpuidBit* b = find_bit(feature);
  if (!b) throw std::invalid_argument(fmt::format("cpu_has: no CPU feature '{}' in the ISA table", feature));
  return has(*b);
}

std::string_view cpu_vendor() { return cpuid().vendor; }

Isa detect_cpu_isa() {
  for (size_t i = kIsaCount; i-- > 1;)
    if (supports(kAllIsas[i])) return kAllIsas[i];
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
