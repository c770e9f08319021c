#include "kv/pool_sizing.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>

namespace fuselm::kv {

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

int64_t default_pool_tokens(int32_t max_seqs, int64_t max_context, int64_t bytes_per_token, int64_t available,
                            int32_t block_size) {
  const int64_t per_token = std::max<int64_t>(1, bytes_per_token);
  const int64_t wanted = max_context * std::max<int32_t>(1, max_seqs);
  int64_t cap = kDefaultMaxBytes;
  // The weights are loaded already, and others share the machine: a share of what is free now.
  if (available > 0) cap = std::min<int64_t>(cap, static_cast<int64_t>(kDefaultShareOfFree * static_cast<double>(available)));
  int64_t tokens = std::min(wanted, cap / per_token);
  // One full context, so that any request the model accepts fits the pool, when memory allows.
  if (tokens < max_context && (available <= 0 || max_context * per_token <= available / 2)) tokens = max_context;
  return std::max<int64_t>(tokens, block_size);
}

int32_t pool_blocks(const PoolSizing& s, int64_t bytes_per_token, int64_t max_context, int32_t block_size) {
  const int64_t block_bytes = std::max<int64_t>(1, bytes_per_token) * block_size;
  int64_t blocks = 0;
  if (s.bytes > 0) {
    blocks = s.bytes / block_bytes;
    if (blocks < 1)
      throw std::invalid_argument("--kv-cache-memory " + std::to_string(s.bytes) + " bytes holds no KV block (one is " +
                                  std::to_string(block_bytes) + " bytes)");
  } else {
    const int64_t tokens = s.tokens > 0 ? s.tokens
                                        : default_pool_tokens(s.max_seqs, max_context, bytes_per_token,
                                                              available_memory_bytes(), block_size);
    blocks = (tokens + block_size - 1) / block_size;
  }
  return static_cast<int32_t>(std::clamp<int64_t>(blocks, 1, std::numeric_limits<int32_t>::max() / std::max(1, block_size)));
}

StatefulPool stateful_pool(const PoolSizing& s, int64_t bytes_per_token, int64_t slot_bytes, int32_t max_checkpoints,
                           int64_t max_context, int32_t block_size, int64_t available) {
  StatefulPool p;
  p.seq_slots = std::max<int32_t>(1, s.max_seqs);
  slot_bytes = std::max<int64_t>(1, slot_bytes);
  const int64_t seq_bytes = p.seq_slots * slot_bytes;
  const int64_t block_bytes = bytes_per_token * block_size;
  int64_t budget = s.bytes;
  if (budget <= 0) {
    budget = kDefaultMaxBytes;
    if (available > 0) budget = std::min<int64_t>(budget, static_cast<int64_t>(kDefaultShareOfFree * static_cast<double>(available)));
  } else if (seq_bytes + block_bytes > budget) {
    throw std::invalid_argument("--kv-cache-memory " + std::to_string(budget) + " bytes holds less than the state of " +
                                std::to_string(p.seq_slots) + " sequences (" + std::to_string(seq_bytes) + " bytes)" +
                                (block_bytes ? " and one KV block (" + std::to_string(block_bytes) + " bytes)" : ""));
  }
  const int64_t rest = std::max<int64_t>(0, budget - seq_bytes - block_bytes);
  p.checkpoint_slots = static_cast<int32_t>(std::min<int64_t>(max_checkpoints, (block_bytes ? rest / 4 : rest) / slot_bytes));
  const int64_t kv_budget = budget - seq_bytes - p.checkpoint_slots * slot_bytes;
  const int64_t cap_blocks = std::numeric_limits<int32_t>::max() / std::max(1, block_size);
  int64_t tokens = 0;
  if (s.tokens > 0) tokens = s.tokens;
  else if (bytes_per_token == 0 || s.bytes <= 0) tokens = max_context * p.seq_slots;
  if (bytes_per_token > 0 && s.tokens <= 0) {
    tokens = s.bytes > 0 ? kv_budget / block_bytes * block_size : std::min(tokens, kv_budget / bytes_per_token);
    if (s.bytes <= 0 && tokens < max_context && (available <= 0 || max_context * bytes_per_token <= available / 2))
      tokens = max_context;
  }
  p.blocks = static_cast<int32_t>(std::clamp<int64_t>((tokens + block_size - 1) / block_size, 1, cap_blocks));
  return p;
}

}  // namespace fuselm::kv
