// Bandwidth probe read loop compiled for the avx2 path (body in probe_impl.h).
#include "bench/probe_kernels.h"
#include "kernels/cpu/simd.h"

#if FUSELM_X86_ISAS
#include "kernels/cpu/isa_begin_avx2.inc"
#include "kernels/cpu/simd_avx2.h"
#include "bench/probe_impl.h"
#include "kernels/cpu/isa_end.inc"

namespace fuselm::bench {
const ProbeKernels kProbeKernelsAvx2 = make_probe_kernels<kernels::Isa::avx2>();
}  // namespace fuselm::bench
#endif
