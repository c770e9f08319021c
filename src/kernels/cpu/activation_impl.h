// Activation bodies over Vec<Isa> (internal; included like norm_impl.h: it brings simd_math.h).
//
// activation.cc includes it for the generic table; CMake writes the avx2 and avx512 tables from the
// line below (build/isa/activation_<isa>.cc from isa_table.cc.in).
// isa-table: ActivationKernels make_activation_kernels avx2 avx512
#include "kernels/cpu/activation_kernels.h"
#include "kernels/cpu/simd_math.h"
namespace fuselm::kernels {
namespace {  // NOLINT

template <class V, class F>
FUSELM_INLINE void map_unary(const float* x, float* y, int64_t n, F f) {
  constexpr int W = V::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, f(V::load(x + i)));
  if (i < n) {
    const int r = static_cast<int>(n - i);
    V::storen(y + i, f(V::loadn(x + i, r)), r);
  }
}

template <class V, class F>
FUSELM_INLINE void map_binary(const float* a, const float* b, float* y, int64_t n, F f) {
  constexpr int W = V::W;
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(y + i, f(V::load(a + i), V::load(b + i)));
  if (i < n) {
    const int r = static_cast<int>(n - i);
    V::storen(y + i, f(V::loadn(a + i, r), V::loadn(b + i, r)), r);
  }
}

template <Isa I>
void unary_impl(UnaryOp op, const float* x, float* y, int64_t n) {
  using V = Vec<I>;
  using R = typename V::R;
  switch (op) {
    case UnaryOp::exp: return map_unary<V>(x, y, n, [](R v) { return vexp<V>(v); });
    case UnaryOp::tanh: return map_unary<V>(x, y, n, [](R v) { return vtanh<V>(v); });
    case UnaryOp::sigmoid: return map_unary<V>(x, y, n, [](R v) { return vsigmoid<V>(v); });
    case UnaryOp::silu: return map_unary<V>(x, y, n, [](R v) { return vsilu<V>(v); });
    case UnaryOp::gelu: return map_unary<V>(x, y, n, [](R v) { return vgelu<V>(v); });
    case UnaryOp::gelu_tanh: return map_unary<V>(x, y, n, [](R v) { return vgelu_tanh<V>(v); });
  }
}

template <Isa I>
void act_and_mul_impl(Act act, const float* a, const float* b, float* y, int64_t n) {
  using V = Vec<I>;
  using R = typename V::R;
  switch (act) {
    case Act::silu:
      return map_binary<V>(a, b, y, n, [](R u, R v) { return V::mul(vsilu<V>(u), v); });
    case Act::gelu:
      return map_binary<V>(a, b, y, n, [](R u, R v) { return V::mul(vgelu<V>(u), v); });
    case Act::gelu_tanh:
      return map_binary<V>(a, b, y, n, [](R u, R v) { return V::mul(vgelu_tanh<V>(u), v); });
  }
}

template <Isa I>
constexpr ActivationKernels make_activation_kernels() {
  return {&unary_impl<I>, &act_and_mul_impl<I>};
}

}  // namespace
}  // namespace fuselm::kernels
