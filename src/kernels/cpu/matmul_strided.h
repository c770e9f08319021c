#pragma once
// The generic products of aten.matmul/bmm/mm over strided views of any real dtype, accumulated in
// double (activations of an unfused graph: rope tables, attention written by hand), and the
// epilogue of addmm / baddbmm.
//
//   matmul_strided(a, b, batch, nb, out):  out[i, m, n] = Σ_k a[i, m, k] · b[i, k, n] for every
//     batch index i of the nb-dim shape `batch` (row-major); a is [.., M, K] and b [.., K, N] with
//     their batch strides already broadcast to `batch` (their first nb strides), out contiguous f32
//     [batch.., M, N]. Loads through load_double; (batch, row) pairs split over the thread pool.
//   scale_add(alpha, beta, bias, out):  out = alpha·out + beta·bias in double, bias broadcast to the
//     contiguous f32 out (beta 0 reads no bias, as torch ignores it then).
#include <cstdint>

#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

void matmul_strided(const Strided& a, const Strided& b, const int64_t* batch, int nb, float* out);
void scale_add(double alpha, double beta, const Strided& bias, const Strided& out);

}  // namespace fuselm::kernels
