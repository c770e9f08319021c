#pragma once
// ggml's block layouts (ggml-common.h), as structs (internal to the quant kernels and tests).
// Blocks are 2-byte aligned: a row of them must start at an even address.
#include <cstdint>
#include <cstring>

namespace fuselm::kernels {

inline constexpr int kQK = 32;    // elements of a 32-block (q8_0, q4_0, q4_1)
inline constexpr int kQKK = 256;  // elements of a K-quant super-block

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // element j in the low nibble of qs[j], element j + 16 in the high nibble
};
struct BlockQ4_1 {
  uint16_t d, m;  // f16 scale and minimum
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];   // bit j (little-endian u32): 5th bit of element j
  uint8_t qs[16];  // low 4 bits as q4_0
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ4_K {
  uint16_t d, dmin;    // f16 super-block scales of the 6-bit scales and mins
  uint8_t scales[12];  // 8 (scale, min) pairs of 6 bits (get_scale_min_k4)
  uint8_t qs[128];     // 64-element chunks: low nibbles the first 32, high nibbles the next 32
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];   // bit 2c (resp. 2c+1) of qh[l]: 5th bit of element 64c + l (resp. 64c + 32 + l)
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];   // low 4 bits
  uint8_t qh[64];    // high 2 bits
  int8_t scales[16]; // one per 16 elements
  uint16_t d;
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

/// Scale and min j (0..7) of a Q4_K / Q5_K block (ggml's get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/// All 8 scales and mins of a Q4_K / Q5_K block at once, as scale_min_k4 gives them one by one:
/// the 12 bytes read as three little-endian words, the 6-bit fields masked out of them in place.
inline void scales_mins_k4(const uint8_t* q, uint8_t (&sc)[8], uint8_t (&mn)[8]) {
  uint32_t w[3];
  std::memcpy(w, q, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const uint32_t s0 = w[0] & low6, m0 = w[1] & low6;
  const uint32_t s1 = (w[2] & low4) | (((w[0] >> 6) & low2) << 4);
  const uint32_t m1 = ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4);
  std::memcpy(sc, &s0, 4), std::memcpy(sc + 4, &s1, 4);
  std::memcpy(mn, &m0, 4), std::memcpy(mn + 4, &m1, 4);
}

}  // namespace fuselm::kernels
