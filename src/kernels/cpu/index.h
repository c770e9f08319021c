#pragma once
// Indexed walks along one dimension (torch.gather / torch.scatter with a value) and in-place
// arithmetic through a view's strides: the router ops of runtime/ops/router_ops.cc (docs/moe.md).
// Everything goes through doubles (load_double / store_double of strided.h), as the ATen ops were
// computed before they moved here; router tensors are [tokens, experts] small.
//
//   check_index_along(x, dim, index):  "" when index (same rank as x, any integer dtype) addresses
//     x along `dim`: every value in [-x.shape[dim], x.shape[dim]) and every other dim of index no
//     larger than x's; else a one-line reason naming the bad index. The walks below assume it.
//   gather_along(x, dim, index, out):  out[..i..] = x[.. index[..i..] along dim ..], out contiguous
//     of index's shape.
//   scatter_along(x, dim, index, v):  x[.. index[..i..] along dim ..] = v, through x's strides.
//   binary_in_place(fn, alpha, x, y):  x = fn(x, y) elementwise with y broadcast to x, written
//     through x's strides (add, with alpha as binary()'s, mul, div; throws std::invalid_argument for
//     another fn).
#include <string>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

std::string check_index_along(const Strided& x, int dim, const Strided& index);
void gather_along(const Strided& x, int dim, const Strided& index, const Strided& out);
void scatter_along(const Strided& x, int dim, const Strided& index, double v);
void binary_in_place(BinaryFn fn, double alpha, const Strided& x, const Strided& y);

}  // namespace fuselm::kernels
