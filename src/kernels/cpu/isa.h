#pragma once
// CPU instruction-set dispatch for the kernels.
//
// Every kernel family has a generic (portable scalar C++) path and, on x86-64, AVX2 and AVX-512
// paths compiled into the same binary with per-function target attributes (see isa_begin_*.inc).
// The path is chosen once per process by cpu_isa(): the best one the CPU and OS support, or the one
// named by the environment variable FUSELM_CPU_ISA=generic|avx2|avx512 (an unsupported request
// falls back to the best supported one, with a warning on stderr; an unknown name throws).
// Tests and benchmarks force a path with ScopedCpuIsa so that one host can check all of them.
//
//   generic  scalar C++, any CPU
//   avx2     AVX2 + FMA + F16C                      (Haswell, Zen 1 and later)
//   avx512   AVX-512 F/BW/VL/DQ + AVX2 + FMA + F16C (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4)
#include <optional>
#include <string_view>

namespace fuselm::kernels {

enum class Isa : unsigned char { generic, avx2, avx512 };

inline constexpr Isa kAllIsas[] = {Isa::generic, Isa::avx2, Isa::avx512};

const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);

/// Whether this CPU (and OS: saved register state) can run `isa`'s code path.
bool cpu_supports(Isa isa);

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
