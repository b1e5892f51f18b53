// Weights on transparent huge pages: one 2 MiB-aligned mapping for a model's parameters.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace fbt {

/// Moves the storage of `tensors` (contiguous CPU tensors; undefined ones are skipped) into one
/// anonymous mapping aligned to 2 MiB on which transparent huge pages are requested (Linux
/// madvise(MADV_HUGEPAGE); Documentation/admin-guide/mm/transhuge.rst: with the common setting
/// `madvise`, only such memory gets them). Each tensor keeps its identity (Tensor::set_data: a
/// module's parameter stays the same parameter, the optimiser's references stay valid) and its
/// shape; with `copy` its values too, else its contents are zero (for a caller about to overwrite
/// them, e.g. reading a checkpoint). Tensors that share memory (views of one storage) each get a
/// copy of their own, so pass only tensors that do not (a module's parameters). Each old storage
/// is freed as soon as its tensor has moved (unless something else still holds it; glibc's heap
/// then hands the pages back, malloc_trim), so the resident peak stays the tensors' bytes plus the
/// largest one.
///
/// Why: a batch-1 decode step streams every weight once; on 4 KiB pages it takes a TLB miss per
/// 4 KiB (and the hardware prefetchers stop at each page boundary). On the 2-core EPYC VM the
/// same matrix-vector sweep over `llama-134m`'s 438 MB reads ~20 GB/s from 4 KiB pages and ~28
/// GB/s from huge pages (docs/LOG.md, 2026-12-03).
///
/// Memory: the mapping is the tensors' bytes (each at a 64-byte offset) rounded up to 4 KiB; its
/// last partial 2 MiB stays on 4 KiB pages, so nothing is wasted beyond that rounding. When a tensor's
/// storage is freed (e.g. CpuDecoder releasing an fp32 matrix it has quantised), the whole pages
/// inside its bytes go back to the kernel at once (MADV_DONTNEED); the mapping itself goes with
/// the last tensor. Where huge pages are off (`never`) or the system is not Linux, this is still
/// one mapping on ordinary pages. Throws fbt::Error for a tensor that is not contiguous or not on
/// the CPU (before moving any) and when the mapping cannot be made (out of memory).
void move_to_huge_pages(const std::vector<torch::Tensor>& tensors, bool copy = true);

/// `bytes` of zeroed memory at the start of a new such mapping (rounded up to 4 KiB), unmapped
/// when the last copy of the pointer goes: for weights that are not tensors (QuantMatrix blocks).
/// Throws fbt::Error when the mapping cannot be made.
std::shared_ptr<uint8_t> huge_page_bytes(size_t bytes);

/// Whether `t`'s data lies in a mapping made by move_to_huge_pages.
bool in_huge_page_mapping(const torch::Tensor& t);

}  // namespace fbt
