#pragma once
// CPU instruction-set dispatch for the kernels.
//
// Every kernel family has a generic (portable scalar C++) path and, on x86-64, AVX2 and AVX-512
// paths compiled into the same binary with per-function target attributes (see isa_begin_*.inc).
// The path is chosen once per process by cpu_isa(): the best one the CPU and OS support, or the one
// named by the environment variable FUSELM_CPU_ISA=generic|avx2|avx512|avx512bf16|amx (an unsupported request
// falls back to the best supported one, with a warning on stderr; an unknown name throws).
// Tests and benchmarks force a path with ScopedCpuIsa so that one host can check all of them.
//
//   generic  scalar C++, any CPU
//   avx2     AVX2 + FMA + F16C                      (Haswell, Zen 1 and later)
//   avx512   AVX-512 F/BW/VL/DQ + AVX2 + FMA + F16C (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4)
//   avx512bf16  avx512 + AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4): every family runs its
//            avx512 code, except linear with bf16 weights, which rounds the activations to bf16
//            and multiplies with vdpbf16ps (see linear.h)
//   amx      avx512bf16 + AMX-TILE/AMX-BF16 with the OS's permission for tile data (Sapphire
//            Rapids and later): as avx512bf16, and bf16 linear with more than 8 rows (prefill)
//            runs on AMX tiles
// The paths are ordered: each implies the ones before it.
#include <optional>
#include <string_view>

namespace fuselm::kernels {

enum class Isa : unsigned char { generic, avx2, avx512, avx512bf16, amx };

inline constexpr Isa kAllIsas[] = {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx};

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
