#pragma once
// Per-microarchitecture kernel choices that the ISA path alone does not decide: CPUs that run the
// same instructions (an Intel Sapphire Rapids and an AMD Zen 4 both take the avx512bf16 path) can
// want different loop orders, because their prefetchers and memory systems differ. Each choice
// here was measured on the CPUs it names; a kernel reads cpu_tuning() at run time and keeps both
// variants compiled, and tests force each with ScopedCpuTuning so that every variant is checked.
//
// The table is picked once per process from cpuid's vendor (GenuineIntel → intel, AuthenticAMD →
// amd, anything else → intel's, the choices earlier sessions measured), or by the environment
// variable FUSELM_CPU_TUNING (parse_tuning): a table's name and/or single settings, so that a
// choice can be measured on a new CPU with the shipped binary, e.g.
// FUSELM_CPU_TUNING=amd,gemv_streams=2 or FUSELM_CPU_TUNING=gemv_prefetch=0.
#include <optional>
#include <string_view>

namespace fuselm::kernels {

enum class CpuVendor : unsigned char { intel, amd };

struct CpuTuning {
  /// The table's name (and cpuid vendor it was measured on).
  CpuVendor vendor = CpuVendor::intel;
  /// Decode GEMV over an [n, k] W at one activation row: read W in memory order, one row at a time
  /// with several accumulators (true), or interleave several rows per step, one vector of each in
  /// turn (false). Zen 4, 2 threads: memory order streams SmolLM2's k = 576 bf16 rows at ~90 % of
  /// the bandwidth, interleaving 8 rows at ~38 % (bench_kernels "decode token" 146 vs 67 tok/s,
  /// session 7). With 2 to 8 activation rows (batched decode) interleaving measured as fast or
  /// faster there too, so those keep it. Sapphire Rapids: interleaving measured faster (more lines
  /// in flight across 4 KiB pages, sessions 5 and 6).
  bool gemv_memory_order = false;
  /// Decode on packed quantized weights, the avx2 path (packed_tile_decode): bytes ahead of the
  /// codes being read that are prefetched into L2 (0: none, the hardware prefetchers alone). Zen 3,
  /// SmolLM2 Q4_0 / Q8_0 linears of one token, 1 thread: 1024 cut the CPU time by 10-15 % against
  /// none (512: half that; 2048 and 4096 no better; session 19). Not measured on Intel: 0 there.
  int packed_decode_prefetch = 0;
  /// The memory-order decode GEMV over bf16 and f16 weights (gemv_memory_order): bytes of W ahead
  /// of its reads prefetched into L2 (0: none). Zen 3, 2 threads, an LFM2-700M-shaped BF16 model:
  /// tg64 15.2 -> 16.0 tok/s with 1024 (3 alternated rounds; 2048 no better in bench_kernels). f32
  /// rows stream at 83-89 % of the bandwidth without it and are left alone (session 20).
  int gemv_prefetch = 0;
  /// The memory-order decode GEMV reads this many W rows at once (1, 2, 4 or 8), each from its own
  /// contiguous part of the thread's rows, one cache line of each in turn: S sequential streams far
  /// apart instead of one, so that more DRAM pages and prefetch streams are busy at once. Zen 3
  /// (avx2), 2 threads, bench_kernels' SmolLM2 decode token, 3 alternated rounds: 1 stream 50 / 95
  /// tok/s (f32 / bf16), 4 streams 67-76 / 124-143, 8 streams 53-73 / 94-136; an LFM2-700M-shaped
  /// BF16 model, tg48: 18.1-21.3 -> 19.3-27.2 tok/s (session 21). Zen 4 (avx512bf16, the
  /// vdpbf16ps GEMV for bf16), bench_kernels --tuning-ab, 100 interleaved tokens: 4 streams
  /// 1.02-1.06x (f32) and 1.06x (bf16) at ~35 GB/s, 1.08x and 1.29x in a ~45 GB/s burst; 8 streams
  /// about the same (session 22).
  int gemv_streams = 1;
};

/// The table for `vendor`.
CpuTuning tuning_for(CpuVendor vendor);
const char* vendor_name(CpuVendor vendor);

/// A FUSELM_CPU_TUNING spec: "[intel|amd][,key=value...]" (items separated by commas; the table's
/// name, if any, first; without it the `detected` vendor's table). Keys are CpuTuning's fields,
/// values whole numbers (gemv_memory_order: 0 or 1; gemv_streams: 1, 2, 4 or 8).
/// Throws std::invalid_argument naming the variable, the spec and the item at fault.
CpuTuning parse_tuning(std::string_view spec, CpuVendor detected);
std::optional<CpuVendor> parse_vendor(std::string_view name);

/// The tuning the kernels use: decided on first call (cpuid + FUSELM_CPU_TUNING), then fixed unless
/// a ScopedCpuTuning is alive. Not for concurrent change with running kernels.
const CpuTuning& cpu_tuning();

/// Forces `tuning` for the kernels while alive (tests, benchmarks).
class ScopedCpuTuning {
 public:
  explicit ScopedCpuTuning(const CpuTuning& tuning);
  ~ScopedCpuTuning();
  ScopedCpuTuning(const ScopedCpuTuning&) = delete;
  ScopedCpuTuning& operator=(const ScopedCpuTuning&) = delete;

 private:
  CpuTuning previous_;
};

}  // namespace fuselm::kernels
