// linear with bf16 weights on AMX tiles, for more than kGemvRows rows (internal; included only
// by linear_impl.h, after linear_bf16dot_impl.h, for a level with AMX-BF16).
//
// Same operands as dot_gemm: x rounded to bf16 in per-thread scratch (rows padded with zeros to a
// multiple of 32, k to panel_pairs(k) pairs) and W packed to pair panels bp[kp][64] (one 1 MiB
// block of columns at a time, or PackedLinearWeights packed at load). A 32×32 block of y is four 16×16 fp32 tiles accumulated over all
// of k with tdpbf16ps (16×16×32 multiply-adds each): A tiles are 16 rows × 32 bf16 of x, B tiles 16
// pairs × 16 columns of a panel (row stride 256 bytes). The tiles are then stored to a 32×32
// buffer and added to the bias into y, which clips the padded rows and columns. Each calling
// thread loads the tile configuration and releases the tiles when done.
namespace fuselm::kernels {
namespace {  // NOLINT

// The 64-byte tile configuration of palette 1: tmm0..3 accumulators (C), tmm4..5 x (A),
// tmm6..7 weights (B), all 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void load_tile_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  _tile_loadconfig(&c);
}

// y[r0.., c0..] = bias + the 32×32 block of x·Wᵀ: xb rows from r0 - m0 (row stride ldb bf16),
// panel columns from pc (the block's first column within panel b). rows, cols: the valid part.
void amx_block(const LinearProblem& p, const uint16_t* xa, int64_t ldb, const uint32_t* b, int64_t kp,
               int64_t row, int rows, int64_t col, int cols, float* tmp) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t sa = ldb * 2, sb = kDotNR * 4;  // bytes per tile row
  for (int64_t q0 = 0; q0 < kp; q0 += 16) {
    _tile_loadd(4, xa + 2 * q0, sa);
    _tile_loadd(5, xa + 16 * ldb + 2 * q0, sa);
    _tile_loadd(6, b + q0 * kDotNR, sb);
    _tile_loadd(7, b + q0 * kDotNR + 16, sb);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, tmp, 128);
  _tile_stored(1, tmp + 16, 128);
  _tile_stored(2, tmp + 16 * 32, 128);
  _tile_stored(3, tmp + 16 * 32 + 16, 128);
  const __mmask16 m0 = mask16(cols), m1 = mask16(cols - 16);
  const __m512 b0 = p.bias ? _mm512_maskz_loadu_ps(m0, p.bias + col) : _mm512_setzero_ps();
  const __m512 b1 = p.bias ? _mm512_maskz_loadu_ps(m1, p.bias + col + 16) : _mm512_setzero_ps();
  for (int i = 0; i < rows; ++i) {
    float* yr = p.y + (row + i) * p.ldy + col;
    _mm512_mask_storeu_ps(yr, m0, _mm512_add_ps(_mm512_loadu_ps(tmp + i * 32), b0));
    if (m1) _mm512_mask_storeu_ps(yr + 16, m1, _mm512_add_ps(_mm512_loadu_ps(tmp + i * 32 + 16), b1));
  }
}

// Rows [m0, m1), columns [n0, n1) of y for bf16 W (either layout) on AMX tiles.
void amx_gemm(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const int64_t kp = panel_pairs(p.k), ldb = round_up32(p.k);
  const int64_t rows = m1 - m0, rows_pad = (rows + 31) / 32 * 32;
  uint16_t* xb = x_scratch(rows_pad, ldb);
  x_to_bf16(p, m0, rows, xb, ldb);
  std::memset(xb + rows * ldb, 0, static_cast<size_t>((rows_pad - rows) * ldb) * 2);
  const int64_t nc_max = pack_block_cols(kp);
  uint32_t* scratch = reinterpret_cast<uint32_t*>(thread_scratch(0, static_cast<size_t>(nc_max * kp)));
  float* tmp = thread_scratch(2, 32 * 32);
  load_tile_config();
  for (int64_t nc0 = n0; nc0 < n1; nc0 += nc_max) {
    const int64_t nc = std::min(nc_max, n1 - nc0);
    const uint32_t* bp = block_panels(p, nc0, nc, kp, scratch);
    for (int64_t r = 0; r < rows; r += 32) {
      const int rv = static_cast<int>(std::min<int64_t>(32, rows - r));
      for (int64_t c = 0; c < nc; c += 32) {
        const uint32_t* b = bp + (c / kDotNR) * kp * kDotNR + c % kDotNR;
        amx_block(p, xb + r * ldb, ldb, b, kp, m0 + r, rv, nc0 + c,
                  static_cast<int>(std::min<int64_t>(32, nc - c)), tmp);
      }
    }
  }
  _tile_release();
}

// The amx level's GEMM: bf16 W on tiles, every other dtype on the avx512 bodies.
void gemm_amx(const LinearProblem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (p.w_dtype != DType::bf16) return gemm_entry<Isa::avx512>(p, m0, m1, n0, n1);
  amx_gemm(p, m0, m1, n0, n1);
}

}  // namespace
}  // namespace fuselm::kernels
