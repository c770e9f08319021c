#pragma once
// How many KV blocks the pool gets: from bytes (--kv-cache-memory), from tokens (--max-context),
// or by default enough for max_seqs full contexts, capped at 40% of the memory available now.
#include <cstdint>

namespace fuselm::kv {

struct PoolSizing {
  int64_t bytes = 0;     // > 0: the pool's size in bytes
  int64_t tokens = 0;    // > 0 (and bytes == 0): the pool's size in tokens
  int32_t max_seqs = 1;  // for the default: full contexts to hold at once
};

/// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
int64_t available_memory_bytes();

/// Blocks of `block_size` tokens for `s`; at least one. Throws std::invalid_argument when
/// `s.bytes` holds less than one block (naming the sizes).
int32_t pool_blocks(const PoolSizing& s, int64_t bytes_per_token, int64_t max_context, int32_t block_size);

}  // namespace fuselm::kv
