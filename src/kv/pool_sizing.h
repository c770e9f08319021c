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

/// A stateful model's pool (docs/recurrent.md): KV blocks for its attention layers and state
/// slots for its recurrent ones, out of one budget.
struct StatefulPool {
  int32_t blocks = 0;            // KV blocks (cost nothing when bytes_per_token is 0: prefix keys only)
  int32_t seq_slots = 0;         // one per sequence that can run at once (s.max_seqs)
  int32_t checkpoint_slots = 0;  // prefix-cache state checkpoints (kv/state_pool.h)
};

/// Splits the budget between state and KV. The budget is s.bytes when given, else the default
/// cap, min(kDefaultShareOfFree x available, kDefaultMaxBytes). The max_seqs sequence slots come
/// first (a running sequence cannot do without its state); checkpoints get at most a quarter of
/// the rest (all of it without attention), up to max_checkpoints; the KV blocks get what remains,
/// as pool_blocks sizes them (s.tokens when given; by default at most max_seqs full contexts, and
/// one full context when it fits in half of `available`). A model without attention
/// (bytes_per_token 0) gets max_seqs contexts of blocks, which hold no memory. Throws
/// std::invalid_argument, naming the sizes, when s.bytes cannot hold the sequence slots and one
/// KV block.
StatefulPool stateful_pool(const PoolSizing& s, int64_t bytes_per_token, int64_t slot_bytes, int32_t max_checkpoints,
                           int64_t max_context, int32_t block_size, int64_t available);

}  // namespace fuselm::kv
