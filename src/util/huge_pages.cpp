// move_to_huge_pages: one madvise(MADV_HUGEPAGE) mapping for a set of tensors (see huge_pages.h).
#include "fbt/util/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "fbt/util/cpu_allocator.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

constexpr uintptr_t kHugePage = uintptr_t(2) << 20;
constexpr size_t kOffsetAlign = 64;

uintptr_t round_up(uintptr_t v, uintptr_t to) { return (v + to - 1) / to * to; }
uintptr_t page_size() { return uintptr_t(::sysconf(_SC_PAGESIZE)); }

/// One anonymous mapping of `bytes` (a page multiple) starting at a 2 MiB boundary; unmapped when
/// the last tensor in it is freed.
class Mapping {
 public:
  explicit Mapping(size_t bytes) : bytes_(bytes) {
    // Map 2 MiB more than needed, then unmap the unaligned head and the tail.
    const size_t over = bytes + kHugePage;
    void* raw = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
      throw Error("cannot map " + std::to_string(bytes >> 20) +
                  " MiB for the model's weights: " + std::strerror(errno));
    const auto start = reinterpret_cast<uintptr_t>(raw), aligned = round_up(start, kHugePage);
    if (aligned > start) ::munmap(raw, aligned - start);
    if (start + over > aligned + bytes)
      ::munmap(reinterpret_cast<void*>(aligned + bytes), start + over - aligned - bytes);
    base_ = reinterpret_cast<char*>(aligned);
#ifdef MADV_HUGEPAGE
    ::madvise(base_, bytes_, MADV_HUGEPAGE);  // a request: where THP is off this fails and pages stay 4 KiB
#endif
  }
  ~Mapping() { ::munmap(base_, bytes_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* base() const { return base_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
};

/// The deleter context of one tensor's storage: its bytes in a Mapping.
struct Slice {
  std::shared_ptr<Mapping> mapping;
  char* data;
  size_t bytes;
};

/// Storage deleter: returns the whole pages inside the slice to the kernel, then drops the slice's
/// reference to the mapping.
void release_slice(void* context) {
  auto* slice = static_cast<Slice*>(context);
  const uintptr_t page = page_size(), begin = round_up(reinterpret_cast<uintptr_t>(slice->data), page),
                  end = (reinterpret_cast<uintptr_t>(slice->data) + slice->bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  delete slice;
}

}  // namespace

void move_to_huge_pages(const std::vector<torch::Tensor>& tensors, bool copy) {
  size_t total = 0;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (!t.device().is_cpu() || !t.is_contiguous())
      throw Error("move_to_huge_pages: expected contiguous CPU tensors (got " + std::string(t.toString()) + ")");
    total = round_up(total, kOffsetAlign) + t.nbytes();
  }
  if (total == 0) return;
  auto mapping = std::make_shared<Mapping>(round_up(total, page_size()));
  torch::NoGradGuard no_grad;
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    offset = round_up(offset, kOffsetAlign);
    char* data = mapping->base() + offset;
    if (copy) std::memcpy(data, t.data_ptr(), t.nbytes());
    auto* slice = new Slice{mapping, data, t.nbytes()};
    c10::DataPtr ptr(data, slice, &release_slice, c10::Device(c10::kCPU));
    c10::Storage storage(c10::Storage::use_byte_size_t(), t.nbytes(), std::move(ptr), nullptr, /*resizable=*/false);
    auto moved = torch::empty({0}, t.options()).set_(std::move(storage), 0, t.sizes(), t.strides());
    t.set_data(moved);  // the old storage goes here unless held elsewhere
    offset += t.nbytes();
    if (copy) release_free_cpu_blocks();  // before the next copy touches its new pages
  }
  release_free_cpu_blocks();
}

std::shared_ptr<uint8_t> huge_page_bytes(size_t bytes) {
  auto mapping = std::make_shared<Mapping>(round_up(std::max<size_t>(bytes, 1), page_size()));
  return std::shared_ptr<uint8_t>(mapping, reinterpret_cast<uint8_t*>(mapping->base()));
}

bool in_huge_page_mapping(const torch::Tensor& t) {
  return t.defined() && t.has_storage() && t.storage().data_ptr().get_deleter() == &release_slice;
}

}  // namespace fbt
