#pragma once
// Weights read in place from a mapped checkpoint sit on the page cache's pages, 4 KiB ones unless
// the file system hands out PMD-sized folios (ext4 here did not: FilePmdMapped 0 for a 538 MB
// safetensors file). Decode streams every weight once per token, and a 4 KiB page is a TLB miss and
// a stop for the hardware prefetchers; so a large tensor is copied once at load into an owned
// buffer on huge pages (base/large_alloc.h) and its mapped pages are dropped from the process.
#include <cstddef>
#include <vector>

#include "weights/aligned_buffer.h"

namespace fuselm::weights {

/// The bytes a parameter should read for the `bytes` mapped at `mapped`: `mapped` itself, or, when
/// they span at least 2 MiB and huge pages are advised (FUSELM_HUGE_PAGES is not 0), a copy in a new
/// buffer appended to `buffers`; then the mapped pages wholly inside the range are released
/// (MADV_DONTNEED: the page cache keeps them, a later read faults them back) and `owned` is set.
const void* huge_page_copy(const void* mapped, size_t bytes, std::vector<AlignedBuffer>& buffers, bool& owned);

}  // namespace fuselm::weights
