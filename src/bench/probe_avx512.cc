// Bandwidth probe read loop compiled for the avx512 path (body in probe_impl.h).
#include "bench/probe_kernels.h"
#include "kernels/cpu/simd.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx512.inc"
#include "kernels/cpu/simd_avx512.h"
#include "bench/probe_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::bench {
const ProbeKernels kProbeKernelsAvx512 = make_probe_kernels<kernels::Isa::avx512>();
}  // namespace fuselm::bench
#endif
