// How the process's CPU memory allocator treats the large, short-lived blocks of libtorch.
#pragma once

namespace fbt {

/// Keeps freed CPU blocks of up to 1 GiB in the process instead of returning them to the
/// kernel. libtorch allocates CPU tensors with malloc; glibc serves blocks above its mmap
/// threshold (128 KiB, rising to at most 32 MiB) with fresh mmap()s and unmaps them on free, so
/// a training step that allocates and frees its activations (tens of MB per layer and pass)
/// page-faults and zero-fills all of them again on every step. Raising the mmap threshold and
/// the trim threshold to 1 GiB lets freed activations be reused: on the 2-core CI VM this
/// takes the `small` K=1 training step from ~980 to ~1500 tokens/s (`fbt bench`, 1 thread),
/// at the price of the process's RSS staying at its high-water mark. Call once, at start-up,
/// before any tensor exists. Returns false (and changes nothing) where the C library is not
/// glibc. Equivalent for other processes (the PyTorch reference): the environment variable
/// GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=1073741824.
bool keep_freed_cpu_blocks();

/// Hands the free pages glibc's heap holds back to the kernel now (malloc_trim(0)): after freeing
/// large blocks that will not be reused (weights moved or quantised), which keep_freed_cpu_blocks
/// would otherwise keep resident. A no-op where the C library is not glibc.
void release_free_cpu_blocks();

}  // namespace fbt
