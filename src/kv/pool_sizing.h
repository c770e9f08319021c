#pragma once
// How many KV blocks the pool gets: from bytes (--kv-cache-memory), from tokens (--max-context),
// or by default enough for max_seqs full contexts, capped by a share of the memory available now
// (kDefaultShareOfFree, at most kDefaultMaxBytes), but never less than one full context when that
// fits in what is available.
#include <cstdint>

namespace fuselm::kv {

struct PoolSizing {
  int64_t bytes = 0;     // > 0: the pool's size in bytes
  int64_t tokens = 0;    // > 0 (and bytes == 0): the pool's size in tokens
  int32_t max_seqs = 1;  // for the default: full contexts to hold at once
};

/// The default pool takes at most this share of MemAvailable...
inline constexpr double kDefaultShareOfFree = 0.2;
/// ...and at most this many bytes (a serving pool, not the machine: raise it with --kv-cache-memory).
inline constexpr int64_t kDefaultMaxBytes = int64_t{4} << 30;

/// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
int64_t available_memory_bytes();

/// The default pool in tokens: min(max_seqs × max_context, cap / bytes_per_token) with cap =
/// min(kDefaultShareOfFree × available, kDefaultMaxBytes) (available 0: unknown, no share cap),
/// raised to one full context when that fits in half of `available`; at least one block.
int64_t default_pool_tokens(int32_t max_seqs, int64_t max_context, int64_t bytes_per_token, int64_t available,
                            int32_t block_size);

/// Blocks of `block_size` tokens for `s`; at least one. Throws std::invalid_argument when
/// `s.bytes` holds less than one block (naming the sizes).
int32_t pool_blocks(const PoolSizing& s, int64_t bytes_per_token, int64_t max_context, int32_t block_size);

}  // namespace fuselm::kv
