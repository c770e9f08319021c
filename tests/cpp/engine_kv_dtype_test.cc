// --kv-cache-dtype auto: the KV cache is f32 when F32 tensors hold at least half of the weight
// bytes a model reads, bf16 otherwise (bf16, f16 or quantized linear weights with f32 norms).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "engine/model.h"

namespace fuselm::engine {
namespace engine_kv_dtype_test {

// Weight storages keyed by address, as Model::load records them.
struct Weights {
  int cells[4]{};
  std::map<const void*, int64_t> bytes;
  std::map<const void*, WeightStorage> type;
  void add(int i, ir::DType d, int64_t b) { add(i, WeightStorage{d, std::nullopt}, b); }
  void add(int i, kernels::QuantType q, int64_t b) { add(i, WeightStorage{ir::DType::u8, q}, b); }
  void add(int i, WeightStorage s, int64_t b) {
    bytes[&cells[i]] = b;
    type[&cells[i]] = s;
  }
};

TEST(KvDTypeForWeights, AnFp32ModelKeepsAnFp32Cache) {
  Weights w;
  w.add(0, ir::DType::f32, 500);
  w.add(1, ir::DType::f32, 100);
  EXPECT_EQ(kv_dtype_for_weights(w.bytes, w.type), kv::KvDType::f32);
}

TEST(KvDTypeForWeights, Bf16WeightsWithFp32NormsGiveABf16Cache) {
  Weights w;
  w.add(0, ir::DType::bf16, 900);
  w.add(1, ir::DType::f32, 10);
  EXPECT_EQ(kv_dtype_for_weights(w.bytes, w.type), kv::KvDType::bf16);
}

TEST(KvDTypeForWeights, QuantizedWeightsGiveABf16CacheByTheirSummedShare) {
  // Two quantized types together outweigh the f32 tensors, though each alone does not: the f32
  // tensors are 40% of the bytes, not an fp32 model.
  Weights w;
  w.add(0, kernels::QuantType::q4_1, 300);
  w.add(1, kernels::QuantType::q6_k, 300);
  w.add(2, ir::DType::f32, 400);
  EXPECT_EQ(kv_dtype_for_weights(w.bytes, w.type), kv::KvDType::bf16);
}

TEST(KvDTypeForWeights, HalfFp32IsStillAnFp32Model) {
  Weights w;
  w.add(0, ir::DType::f32, 500);
  w.add(1, ir::DType::bf16, 500);
  EXPECT_EQ(kv_dtype_for_weights(w.bytes, w.type), kv::KvDType::f32);
}

}  // namespace engine_kv_dtype_test
}  // namespace fuselm::engine
