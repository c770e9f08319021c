#pragma once
// Small structural helpers the fusers share: argument access, casts, parameters, linear-likes.
// Everything here reads ops, dataflow and shapes; nothing reads a module or parameter name.
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fusers/fuser.h"
#include "fusers/pattern_ops.h"
#include "ir/op_traits.h"

namespace fuselm::fusers {

/// Node index of argument i when it is a reference, else -1.
int ref_arg(const ir::Node& n, size_t i);
/// A real or integer literal argument.
std::optional<double> number_arg(const ir::Node& n, size_t i);
bool is_op(const ir::Node& n, std::string_view op);

/// A value-preserving cast (ir::OpTraits::cast: to, _to_copy, type_as) to a floating dtype that
/// reads a tensor in argument 0.
bool is_float_cast(const ir::Node& n);
/// A reshape (ir::ViewKind::reshape: view, reshape, _unsafe_view; argument 1 is the new sizes)
/// reading a tensor in argument 0.
bool is_reshape(const ir::Node& n);
/// A view-like op (ir/op_traits.h) of one of `kinds` reading a tensor in argument 0.
bool is_view_of(const ir::Node& n, std::initializer_list<ir::ViewKind> kinds);
/// Follows casts back from node i (with sg given, only casts sg owns: it stops at sg's inputs);
/// appends the casts that sg owns to `covered` when given.
int strip_casts(const ir::Graph& g, int i, const Subgraph* sg = nullptr, std::vector<int>* covered = nullptr);

bool is_parameter(const ir::Graph& g, int i);
/// Static dimension d (negative from the end) of a tensor meta, or nullopt when symbolic.
std::optional<int64_t> static_dim(const ir::TensorMeta& t, int d);

/// A linear layer as the graph spells it:
///   nk: aten.linear(x, W[N,K], b?)
///   kn: view(addmm(b, view(x, [-1, K]), W[K,N]), [..., N])   (GPT-2 Conv1D), or a bare addmm on 2-d x
/// out = the value the layer produces, x = what it reads, weight/bias = parameter placeholders.
struct LinearLike {
  int out = -1, x = -1, weight = -1, bias = -1;
  int x_view = -1;  // kn: the view(x, [-1, K]) node (reused by a fused GEMM)
  int addmm = -1;   // kn: the addmm node
  bool kn = false;
  std::vector<int> nodes;  // the nodes that make it up
};
/// node i as a linear layer whose weight is a parameter, when it is one.
std::optional<LinearLike> as_linear(const ir::Graph& g, int i);

/// Stacks linear-likes that read one x into one GEMM (qkv, glu, mla's q-LoRA): appends the weight
/// transform `<prefix>.weight` (and `.bias` when they have biases; concatenated along the output
/// axis: 0 for [N,K], 1 for Conv1D's [K,N]), column parallel, their placeholders, and one
/// aten.linear (or addmm for Conv1D) over x with this instance's stacked width. Returns the new
/// ref of the GEMM's output, or a rejection when a width is not static or the inputs differ.
std::optional<int> stacked_linear(const ir::Graph& g, Fusion& f, std::span<const LinearLike> parts,
                                  std::string_view prefix, Why& why);

/// Output width N and input width K of a linear-like from its weight's shape (static), or 0.
int64_t linear_out_width(const ir::Graph& g, const LinearLike& l);
int64_t linear_in_width(const ir::Graph& g, const LinearLike& l);

/// The act_and_mul name of an activation node ("silu", "gelu", "gelu_tanh"), or a rejection
/// naming the op (dropout, identity, an unknown gelu approximation are not GLU activations).
std::optional<std::string> act_and_mul_activation(const ir::Node& act, Why& why);
/// The linear-like reading v when v feeds exactly one node of sg and that node (or its one view)
/// is a linear-like reading v: a GLU's down projection.
std::optional<LinearLike> down_projection(const Subgraph& sg, int v);
/// A node with exactly one tensor input (argument 0) and any literal arguments.
bool is_elementwise_unary(const ir::Node& n);

/// Walks back from v0 through sg's nodes (any op, list arguments too) and returns the outputs of
/// the linear-likes it reaches first (it does not walk past them), and in `reached` the values of
/// `stop` it reaches (not walked past either). The upstream projections of an operand.
std::set<int> upstream_linears(const Subgraph& sg, int v0, const std::set<int>& stop = {},
                               std::set<int>* reached = nullptr);

/// The output projection of an attention op: the one linear-like in sg that the op's output
/// reaches through any other ops (views, dropout, scaling, gates). nullopt when there is none in
/// the module or several are reached (then no projection is named). Used for TP notes (row parallel).
std::optional<LinearLike> output_projection(const Subgraph& sg, int attention);

/// A new node of fuselm op `op` (ir/op_defs.h) with its arguments given by name, in any order;
/// arguments not given are None. Throws std::logic_error for a name the op does not define.
NewNode op_node(std::string_view op, std::initializer_list<std::pair<std::string_view, ir::Arg>> args);
/// Argument `name` of n, a new node of a fuselm op.
ir::Arg& arg_of(NewNode& n, std::string_view name);
/// Argument `name` of graph node n (a fuselm op) as a number, when it is a literal one.
std::optional<double> number_arg(const ir::Node& n, std::string_view name);

/// Args for a shape list [d0, d1, ...] of a tensor meta (symbolic dims as {"sym": expr}).
ir::Arg shape_arg(const ir::TensorMeta& t);
ir::Arg ref(int i);
ir::Arg real(double v);
ir::Arg integer(int64_t v);
ir::Arg string(std::string_view s);
ir::Arg none();

}  // namespace fuselm::fusers
