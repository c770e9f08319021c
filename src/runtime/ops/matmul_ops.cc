// Products: linear (weights [N,K]), addmm (GPT-2 Conv1D, weights [K,N]), matmul/bmm of
// activations, and embedding lookups. Weight dtype is whatever the checkpoint stores.
#include <cstring>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/matmul_strided.h"
#include "kernels/cpu/quant_weight.h"
#include "runtime/ops/common.h"

namespace fuselm::runtime::ops {
namespace {

kernels::DType weight_dtype(OpCall& c, const Tensor& w) {
  return weight_storage(c, w, "weight");
}

// The weight at `data` as the Executor packed it at load, if it is this problem's W (a view that
// starts at a packed weight but is narrower must not read the packed copy), else nullptr.
const kernels::PackedLinearWeights* packed_for(OpCall& c, const void* data, int64_t n, int64_t k,
                                               kernels::WeightLayout layout) {
  const auto* p = c.ctx.packed_weights(data);
  return p && p->fits(n, k, layout) ? p : nullptr;
}

// y[M,N] = x[M,K] . W^T (+ bias); x is flattened over its leading dims.
void linear(OpCall& c) {
  const Tensor& x = c.tensor(0);
  const Tensor& w = c.tensor(1);
  if (w.ndim != 2) c.fail("linear weight must be 2-d, got " + w.describe());
  const int64_t K = x.shape[x.ndim - 1], N = w.shape[0];
  if (w.shape[1] != K) c.fail("input " + x.describe() + " does not match weight " + w.describe());
  Scratch sx(c.ctx), sw(c.ctx), sb(c.ctx);
  Tensor xc = contiguous_as(x, DType::f32, sx);
  const bool w_rows = w.quant || (w.strides[1] == 1 && w.strides[0] == K);
  Tensor wc = w_rows ? w : contiguous_as(w, DType::f32, sw);
  const float* bias = nullptr;
  if (c.has(2)) bias = contiguous_as(c.tensor(2), DType::f32, sb).ptr<float>();
  std::array<int64_t, kMaxDims> shape{};
  for (int d = 0; d < x.ndim - 1; ++d) shape[d] = x.shape[d];
  shape[x.ndim - 1] = N;
  Tensor out = c.alloc(DType::f32, std::span<const int64_t>(shape.data(), x.ndim));
  const int64_t M = x.numel() / std::max<int64_t>(K, 1);
  if (w.quant) {  // block-quantized weight: the integer kernels (kernels/cpu/quant_weight.h)
    kernels::quant_weight_linear(*w.quant, xc.ptr<float>(), M, bias, out.ptr<float>());
    set_out(c, out);
    return;
  }
  kernels::LinearArgs a;
  a.x = xc.ptr<float>();
  a.w = wc.data;
  a.w_dtype = weight_dtype(c, wc);
  a.w_layout = kernels::WeightLayout::nk;
  a.packed = packed_for(c, wc.data, N, K, kernels::WeightLayout::nk);
  a.bias = bias;
  a.y = out.ptr<float>();
  a.m = M;
  a.n = N;
  a.k = K;
  kernels::linear(a);
  set_out(c, out);
}

// addmm(bias, mat1 [M,K], mat2 [K,N], beta, alpha): GPT-2's Conv1D, weight stored [in, out].
// A bias of one value per column with beta = alpha = 1 goes to the kernel; any other bias that
// broadcasts to [M, N], or other beta/alpha, is applied after the product.
void addmm(OpCall& c) {
  const Tensor& bias = c.tensor(0);
  const Tensor& x = c.tensor(1);
  const Tensor& w = c.tensor(2);
  if (x.ndim != 2 || w.ndim != 2) c.fail("addmm needs 2-d operands");
  const double beta = c.real(3), alpha = c.real(4);
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[1];
  if (w.shape[0] != K) c.fail("addmm shapes " + x.describe() + " and " + w.describe() + " do not match");
  Tensor out = c.alloc(DType::f32, {M, N});
  std::array<int64_t, kMaxDims> bshape{};
  try {
    if (broadcast_shape(bias, out, bshape) != 2 || bshape[0] != M || bshape[1] != N) throw std::runtime_error("");
  } catch (const std::runtime_error&) {
    c.fail("addmm bias " + bias.describe() + " does not broadcast to [" + std::to_string(M) + ", " + std::to_string(N) + "]");
  }
  const bool row_bias = beta == 1.0 && alpha == 1.0 && bias.numel() == N && (bias.ndim == 1 || bias.shape[0] == 1);
  Scratch sx(c.ctx), sw(c.ctx), sb(c.ctx);
  Tensor xc = contiguous_as(x, DType::f32, sx);
  const bool dense = w.strides[1] == 1 && w.strides[0] == N;
  Tensor wc = dense ? w : contiguous_as(w, DType::f32, sw);
  kernels::LinearArgs a;
  a.x = xc.ptr<float>();
  a.w = wc.data;
  a.w_dtype = weight_dtype(c, wc);
  a.w_layout = kernels::WeightLayout::kn;
  a.packed = packed_for(c, wc.data, N, K, kernels::WeightLayout::kn);
  a.bias = row_bias ? contiguous_as(bias, DType::f32, sb).ptr<float>() : nullptr;
  a.y = out.ptr<float>();
  a.m = M;
  a.n = N;
  a.k = K;
  kernels::linear(a);
  if (!row_bias) kernels::scale_add(alpha, beta, view(bias), view(out));
  set_out(c, out);
}

// Batched matmul of activations with broadcasting over batch dims: [..., M, K] @ [..., K, N].
void matmul(OpCall& c) {
  Tensor a = c.tensor(0), b = c.tensor(1);
  if (a.ndim < 1 || b.ndim < 1) c.fail("matmul of a 0-d operand");
  // torch.matmul: a 1-d left operand is a row [1, K], a 1-d right one a column [K, 1]; the
  // added dim is dropped from the result.
  const bool a_vec = a.ndim == 1, b_vec = b.ndim == 1;
  if (a_vec) {
    a.shape[1] = a.shape[0], a.strides[1] = a.strides[0];
    a.shape[0] = 1, a.strides[0] = 0, a.ndim = 2;
  }
  if (b_vec) {
    b.shape[1] = 1, b.strides[1] = 0, b.ndim = 2;
  }
  const int64_t M = a.shape[a.ndim - 2], K = a.shape[a.ndim - 1], N = b.shape[b.ndim - 1];
  if (b.shape[b.ndim - 2] != K) c.fail("matmul shapes " + a.describe() + " and " + b.describe() + " do not match");
  // Broadcast batch dims.
  Tensor ab = a, bb = b;
  ab.ndim -= 2;
  bb.ndim -= 2;
  std::array<int64_t, kMaxDims> shape{};
  int nb = broadcast_shape(ab, bb, shape);
  shape[nb] = M;
  shape[nb + 1] = N;
  Tensor out = c.alloc(DType::f32, std::span<const int64_t>(shape.data(), nb + 2));
  Tensor ob = out;
  ob.ndim = nb;
  // The operands as [batch.., M, K] and [batch.., K, N] views with batch strides broadcast to out's.
  kernels::Strided va = view(a), vb = view(b);
  va.ndim = vb.ndim = nb + 2;
  va.strides = kernels::broadcast_strides(view(ab), view(ob));
  vb.strides = kernels::broadcast_strides(view(bb), view(ob));
  va.shape[nb] = M, va.shape[nb + 1] = K, va.strides[nb] = a.strides[a.ndim - 2], va.strides[nb + 1] = a.strides[a.ndim - 1];
  vb.shape[nb] = K, vb.shape[nb + 1] = N, vb.strides[nb] = b.strides[b.ndim - 2], vb.strides[nb + 1] = b.strides[b.ndim - 1];
  kernels::matmul_strided(va, vb, shape.data(), nb, out.ptr<float>());
  // Contiguous, so dropping the added size-1 dims changes the header alone.
  if (a_vec && b_vec) {
    out.ndim -= 2;
  } else if (b_vec) {
    out.ndim -= 1;  // [..., M, 1] -> [..., M]
  } else if (a_vec) {  // [..., 1, N] -> [..., N]
    out.shape[out.ndim - 2] = out.shape[out.ndim - 1];
    out.strides[out.ndim - 2] = out.strides[out.ndim - 1];
    out.ndim -= 1;
  }
  set_out(c, out);
}

// baddbmm(self, batch1 [B,M,K], batch2 [B,K,N], beta, alpha) = beta * self + alpha * bmm (self
// broadcast to [B,M,N]; beta 0 ignores it, as torch does): attention written by hand adds its
// mask or ALiBi bias this way.
void baddbmm(OpCall& c) {
  const Tensor self = c.tensor(0);
  const double beta = c.real(3), alpha = c.real(4);
  OpCall product{c.ctx, c.node, c.args.subspan(1, 2), c.out};  // bmm of arguments 1 and 2 into c.out
  matmul(product);
  kernels::scale_add(alpha, beta, view(self), view(c.out.t));
}

// Rows [first, first + V) of a vocabulary looked up in weight [V, H] (contiguous or block-quantized)
// -> [..., H] in f32, rows converted from the weight dtype. `masked` (a vocab-parallel slice,
// src/dist): an id outside this rank's rows gives a zero row (another rank holds it; the all-reduce
// after sums them). Otherwise an id outside the table is an error.
void lookup_rows(OpCall& c, const Tensor& w, int64_t first, bool masked);

// embedding(weight [V, H], indices) -> [..., H] in f32.
void embedding(OpCall& c) {
  const Tensor& w = c.tensor(0);
  if (w.ndim != 2) c.fail("embedding weight must be 2-d, got " + w.describe());
  if (!w.is_contiguous() && !w.quant) {  // a view of a table (a transpose): look up in a dense copy
    Scratch sw(c.ctx);
    Tensor copy = c.tensor(0);
    Tensor wc = contiguous_as(copy, DType::f32, sw);
    lookup_rows(c, wc, 0, false);
    return;
  }
  lookup_rows(c, w, 0, false);
}

void lookup_rows(OpCall& c, const Tensor& w, int64_t first, bool masked) {
  const Tensor& idx = c.tensor(1);
  const int64_t V = w.shape[0], H = w.shape[1];
  std::array<int64_t, kMaxDims> shape{};
  for (int d = 0; d < idx.ndim; ++d) shape[d] = idx.shape[d];
  shape[idx.ndim] = H;
  Tensor out = c.alloc(DType::f32, std::span<const int64_t>(shape.data(), idx.ndim + 1));
  Scratch s(c.ctx);
  Tensor ic = contiguous_as(idx, DType::i64, s);
  kernels::EmbeddingArgs a;
  a.table = w.data;
  a.dtype = w.quant ? kernels::DType::f32 : weight_dtype(c, w);
  a.quant = w.quant;
  a.rows = V;
  a.width = H;
  a.first = first;
  a.masked = masked;
  a.ids = ic.ptr<int64_t>();
  a.n = ic.numel();
  a.out = out.ptr<float>();
  if (const int64_t bad = kernels::embedding_lookup(a); bad >= 0)
    c.fail("token id " + std::to_string(a.ids[bad]) + " is outside the vocabulary of " + std::to_string(V));
  set_out(c, out);
}

// fuselm.vocab_embedding(weight [V/N, H], indices, first): this rank's slice of a vocab-parallel
// table (rows [first, first + V/N) of the full one), other ids zero.
void vocab_embedding(OpCall& c) { lookup_rows(c, c.tensor(0), c.integer("first"), true); }

}  // namespace

void register_matmul_ops(OpRegistry& r) {
  r.add("aten.linear.default", linear);
  r.add("aten.addmm.default", addmm);
  r.add("aten.matmul.default", matmul);
  r.add("aten.bmm.default", matmul);
  r.add("aten.mm.default", matmul);
  r.add("aten.baddbmm.default", baddbmm);
  r.add("aten.embedding.default", embedding);
  r.add("fuselm.vocab_embedding.default", vocab_embedding);
}

}  // namespace fuselm::runtime::ops
