// Vectorised transcendental functions over Vec<Isa> (internal; include like simd_avx*.h: after
// simd.h, and for an AVX path inside its level's target region). The generic path calls libm.
//
// Accuracy (fp32, vs double): exp ~1 ulp; tanh, sigmoid, silu, gelu_tanh a few ulp; erfc from
// Numerical Recipes' erfcc (fractional error < 1.2e-7 in exact arithmetic), so gelu keeps its
// relative accuracy in the far negative tail.
namespace fuselm::kernels {
namespace {  // NOLINT

template <class V>
FUSELM_INLINE typename V::R vexp(typename V::R x) {
  return V::exp(x);
}

template <class V>
FUSELM_INLINE typename V::R vsigmoid(typename V::R x) {
  if constexpr (V::isa == Isa::generic) {
    return 1.f / (1.f + std::exp(-x));
  } else {
    return V::div(V::set1(1.f), V::add(V::set1(1.f), V::exp(V::neg(x))));
  }
}

template <class V>
FUSELM_INLINE typename V::R vsilu(typename V::R x) {
  if constexpr (V::isa == Isa::generic) {
    return x / (1.f + std::exp(-x));
  } else {
    return V::div(x, V::add(V::set1(1.f), V::exp(V::neg(x))));
  }
}

template <class V>
FUSELM_INLINE typename V::R vtanh(typename V::R x) {
  if constexpr (V::isa == Isa::generic) {
    return std::tanh(x);
  } else {
    using R = typename V::R;
    const R ax = V::min(V::set1(9.f), V::abs(x));  // tanh(9) rounds to 1; keeps NaN
    // |x| < 0.4: Taylor series to x^15 (truncation < 1e-9 relative)
    const R x2 = V::mul(x, x);
    R p = V::set1(-929569.f / 638512875.f);
    p = V::fma(p, x2, V::set1(21844.f / 6081075.f));
    p = V::fma(p, x2, V::set1(-1382.f / 155925.f));
    p = V::fma(p, x2, V::set1(62.f / 2835.f));
    p = V::fma(p, x2, V::set1(-17.f / 315.f));
    p = V::fma(p, x2, V::set1(2.f / 15.f));
    p = V::fma(p, x2, V::set1(-1.f / 3.f));
    const R small = V::fma(V::mul(p, x2), x, x);
    // otherwise (e^2a - 1) / (e^2a + 1), a = |x|, with the sign of x
    const R e = V::exp(V::add(ax, ax));
    const R big = V::div(V::sub(e, V::set1(1.f)), V::add(e, V::set1(1.f)));
    const R signed_big = V::select(V::lt(x, V::zero()), V::neg(big), big);
    return V::select(V::lt(V::abs(x), V::set1(0.4f)), small, signed_big);
  }
}

// gelu(x) = x/2 · (1 + erf(x/√2)) = x/2 · erfc(-x/√2), with erfc(z), z = |x|/√2 >= 0, from
// Numerical Recipes' erfcc: t·exp(-z² + P(t)), t = 1/(1 + z/2). z² = x²/2 is formed exactly from
// x (hi + lo with an FMA) so that the far negative tail keeps its relative accuracy.
template <class V>
FUSELM_INLINE typename V::R vgelu(typename V::R x) {
  if constexpr (V::isa == Isa::generic) {
    return 0.5f * x * static_cast<float>(std::erfc(-static_cast<double>(x) * 0.70710678118654752));
  } else {
    using R = typename V::R;
    const R ax = V::min(V::set1(30.f), V::abs(x));  // erfc(30/√2) underflows to 0; keeps NaN
    const R z = V::mul(ax, V::set1(0.70710678118654752f));
    const R t = V::div(V::set1(1.f), V::fma(V::set1(0.5f), z, V::set1(1.f)));
    R p = V::set1(0.17087277f);
    p = V::fma(p, t, V::set1(-0.82215223f));
    p = V::fma(p, t, V::set1(1.48851587f));
    p = V::fma(p, t, V::set1(-1.13520398f));
    p = V::fma(p, t, V::set1(0.27886807f));
    p = V::fma(p, t, V::set1(-0.18628806f));
    p = V::fma(p, t, V::set1(0.09678418f));
    p = V::fma(p, t, V::set1(0.37409196f));
    p = V::fma(p, t, V::set1(1.00002368f));
    p = V::fma(p, t, V::set1(-1.26551223f));
    const R hi = V::mul(ax, ax);
    const R lo = V::fma(ax, ax, V::neg(hi));  // x² = hi + lo exactly
    const R half = V::set1(0.5f);
    const R e = V::mul(t, V::exp(V::sub(V::sub(p, V::mul(half, lo)), V::mul(half, hi))));
    const R c = V::select(V::lt(x, V::zero()), e, V::sub(V::set1(2.f), e));
    return V::mul(V::mul(half, x), c);
  }
}

// gelu_tanh(x) = x/2 * (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3)
template <class V>
FUSELM_INLINE typename V::R vgelu_tanh(typename V::R x) {
  constexpr float k2 = 2.f * 0.79788456080286536f;  // 2 * sqrt(2/pi)
  if constexpr (V::isa == Isa::generic) {
    const float u2 = k2 * (x + 0.044715f * x * x * x);
    return x / (1.f + std::exp(-u2));
  } else {
    using R = typename V::R;
    const R x2 = V::mul(x, x);
    const R u2 = V::mul(V::mul(V::set1(k2), x), V::fma(V::set1(0.044715f), x2, V::set1(1.f)));
    return V::div(x, V::add(V::set1(1.f), V::exp(V::neg(u2))));
  }
}

}  // namespace
}  // namespace fuselm::kernels
