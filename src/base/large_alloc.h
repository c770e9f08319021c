#pragma once
// Memory for the large buffers that kernels stream every token: owned weights, weights packed for a
// kernel, KV caches. A buffer of at least 2 MiB is an anonymous mapping aligned to 2 MiB and
// advised MADV_HUGEPAGE, so that Linux backs it with transparent huge pages where the system allows
// it (THP "madvise" or "always"). Small pages cost decode bandwidth: a GEMV streams weights front
// to back, and every 4 KiB page is a TLB miss and a point where the hardware prefetchers stop.
// On Zen 4 with THP "madvise" (session 7), llama.cpp's weights came as huge pages for free (a
// mapped GGUF in a page cache of large folios) and fuselm's converted weights did not.
// FUSELM_HUGE_PAGES=0 turns the advice off (plain 4 KiB pages, for comparison).
#include <cstddef>

namespace fuselm {

/// At least `bytes` bytes, 64-byte aligned (2 MiB aligned from 2 MiB up), uninitialized. Throws
/// std::bad_alloc. Free with free_large(p, bytes), with the same `bytes`.
void* allocate_large(size_t bytes);
void free_large(void* p, size_t bytes) noexcept;

/// Whether allocate_large advises huge pages (FUSELM_HUGE_PAGES is not "0"; read once).
bool huge_pages_advised();

}  // namespace fuselm
