#pragma once
// CPU instruction-set dispatch for the kernels.
//
// A path (`Isa`) is a level: a set of CPU features, written once below as the compiler target of
// that level (FUSELM_ISA_LEVELS). The levels are ordered, each a superset of the one before it
// (isa.cc checks this at compile time), so "the best path" is simply the highest level whose
// features the CPU and OS all have. Every kernel family has a generic (portable scalar C++) table
// and, on x86-64, one table per level it lists on its `// isa-table:` line, compiled from one
// source with that level's target (CMakeLists.txt writes the files); a level the family does not
// list runs the family's highest listed level below it (isa_dispatch.h).
//
// The path is chosen once per process by cpu_isa(): the best one the CPU and OS support, or the one
// named by the environment variable FUSELM_CPU_ISA (one of isa_name's names; an unsupported
// request falls back to the best supported one, with a warning on stderr; an unknown name throws).
// Forcing a level forces every family's path, the quantized ones included, so tests and benchmarks
// (ScopedCpuIsa) check every path on the one host that has the fastest.
//
//   generic     scalar C++, any CPU
//   avx2        AVX2 + FMA + F16C (Haswell, Zen 1 and later): quant on vpmaddubsw
//   avx512      AVX-512 F/BW/VL/DQ (Skylake-SP and later, Zen 4): every family on 16-lane vectors;
//               quant keeps the avx2 bodies
//   avx512vnni  avx512 + AVX512_VNNI (Cascade Lake, Ice Lake): quant on vpdpbusd
//   avx512bf16  avx512vnni + AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4): as avx512vnni, and
//               linear with bf16 weights rounds the activations to bf16 and multiplies with
//               vdpbf16ps (see linear.h)
//   amx         avx512bf16 + AMX-TILE/BF16/INT8 with the OS's permission for tile data (Sapphire
//               Rapids and later): as avx512bf16, and bf16 linear with more than 8 rows (prefill)
//               and packed quant linear with 16 rows or more run on AMX tiles
#include <cstddef>
#include <iterator>
#include <optional>
#include <string_view>

// The levels, lowest first: X(name, compiler target). The target lists the level's features as
// GCC/Clang target names; it is both the flags the level's kernel files are compiled with and the
// CPUID features the CPU must have (isa.cc's table maps each name to its CPUID bit). CMake reads
// these lines (one level per line, as written), so a new level is one line here.
#define FUSELM_ISA_LEVELS(X)                                                                          \
  X(generic, "")                                                                                      \
  X(avx2, "avx2,fma,f16c")                                                                            \
  X(avx512, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")                                       \
  X(avx512vnni, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")                        \
  X(avx512bf16, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16")             \
  X(amx, "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,amx-tile,amx-bf16,amx-int8")

namespace fuselm::kernels {

#define FUSELM_ISA_ENUM(name, target) name,
enum class Isa : unsigned char { FUSELM_ISA_LEVELS(FUSELM_ISA_ENUM) };
#undef FUSELM_ISA_ENUM

#define FUSELM_ISA_LIST(name, target) Isa::name,
inline constexpr Isa kAllIsas[] = {FUSELM_ISA_LEVELS(FUSELM_ISA_LIST)};
#undef FUSELM_ISA_LIST

inline constexpr size_t kIsaCount = std::size(kAllIsas);

/// The level's compiler target (comma-separated feature names; "" for generic).
constexpr std::string_view isa_target(Isa isa) {
#define FUSELM_ISA_TARGET(name, target) \
  if (isa == Isa::name) return target;
  FUSELM_ISA_LEVELS(FUSELM_ISA_TARGET)
#undef FUSELM_ISA_TARGET
  return "";
}

/// Whether `isa` includes the CPU feature named as in its target ("avx512vnni", "amx-int8").
constexpr bool isa_has(Isa isa, std::string_view feature) {
  std::string_view t = isa_target(isa);
  while (!t.empty()) {
    const size_t comma = t.find(',');
    if (t.substr(0, comma) == feature) return true;
    t = comma == std::string_view::npos ? std::string_view{} : t.substr(comma + 1);
  }
  return false;
}

const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);

/// Whether this CPU (and OS: saved register state, tile permission) has every feature of `isa`.
bool cpu_supports(Isa isa);

/// Whether this CPU (and OS) has the one feature named as in a level's target ("amx-int8").
/// Throws std::invalid_argument for a name no level uses.
bool cpu_has(std::string_view feature);

/// CPUID's vendor string ("GenuineIntel", "AuthenticAMD"; "" off x86), from the same one read.
std::string_view cpu_vendor();

/// The best path this CPU supports, ignoring FUSELM_CPU_ISA.
Isa detect_cpu_isa();

/// The path the kernels use. Decided on first call (detection + FUSELM_CPU_ISA), then fixed unless
/// a ScopedCpuIsa is alive. Cheap: one relaxed atomic load.
Isa cpu_isa();

/// Forces `isa` for the kernels while alive (tests, benchmarks). Throws std::invalid_argument if
/// the CPU does not support it. Not for concurrent use with running kernels.
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(Isa isa);
  ~ScopedCpuIsa();
  ScopedCpuIsa(const ScopedCpuIsa&) = delete;
  ScopedCpuIsa& operator=(const ScopedCpuIsa&) = delete;

 private:
  Isa previous_;
};

}  // namespace fuselm::kernels
