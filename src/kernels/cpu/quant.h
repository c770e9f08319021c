#pragma once
// Block-quantized weights in ggml's layouts, and linear layers over them with integer dot products.
//
//   type   elems/block  bytes/block  layout (ggml-common.h)                      activations
//   q8_0   32           34           f16 d; i8 q[32]                 x = d·q          Q8 per 32
//   q4_0   32           18           f16 d; u8 q[16] (lo: 0..15, hi: 16..31) x = d·(q-8) Q8 per 32
//   q4_1   32           20           f16 d, m; u8 q[16]              x = d·q + m      Q8 per 32
//   q4_k   256          144          f16 d, dmin; u8 scales[12] (6-bit scale/min per 32);
//                                    u8 q[128]                        x = d·sc·q - dmin·m  Q8 per 256
//   q5_k   256          176          as q4_k plus u8 qh[32] (5th bits) before q   Q8 per 256
//   q6_k   256          210          u8 ql[128], qh[64]; i8 scales[16] (per 16); f16 d
//                                                                     x = d·sc·(q-32)  Q8 per 256
//   q5_0   32           22           f16 d; u8 qh[4] (bit j: 5th bit of element j); u8 q[16] as q4_0
//                                                                     x = d·(q-16)     Q8 per 32
//   q5_1   32           24           f16 d, m; u8 qh[4]; u8 q[16]     x = d·q + m      Q8 per 32
//
// quant_linear quantizes each activation row per block to int8 (Q8: one fp32 scale per 32 or 256
// values and int16 sums per 16, as ggml's Q8_0 / Q8_K, except that the scale is kept in fp32) and
// takes integer dot products with the weight blocks: AVX-512 VNNI (vpdpbusd) when the avx512
// path is selected and the CPU has VNNI, AVX2 (vpmaddubsw) on the avx2 path (and on avx512
// without VNNI), plain C++ on the generic path (isa.h; FUSELM_CPU_ISA forces one).
#include <cstdint>
#include <optional>
#include <string_view>

namespace fuselm::kernels {

enum class QuantType : unsigned char { q8_0, q4_0, q4_1, q4_k, q5_k, q6_k, q5_0, q5_1 };

inline constexpr QuantType kAllQuantTypes[] = {QuantType::q8_0, QuantType::q4_0, QuantType::q4_1,
                                               QuantType::q4_k, QuantType::q5_k, QuantType::q6_k,
                                               QuantType::q5_0, QuantType::q5_1};

struct QuantTypeInfo {
  const char* name;     // "q8_0", ...
  uint32_t ggml_type;   // ggml_type id (GGUF tensor type)
  int64_t block_elems;  // 32 or 256: also the activation block
  int64_t block_bytes;
};

const QuantTypeInfo& quant_info(QuantType t);
/// The quantized type of a ggml type id; nullopt for any other id (plain or unsupported types).
std::optional<QuantType> quant_type_from_ggml(uint32_t ggml_type);
std::optional<QuantType> parse_quant_type(std::string_view name);  // "q8_0", ...

/// Bytes of a row of k elements; throws std::invalid_argument unless k is a multiple of the block.
int64_t quant_row_bytes(QuantType t, int64_t k);

/// dst[0, k) = the values of the k / block_elems blocks at src (ggml's dequantize_row_*).
/// k must be a multiple of the block. fp32 arithmetic as ggml's reference (exact up to rounding).
void dequantize_row(QuantType t, const void* src, float* dst, int64_t k);

/// Quantizes k floats (a multiple of 32) to q8_0 or q4_0 blocks at dst, byte for byte as ggml's
/// quantize_row_q8_0_ref / quantize_row_q4_0_ref (and the gguf package's gguf.quants). Other
/// types throw std::invalid_argument.
void quantize_row(QuantType t, const float* src, void* dst, int64_t k);

/// Activations quantized per block (what quant_linear feeds the integer kernels).
///   q[i*k + p]       int8 values, x[i, p] ≈ d[i*nb + p/block]·q[i*k + p]
///   d[i*nb + b]      fp32 scale of block b (nb = k / block), amax/127 (0 for an all-zero block)
///   sum16[i*k/16 + g] sum of q over elements [16g, 16g+16)
///   dsum[i*k/32 + c]  d of the block holding elements [32c, 32c+32) times their sum of q (fp32:
///                     the offset and minimum terms of q4_0 / q4_1 without integer work)
struct Q8Acts {
  const int8_t* q;
  const float* d;
  const int16_t* sum16;
  const float* dsum;
  int64_t k, block;
};

/// Bytes of scratch quantize_acts needs for m rows of k at `block` (32 or 256).
int64_t q8_acts_bytes(int64_t m, int64_t k, int64_t block);

/// Quantizes m rows of x (row stride lda >= k) into `scratch` (q8_acts_bytes, 64-byte aligned);
/// the result points into it. Round to nearest (ties to even); identical on every ISA path.
Q8Acts quantize_acts(const float* x, int64_t lda, int64_t m, int64_t k, int64_t block, void* scratch);

/// y = x · Wᵀ + bias with W quantized, [n, k] rows of `w_type` blocks.
///   x     fp32 [m, k], row stride lda (0: k)
///   w     n rows of k / block_elems blocks, row stride ldw_bytes (0: dense, quant_row_bytes)
///   bias  fp32 [n] or nullptr
///   y     fp32 [m, n], row stride ldy (0: n); must not overlap x or w
/// k must be a multiple of the block (else std::invalid_argument, as for null pointers or short
/// strides). Threads (OpenMP, as linear) split the output columns. The activations are quantized
/// into the calling thread's scratch, so a call allocates only when it needs more than before
/// (never at a steady decode shape).
struct QuantLinearArgs {
  const float* x = nullptr;
  int64_t lda = 0;
  const void* w = nullptr;
  QuantType w_type = QuantType::q8_0;
  int64_t ldw_bytes = 0;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t m = 0, n = 0, k = 0;
};

void quant_linear(const QuantLinearArgs& args);

/// The dot-product path quant_linear takes on the current ISA: "amx" (quant_linear_packed with
/// 16 or more rows on AMX int8 tiles, the rest as vnni), "vnni", "avx2" or "generic".
const char* quant_kernel_path();

}  // namespace fuselm::kernels
