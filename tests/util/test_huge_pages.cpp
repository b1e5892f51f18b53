// move_to_huge_pages: identity, values, alignment, the madvise request (the kernel's own account in
// /proc/self/smaps) and pages handed back when a tensor is freed (mincore).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "fbt/util/huge_pages.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {

/// The /proc/self/smaps block of the mapping holding `address` ("" if none).
std::string smaps_of(const void* address) {
  std::ifstream in("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::string line, block;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {  // a mapping's first line
      if (inside) return block;
      inside = a >= lo && a < hi;
      block.clear();
    }
    if (inside) block += line + "\n";
  }
  return inside ? block : "";
}

/// The address range ("lo-hi") of the mapping holding `address`: the first line of its smaps block.
std::string mapping_range(const void* address) {
  const std::string block = smaps_of(address);
  return block.substr(0, block.find(' '));
}

/// The system's transparent huge page mode ("always", "madvise", "never"), "" where unknown.
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto open = text.find('['), close = text.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : text.substr(open + 1, close - open - 1);
}

/// The whole pages inside [begin, end): (resident ones by mincore, all of them).
std::pair<int64_t, int64_t> resident_pages(const void* begin, const void* end) {
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page,
                  hi = reinterpret_cast<uintptr_t>(end) / page * page;
  std::vector<unsigned char> flags((hi - lo) / page);
  EXPECT_EQ(::mincore(reinterpret_cast<void*>(lo), hi - lo, flags.data()), 0);
  int64_t n = 0;
  for (auto f : flags) n += f & 1;
  return {n, int64_t(flags.size())};
}

TEST(HugePages, TensorsKeepIdentityShapeAndValuesInOneAlignedMapping) {
  auto model = testing::make_test_model();
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, model->config().vocab_size, {2, 9}, torch::kLong);
  const auto logits = model->forward(tokens);
  auto params = model->parameters();
  std::vector<torch::Tensor> before;
  std::vector<const void*> impls;
  for (const auto& p : params) {
    before.push_back(p.clone());
    impls.push_back(p.unsafeGetTensorImpl());
  }
  const auto odd = torch::randn({3, 5});     // 60 bytes: the next tensor starts at the next 64
  const auto big = torch::randn({1 << 20});  // the mapping then spans a whole 2 MiB
  params.insert(params.end(), {odd, big});
  const auto odd_values = odd.clone(), big_values = big.clone();
  move_to_huge_pages(params);
  const auto* base = static_cast<const char*>(params[0].data_ptr());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (uintptr_t(2) << 20), 0u);
  for (size_t i = 0; i + 2 < params.size(); ++i) {
    EXPECT_EQ(params[i].unsafeGetTensorImpl(), impls[i]);  // the same parameter, not a new one
    EXPECT_TRUE(params[i].requires_grad());
    EXPECT_TRUE(torch::equal(params[i], before[i]));
    EXPECT_TRUE(in_huge_page_mapping(params[i]));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(params[i].data_ptr()) % 64, 0u);
    EXPECT_EQ(mapping_range(params[i].data_ptr()), mapping_range(base)) << "one mapping for all";
  }
  EXPECT_TRUE(torch::equal(odd, odd_values));
  EXPECT_TRUE(torch::equal(big, big_values));
  EXPECT_TRUE(torch::equal(model->forward(tokens), logits));  // the model reads the moved weights
  EXPECT_FALSE(in_huge_page_mapping(torch::randn({4})));
  // The kernel's account of the mapping: huge pages may back it unless the system turned them off.
  const std::string smaps = smaps_of(base), mode = thp_mode();
  const size_t field = smaps.find("THPeligible:");
  if (field == std::string::npos || mode.empty())
    GTEST_SKIP() << "this kernel does not report THPeligible in /proc/self/smaps";
  EXPECT_EQ(std::stoi(smaps.substr(field + 12)), mode == "never" ? 0 : 1) << "THP " << mode << "\n" << smaps;
}

TEST(HugePages, WithoutCopyTheContentsAreZero) {
  std::vector<torch::Tensor> tensors{torch::ones({1000}), torch::ones({7, 3})};
  move_to_huge_pages(tensors, /*copy=*/false);
  for (const auto& t : tensors) {
    EXPECT_TRUE(in_huge_page_mapping(t));
    EXPECT_EQ(t.abs().sum().item<float>(), 0.0f);
  }
  EXPECT_EQ(tensors[1].sizes(), torch::IntArrayRef({7, 3}));
}

// A freed tensor's whole pages leave memory at once; its neighbours keep theirs.
TEST(HugePages, AFreedTensorsPagesGoBackAtOnce) {
  std::vector<torch::Tensor> tensors{torch::randn({1000}), torch::randn({4 << 20}), torch::randn({1000})};
  const auto last = tensors[2].clone();
  move_to_huge_pages(tensors);
  const auto* big = static_cast<const char*>(tensors[1].data_ptr());
  const auto* small = static_cast<const char*>(tensors[0].data_ptr());
  const auto [resident, pages] = resident_pages(big, big + tensors[1].nbytes());
  EXPECT_GT(pages, 4000);
  EXPECT_EQ(resident, pages);
  tensors[1] = torch::Tensor();  // the storage's last reference
  EXPECT_EQ(resident_pages(big, big + (int64_t(4) << 22)).first, 0);
  EXPECT_TRUE(torch::equal(tensors[2], last));              // the neighbours keep their pages and values
  EXPECT_EQ(resident_pages(small, small + 4096).first, 1);  // the first tensor starts the mapping
}

TEST(HugePages, NonContiguousOrEmptyInput) {
  move_to_huge_pages({});  // nothing to move
  move_to_huge_pages({torch::Tensor()});
  EXPECT_THROW(move_to_huge_pages({torch::randn({4, 4}).t()}), Error);
}

}  // namespace
}  // namespace fbt
