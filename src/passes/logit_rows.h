#pragma once
// Only the rows that are sampled go through the LM head. The graph's last step is a product of
// the hidden states [1, T, H] with a weight into the vocabulary ([1, T, V], possibly followed by
// row-wise scaling or soft-capping); select_sampled_rows inserts fuselm.select_rows on that
// product's input, so a step computes logits for the rows its Batch lists (one per sampling
// sequence) instead of every token of every prefill chunk. Decided by structure and the op traits
// (ir/op_traits.h) alone. A graph pass: the engine runs it on the rewritten (and sharded) graph.
#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace fuselm::passes {

/// Rewrites g in place when its first output is, through row-wise ops only (ir::OpTraits::rowwise:
/// casts, aliases, elementwise ops whose other arguments are literals) each read by one node, a
/// row product (ir::OpTraits::row_product: linear, matmul) of a [1, T, H] value by a
/// token-independent weight giving [1, T, vocab], where T is input_ids' token dimension. Returns
/// true when the node was inserted; false with the reason in `why` (g unchanged), in which case
/// every row keeps its logits. Idempotent (a graph that already selects is left alone).
bool select_sampled_rows(ir::Graph& g, int64_t vocab_size, std::string& why);

/// After select_sampled_rows succeeded: the index of its fuselm.select_rows node, whose output is
/// the final hidden states of the selected rows ([1, rows, hidden], the LM head's input), or -1
/// when g has none.
int selected_hidden_node(const ir::Graph& g);

}  // namespace fuselm::passes
