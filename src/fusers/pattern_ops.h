#pragma once
// The ATen ops the fusers' patterns name: the ops a pattern matches by identity (a linear, the
// rsqrt of an RMSNorm, the topk of a router) or builds (the views and splits a rewrite puts in).
// This is the one place in src/fusers that spells an ATen op name. What an op *is* (a view and
// of which kind, a cast, pointwise, in place) is read from its traits (ir/op_traits.h, through
// fusers/pattern.h's is_reshape, is_view_of, is_float_cast), never from a list here.
#include <string_view>

namespace fuselm::fusers::ops {

// Products.
inline constexpr std::string_view linear = "aten.linear.default";  // linear(x, W[N, K], b?)
inline constexpr std::string_view addmm = "aten.addmm.default";    // addmm(b, x, W[K, N], beta, alpha)

// Views, splits and joins (matched with their arguments, or built by a rewrite).
inline constexpr std::string_view view = "aten.view.default";
inline constexpr std::string_view reshape = "aten.reshape.default";
inline constexpr std::string_view flatten = "aten.flatten.using_ints";
inline constexpr std::string_view slice = "aten.slice.Tensor";
inline constexpr std::string_view split = "aten.split.Tensor";
inline constexpr std::string_view split_with_sizes = "aten.split_with_sizes.default";
inline constexpr std::string_view chunk = "aten.chunk.default";
inline constexpr std::string_view cat = "aten.cat.default";
inline constexpr std::string_view stack = "aten.stack.default";
inline constexpr std::string_view getitem = "getitem";  // a piece of a tuple (FX's operator.getitem)

// In-place writes and the buffers they fill (MLA's key assembly, grouped top-k masks).
inline constexpr std::string_view copy_ = "aten.copy_.default";
inline constexpr std::string_view new_empty = "aten.new_empty.default";
inline constexpr std::string_view zeros_like = "aten.zeros_like.default";
inline constexpr std::string_view scatter_ = "aten.scatter_.value";

// Arithmetic.
inline constexpr std::string_view add = "aten.add.Tensor";
inline constexpr std::string_view sub = "aten.sub.Tensor";
inline constexpr std::string_view mul = "aten.mul.Tensor";
inline constexpr std::string_view div = "aten.div.Tensor";
inline constexpr std::string_view div_ = "aten.div_.Tensor";
inline constexpr std::string_view neg = "aten.neg.default";
inline constexpr std::string_view abs = "aten.abs.default";
inline constexpr std::string_view pow = "aten.pow.Tensor_Scalar";
inline constexpr std::string_view rsqrt = "aten.rsqrt.default";

// Activations and scoring.
inline constexpr std::string_view silu = "aten.silu.default";
inline constexpr std::string_view gelu = "aten.gelu.default";
inline constexpr std::string_view relu = "aten.relu.default";
inline constexpr std::string_view sigmoid = "aten.sigmoid.default";
inline constexpr std::string_view tanh = "aten.tanh.default";
inline constexpr std::string_view softmax = "aten.softmax.int";
inline constexpr std::string_view softmax_ = "aten._softmax.default";

// Reductions, selection and masks.
inline constexpr std::string_view mean = "aten.mean.dim";
inline constexpr std::string_view sum = "aten.sum.dim_IntList";
inline constexpr std::string_view max_dim = "aten.max.dim";
inline constexpr std::string_view topk = "aten.topk.default";
inline constexpr std::string_view gather = "aten.gather.default";
inline constexpr std::string_view masked_fill = "aten.masked_fill.Scalar";
inline constexpr std::string_view bitwise_not = "aten.bitwise_not.default";
inline constexpr std::string_view logical_not = "aten.logical_not.default";
// The prefix of the variance ops (var.correction, var_mean, ...): a LayerNorm the rms_norm fuser
// names in its rejection.
inline constexpr std::string_view var_prefix = "aten.var";

}  // namespace fuselm::fusers::ops
