#pragma once
// What the graph passes need to know about an op, declared once per op (op_traits.cc; a fuselm
// op's beside its schema, in op_defs.cc): whether it is a view and of which kind, whether it is
// pointwise, row-wise (safe for LM-head row selection), a cast, a reduction (and where its axes
// are), in place, where it may read a quantized weight, and how a tensor-parallel split on its
// inputs propagates. The fusers, the shard plan and the row-selection pass read these instead of
// keeping their own op-name lists; tests/cpp/ir_op_traits_test.cc fails when an op the runtime
// registers has no entry, or when a trait the passes rely on is removed.
#include <cstdint>
#include <span>
#include <string_view>

namespace fuselm::ir {

/// The kind of view-like op: how its output's elements relate to argument 0's. Every kind but
/// none keeps the values of argument 0 (the same elements, laid out differently, or a subset).
enum class ViewKind : uint8_t {
  none,       // not a view
  reshape,    // view / reshape / _unsafe_view: same elements in order; argument 1 is the new sizes
  flatten,    // flatten.using_ints: dims [start, end] (arguments 1, 2) merged into one
  transpose,  // transpose.int (dims in arguments 1, 2), t: two dims swapped
  permute,    // permute: dims reordered by the list in argument 1
  unsqueeze,  // a size-1 dim inserted at argument 1
  squeeze,    // size-1 dims removed (squeeze.dim: the dim in argument 1; .dims, .default)
  slice,      // slice.Tensor / narrow: a range along the dim in argument 1, rank kept
  select,     // select.int: one index along the dim in argument 1, that dim dropped
  expand,     // expand: size-1 dims broadcast to the sizes in argument 1
  split,      // split / split_with_sizes / chunk / unbind: a tuple of slices (read by getitem)
  complex,    // view_as_complex / view_as_real: pairs of the last dim as complex numbers
  strided,    // as_strided: any strides over argument 0's storage
  alias,      // alias / detach / dropout (inference): argument 0 itself
  copy,       // contiguous / clone / lift_fresh_copy: argument 0's values in fresh storage
};

/// How the tensor-parallel shard plan propagates a split of one of the op's inputs (the walk
/// over the rewritten graph, docs/tensor-parallel.md). An op whose inputs are all replicated is
/// replicated whatever its rule; the rule says what happens when one is split.
enum class TpRule : uint8_t {
  replicate,         // not followed: a split input makes the seed it came from replicated
  pointwise,         // elementwise over broadcast inputs: the split passes on the aligned dim
  reduce,            // reduces the dims listed in argument OpTraits::reduce_axes (keepdim the
                     //   argument after): fails over the split dim, else the split dim moves down
  linear,            // aten.linear(x, W[N, K], b?): column parallel W, or row parallel W on split x
  addmm,             // addmm(b, x, W[K, N]) (Conv1D): as linear with the weight transposed
  embedding,         // embedding(table, ids): a vocab-parallel table lookup
  experts,           // fuselm.experts(_shared): experts split by their intermediate size
  mla_attention,     // fuselm.mla_attention: query and up-projection split by heads
  attention,         // fuselm.attention: q (and k, v) split by heads (dim 1); output by heads
  reshape,           // view / reshape / _unsafe_view: the sizes carrying the split are rewritten
  transpose,         // transpose(x, a, b): the split dim follows the swap
  permute,           // permute(x, dims): the split dim follows the permutation
  unsqueeze,         // unsqueeze(x, d): the split dim moves up when d is at or below it
  slice,             // slice(x, d, ...): fails along the split dim, rank kept
  drop_dim,          // select(x, d, i) / squeeze.dim(x, d): fails along the split dim, d removed
  expand,            // expand(x, sizes): the size of the split dim is rewritten
  split_with_sizes,  // split_with_sizes(x, sizes, d): along the split dim only by its sections
  getitem,           // getitem(tuple, i): piece i of a tuple's splits
  cat,               // cat(list, d): inputs split alike, never along the split dim
  act_and_mul,       // fuselm.act_and_mul: a [gate_r | up_r] input gives an up_r-wide output
  rope,              // fuselm.rope: pointwise unless the rotated (last) dim is split
  rms_norm,          // fuselm.rms_norm: over a split last dim, an all-reduced sum of squares
  sym_size,          // sym_size(x, d): a replicated scalar unless d is the split dim
};

/// The traits of one op. Default-constructed: an op nothing is known about (no view, not
/// pointwise, not row-wise, replicated under tensor parallelism).
struct OpTraits {
  std::string_view name;  // "aten.view.default", "fuselm.rope.default", "getitem", ...
  ViewKind view = ViewKind::none;
  /// The output shares argument 0's storage (a PyTorch view): an in-place write through it
  /// lands in argument 0.
  bool aliases = false;
  /// Elementwise: output element i depends only on element i of each (broadcast) tensor input
  /// (arithmetic, activations, comparisons, casts, identities).
  bool pointwise = false;
  /// Acts on each token row on its own and keeps the rows: selecting rows of argument 0 before
  /// it equals selecting them after, when its other arguments are literals (LM-head row
  /// selection walks through these).
  bool rowwise = false;
  /// A dtype or device conversion of argument 0 that keeps its values (to, _to_copy, type_as);
  /// the output dtype is the node's meta.
  bool cast = false;
  /// Writes its result into argument 0 (copy_, add_, scatter_, ...): later reads of argument 0
  /// (or of a view of it) see the write.
  bool in_place = false;
  /// The output's rows are argument 0's rows each multiplied by the other arguments
  /// (linear, matmul): selecting rows of argument 0 selects the output's rows when the other
  /// arguments do not depend on the tokens.
  bool row_product = false;
  /// A reduction: the index of the argument listing the reduced dims (-1: not a reduction); the
  /// argument after it, when present, is keepdim.
  int8_t reduce_axes = -1;
  /// The argument where a weight stored block-quantized (GGUF) may be read: linear's W [N, K],
  /// an embedding's table [V, H] (-1: none; the op reads every argument as a plain tensor).
  int8_t quant_weight = -1;
  /// A row lookup: argument quant_weight is a table whose rows the op gathers by token ids
  /// (aten.embedding, fuselm.vocab_embedding).
  bool lookup = false;
  TpRule tp = TpRule::replicate;

  bool is_view() const { return view != ViewKind::none; }
};

/// Every op with declared traits, in table order: the ops the runtime registers (ATen, fuselm,
/// getitem and the scalar ops of symbolic shapes) and a few ATen views capture may hold.
std::span<const OpTraits> op_traits_table();
/// The traits of op `name`, or nullptr when the table has none.
const OpTraits* find_op_traits(std::string_view name);
/// The traits of op `name`; a default OpTraits (nothing known) when the table has none
/// ("placeholder", an op the runtime does not have).
const OpTraits& op_traits(std::string_view name);

}  // namespace fuselm::ir
