// --kv-cache-dtype auto: the KV cache is f32 when F32 tensors hold at least half of the weight
// bytes a model reads, bf16 otherwise (bf16, f16 or quantized linear weights with f32 norms).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "engine/model.h"

namespace fuselm::engine {
namespace {

// Weight storages keyed by address, as Model::load records them.
struct Weights {
  int cells[4]{};
  std::map<const void*, int64_t> bytes;
  std::map<const void*, std::string> type;
  void add(int i, const std::string& t, int64_t b) {
    bytes[&cells[i]] = b;
    type[&cells[i]] = t;
  }
};

TEST(KvDTypeForWeights, AnFp32ModelKeepsAnFp32Cache) {
  Weights w;
  w.add(0, "f32", 500);
  w.add(1, "f32", 100);
  EXPECT_EQ(kv_dtype_for_weights(w.bytes, w.type), kv::KvDType::f32);
}

TEST(KvDTypeForWeights, Bf16WeightsWithFp32NormsGiveABf16Cache) {
  Weights w;
  w.add(0, "bf16", 900);
  w.add(1, "f32", 10);
  EXPECT_EQ(kv_dtype_for_weights(w.bytes, w.type), kv::KvDType::bf16);
}

TEST(KvDTypeForWeights, QuantizedWeightsGiveABf16CacheByTheirSummedShare) {
  // Two quantized types together outweigh the f32 tensors, though each alone does not: the f32
  // tensors are 40% of the bytes, not an fp32 model.
  Weights w;
  w.add(0, "q4_1", 300);
  w.add(1, "q6_k", 300);
  w.add(2, "f32", 400);
  EXPECT_EQ(kv_dtype_for_weights(w.bytes, w.type), kv::KvDType::bf16);
}

TEST(KvDTypeForWeights, HalfFp32IsStillAnFp32Model) {
  Weights w;
  w.add(0, "f32", 500);
  w.add(1, "bf16", 500);
  EXPECT_EQ(kv_dtype_for_weights(w.bytes, w.type), kv::KvDType::f32);
}

}  // namespace
}  // namespace fuselm::engine
