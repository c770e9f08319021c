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

int32_t pool_blocks(const PoolSizing& s, int64_t bytes_per_token, int64_t max_context, int32_t block_size) {
  const int64_t block_bytes = std::max<int64_t>(1, bytes_per_token) * block_size;
  int64_t blocks = 0;
  if (s.bytes > 0) {
    blocks = s.bytes / block_bytes;
    if (blocks < 1)
      throw std::invalid_argument("--kv-cache-memory " + std::to_string(s.bytes) + " bytes holds no KV block (one is " +
                                  std::to_string(block_bytes) + " bytes)");
  } else {
    int64_t tokens = s.tokens > 0 ? s.tokens : max_context * std::max<int32_t>(1, s.max_seqs);
    if (s.tokens <= 0) {
      // 40% of what is free now: the weights are loaded already, and others share the machine.
      const int64_t avail = available_memory_bytes();
      if (avail > 0) tokens = std::min(tokens, std::max<int64_t>(block_size, avail * 2 / 5 / std::max<int64_t>(1, bytes_per_token)));
    }
    blocks = (tokens + block_size - 1) / block_size;
  }
  return static_cast<int32_t>(std::clamp<int64_t>(blocks, 1, std::numeric_limits<int32_t>::max() / std::max(1, block_size)));
}

}  // namespace fuselm::kv
