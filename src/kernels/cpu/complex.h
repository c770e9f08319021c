#pragma once
// Complex arithmetic of rotary embeddings written with complex numbers (c64: interleaved float
// pairs; aten.polar, the complex aten.mul).
//
//   polar(abs, angle, out):  out = abs·(cos angle + i sin angle), abs and angle (any real dtype of
//     strided.h) broadcast to out, out contiguous c64; computed in double.
//   complex_mul(a, b, out):  out = a·b with broadcasting, out contiguous c64; a real operand (c64
//     or not) has no imaginary part; computed in double.
#include "kernels/cpu/strided.h"

namespace fuselm::kernels {

void polar(const Strided& abs, const Strided& angle, const Strided& out);
void complex_mul(const Strided& a, const Strided& b, const Strided& out);

}  // namespace fuselm::kernels
