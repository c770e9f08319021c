#pragma once
// The fuselm ops, defined once: each op's named arguments, what it does besides computing its
// output, and which argument is its layer. The fusers build nodes by these names, the driver
// writes the schemas into the rewritten graph and keeps ops with effects alive, the runtime reads
// arguments by name and the engine sizes the KV cache from the layer and row layout. Each entry
// also declares the op's traits (ir/op_traits.h: row-wise, its tensor-parallel rule, ...), which
// the traits table takes from here. Adding a fused op is one entry in op_defs.cc (docs/fusers.md
// has the recipe).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/op_traits.h"

namespace fuselm::ir {

/// The KV cache rows an op writes for its layer (none: the op has no effect on the cache).
///   heads:  K rows of kv_heads × head_dim from argument "k" [1, Hkv, T, D] and V rows from "v"
///           [1, Hkv, T, Dv] (fuselm.attention)
///   latent: one row [latent | rope key] from the last dims of "latent" and "k_rot", no V
///           (fuselm.mla_attention, docs/mla.md)
enum class KvRows : uint8_t { none, heads, latent };

/// Who puts the op in the graph: capture (its schema comes with the IR and must match this
/// definition) or the fusers (the driver writes the schema into the rewritten graph).
enum class OpSource : uint8_t { capture, fusers };

struct Graph;
struct Node;

/// Floats of recurrent state per sequence that a stateful op node keeps (docs/recurrent.md), from
/// its operands' static widths; 0 with `error` set when they are not static or do not agree.
using StateSize = int64_t (*)(const Graph& g, const Node& n, std::string& error);

/// One fuselm op.
struct OpDef {
  std::string_view name;                // "fuselm.attention.default"
  std::vector<std::string_view> args;   // named arguments in schema order
  OpSource source = OpSource::fusers;
  KvRows kv = KvRows::none;             // writes the KV cache of its layer
  std::string_view layer;               // the argument holding the layer index ("" when none)
  OpTraits traits;                      // what the passes need; its name is this op's (op_traits())
  /// Stateful (recurrent) ops only: the argument holding the state index (docs/recurrent.md), and
  /// the size of one sequence's state. "" / nullptr: the op keeps no state across steps.
  std::string_view state;
  StateSize state_size = nullptr;
  /// Arguments only capture gives a value (it proves and removes them): an IR holds them as none,
  /// and ir::load refuses one that does not (docs/ir.md: fuselm.attention's key_select).
  std::vector<std::string_view> none_in_ir;

  /// Index of argument `name`; throws std::logic_error naming the op when it has none (a
  /// programming error: callers name arguments of this table).
  size_t arg(std::string_view name) const;
  /// Has an effect besides its output (it writes the KV cache or its recurrent state): never
  /// removed as dead.
  bool has_effects() const { return kv != KvRows::none || !state.empty(); }
};

/// Every fuselm op, in table order.
std::span<const OpDef> op_defs();
/// The definition of op `name`, or nullptr for ops this table does not define (ATen ops).
const OpDef* find_op_def(std::string_view name);
/// The definition of op `name`; throws std::logic_error when the table has none.
const OpDef& op_def(std::string_view name);

}  // namespace fuselm::ir
