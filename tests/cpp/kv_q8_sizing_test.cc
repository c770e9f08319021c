// The q8_0 KV cache's bytes per token (what the pool is sized by): 34 bytes per 32 values, each
// head padded to whole blocks, so a pool of the same bytes holds 64/34 times the tokens of bf16
// for heads of whole blocks; an MLA latent row pads its latent and its rope key to whole blocks
// apart (512 + 64: 612 bytes against bf16's 1152, so 1.88x the tokens too); rows without a head
// size are refused naming the flag.
#include <gtest/gtest.h>

#include "kv/paged_kv_cache.h"
#include "kv/pool_sizing.h"

namespace fuselm::kv {
namespace kv_q8_sizing_test {

TEST(KvQ8Sizing, BytesPerTokenCountBlocksPerHead) {
  // The default model: 30 layers, 3 KV heads of 64 (K and V).
  const std::vector<LayerShape> smollm2(30, LayerShape{3 * 64, 3 * 64, 64, 64});
  EXPECT_EQ(kv_bytes_per_token(smollm2, KvDType::f32), 30 * 2 * 192 * 4);
  EXPECT_EQ(kv_bytes_per_token(smollm2, KvDType::bf16), 30 * 2 * 192 * 2);
  EXPECT_EQ(kv_bytes_per_token(smollm2, KvDType::q8_0), 30 * 2 * 3 * 2 * 34);
  // Heads of 80 take 3 blocks (96 values, zero-padded); V heads of 128 take 4.
  EXPECT_EQ(kv_row_bytes(2 * 80, 80, KvDType::q8_0), 2 * 3 * 34);
  EXPECT_EQ(kv_bytes_per_token({LayerShape{2 * 80, 2 * 128, 80, 128}}, KvDType::q8_0), 2 * 3 * 34 + 2 * 4 * 34);
  // One GiB of pool: q8_0 holds 64/34 = 1.88x the tokens of bf16 (to a block).
  const PoolSizing gib{int64_t{1} << 30};
  const int32_t b16 = pool_blocks(gib, kv_bytes_per_token(smollm2, KvDType::bf16), 8192, 16);
  const int32_t b8 = pool_blocks(gib, kv_bytes_per_token(smollm2, KvDType::q8_0), 8192, 16);
  EXPECT_NEAR(static_cast<double>(b8) / b16, 64.0 / 34.0, 1e-3);
}

TEST(KvQ8Sizing, LatentRowsPadTheLatentAndTheRopeKeyApart) {
  const LayerShape deepseek{512 + 64, 0, 512, 0, true};
  EXPECT_EQ(kv_bytes_per_token({deepseek}, KvDType::f32), 576 * 4);
  EXPECT_EQ(kv_bytes_per_token({deepseek}, KvDType::bf16), 576 * 2);
  EXPECT_EQ(kv_bytes_per_token({deepseek}, KvDType::q8_0), (16 + 2) * 34);  // 612
  // A latent of 40 and a rope key of 24: 2 + 1 blocks (one block would do for 64 values together).
  EXPECT_EQ(kv_bytes_per_token({LayerShape{40 + 24, 0, 40, 0, true}}, KvDType::q8_0), 3 * 34);
  // The tiny test models' 32 + 8 (tests/python/mla_models.py): 1 + 1 blocks.
  EXPECT_EQ(kv_latent_row_bytes(40, 32, KvDType::q8_0), 2 * 34);
  // One GiB of pool over 61 latent layers: q8_0 holds 1152/612 = 1.88x the tokens of bf16.
  const std::vector<LayerShape> v3(61, deepseek);
  const PoolSizing gib{int64_t{1} << 30};
  const int32_t b16 = pool_blocks(gib, kv_bytes_per_token(v3, KvDType::bf16), 8192, 16);
  const int32_t b8 = pool_blocks(gib, kv_bytes_per_token(v3, KvDType::q8_0), 8192, 16);
  EXPECT_NEAR(static_cast<double>(b8) / b16, 1152.0 / 612.0, 2e-2);
  PagedKvCache c({deepseek}, 2, 16, KvDType::q8_0);
  EXPECT_NE(c.k_q8_0(0), nullptr);
  EXPECT_EQ(c.v_q8_0(0), nullptr);
  EXPECT_EQ(c.bytes_per_token(), 612);
}

TEST(KvQ8Sizing, RowsWithoutAHeadSizeAreRefusedNamingTheFlag) {
  const std::vector<LayerShape> no_head{LayerShape{512 + 64, 0}};
  EXPECT_EQ(kv_bytes_per_token(no_head, KvDType::bf16), 576 * 2);
  try {
    kv_bytes_per_token(no_head, KvDType::q8_0);
    FAIL() << "a q8_0 cache of rows without a head size was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-dtype q8_0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(PagedKvCache(no_head, 4, 16, KvDType::q8_0), std::invalid_argument);
  EXPECT_THROW(kv_latent_row_bytes(64, 0, KvDType::q8_0), std::invalid_argument);   // no latent part
  EXPECT_THROW(kv_latent_row_bytes(64, 65, KvDType::q8_0), std::invalid_argument);  // wider than the row
}

TEST(KvQ8Sizing, ParseAndName) {
  EXPECT_EQ(parse_kv_dtype("q8_0"), KvDType::q8_0);
  EXPECT_STREQ(kv_dtype_name(KvDType::q8_0), "q8_0");
  EXPECT_THROW(parse_kv_dtype("q4_0"), std::invalid_argument);
  PagedKvCache c({LayerShape{3 * 64, 3 * 64, 64, 64}}, 2, 16, KvDType::q8_0);
  EXPECT_NE(c.k_q8_0(0), nullptr);
  EXPECT_THROW(c.k(0), std::logic_error);
  EXPECT_EQ(c.bytes_per_token(), 2 * 3 * 2 * 34);
}

}  // namespace kv_q8_sizing_test
}  // namespace fuselm::kv
