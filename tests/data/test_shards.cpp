// Token shards (header layout, validation errors) and the random / sequential batch loaders.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "fbt/data/shards.h"
#include "fbt/util/error.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

using testing::TempDir;

/// Writes tokens 0, 1, ..., n-1 (vocab n): a token's value is its position.
std::string write_iota(const fs::path& dir, int64_t n, const std::string& name = "iota.bin") {
  const std::string path = (dir / name).string();
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  ShardWriter w(path, n);
  w.append(ids);
  w.close();
  return path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <class T>
T field(const std::string& bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

using testing::expect_error;

TEST(DataShard, HeaderLayoutAndReadBack) {
  TempDir dir;
  const std::string path = (dir.path / "s.bin").string();
  const std::vector<int64_t> ids = {0, 1, 299, 42, 7};
  ShardWriter w(path, 300);
  w.append(ids);
  w.close();
  const std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 32u + 5 * 2);
  EXPECT_EQ(std::memcmp(bytes.data(), "FBTTOKS\0", 8), 0);
  EXPECT_EQ(field<uint32_t>(bytes, 8), 1u);     // version
  EXPECT_EQ(field<uint32_t>(bytes, 12), 300u);  // vocab
  EXPECT_EQ(field<uint32_t>(bytes, 16), 1u);    // uint16
  EXPECT_EQ(field<uint32_t>(bytes, 20), 0u);    // reserved
  EXPECT_EQ(field<uint64_t>(bytes, 24), 5u);    // count
  EXPECT_EQ(field<uint16_t>(bytes, 32 + 2 * 2), 299);

  TokenShard s = TokenShard::open(path, 300);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.vocab_size(), 300);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(s.at(static_cast<int64_t>(i)), ids[i]);
  EXPECT_THROW(s.at(5), std::out_of_range);
}

TEST(DataShard, LargeVocabUsesUint32) {
  TempDir dir;
  const std::string path = (dir.path / "big.bin").string();
  ShardWriter w(path, 70'000);
  w.append({69'999, 65'536, 3});
  w.close();
  const std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 32u + 3 * 4);
  EXPECT_EQ(field<uint32_t>(bytes, 16), 2u);
  TokenShard s = TokenShard::open(path, 70'000);
  EXPECT_EQ(s.at(0), 69'999);
  EXPECT_EQ(s.at(1), 65'536);
  EXPECT_EQ(shard_dtype_for_vocab(65'535), 1u);
  EXPECT_EQ(shard_dtype_for_vocab(65'536), 2u);
}

TEST(DataShard, WriterRejectsOutOfVocabIds) {
  TempDir dir;
  ShardWriter w((dir.path / "s.bin").string(), 10);
  EXPECT_THROW(w.append({10}), Error);
  EXPECT_THROW(w.append({-1}), Error);
}

TEST(DataShard, BadMagicVersionAndVocabNameTheFile) {
  TempDir dir;
  const std::string path = write_iota(dir.path, 50);
  std::string bytes = read_bytes(path);

  std::string bad = bytes;
  bad[0] = 'X';
  write_bytes(path, bad);
  expect_error([&] { TokenShard::open(path); }, {path, "magic"});

  bad = bytes;
  bad[8] = 2;  // version 2
  write_bytes(path, bad);
  expect_error([&] { TokenShard::open(path); }, {path, "version 2"});

  write_bytes(path, bytes);
  expect_error([&] { TokenShard::open(path, 51); }, {path, "vocab size 50", "expected 51"});
  EXPECT_NO_THROW(TokenShard::open(path, 50));
  expect_error([&] { TokenShard::open((dir.path / "missing.bin").string()); }, {"missing.bin"});
}

TEST(DataShard, TruncatedFileReportsExpectedAndActualSize) {
  TempDir dir;
  const std::string path = write_iota(dir.path, 50);  // 32 + 100 bytes
  std::string bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, bytes.size() - 3));
  expect_error([&] { TokenShard::open(path); }, {path, "50 tokens", "132 bytes", "129 bytes"});
  write_bytes(path, bytes.substr(0, 20));
  expect_error([&] { TokenShard::open(path); }, {path, "20 bytes"});
}

TEST(DataShard, WriterNotClosedLeavesARefusedFile) {
  TempDir dir;
  const std::string path = (dir.path / "open.bin").string();
  {
    ShardWriter w(path, 100);
    w.append({1, 2, 3});
  }
  expect_error([&] { TokenShard::open(path); }, {path, "0 tokens"});
}

TEST(DataLoader, TargetsAreInputsShiftedByOneWindowOfTheShard) {
  TempDir dir;
  TokenShard shard = TokenShard::open(write_iota(dir.path, 1000));
  BatchLoader loader(shard, 4, 16, 123);
  for (int step = 0; step < 5; ++step) {
    auto [x, y] = loader.next();
    ASSERT_EQ(x.sizes(), (std::vector<int64_t>{4, 16}));
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{4, 16}));
    EXPECT_EQ(x.scalar_type(), torch::kInt64);
    for (int64_t b = 0; b < 4; ++b) {
      const int64_t start = x[b][0].item<int64_t>();  // iota: value == position
      ASSERT_GE(start, 0);
      ASSERT_LE(start, 1000 - 17);
      for (int64_t t = 0; t < 16; ++t) {
        EXPECT_EQ(x[b][t].item<int64_t>(), shard.at(start + t));
        EXPECT_EQ(y[b][t].item<int64_t>(), shard.at(start + t + 1));
      }
    }
  }
  EXPECT_EQ(loader.batches_drawn(), 5);
}

TEST(DataLoader, SeedAndRankDetermineTheStream) {
  TempDir dir;
  TokenShard shard = TokenShard::open(write_iota(dir.path, 5000));
  BatchLoader a(shard, 8, 32, 7), b(shard, 8, 32, 7);
  BatchLoader other_seed(shard, 8, 32, 8), rank1(shard, 8, 32, 7, 1, 2);
  BatchLoader rank0_of_2(shard, 8, 32, 7, 0, 2);
  for (int i = 0; i < 3; ++i) {
    auto [xa, ya] = a.next();
    auto [xb, yb] = b.next();
    EXPECT_TRUE(torch::equal(xa, xb));
    EXPECT_TRUE(torch::equal(ya, yb));
    EXPECT_FALSE(torch::equal(xa, other_seed.next().first));
    EXPECT_FALSE(torch::equal(xa, rank1.next().first));
    EXPECT_TRUE(torch::equal(xa, rank0_of_2.next().first));  // world size alone does not reseed
  }
  EXPECT_THROW(BatchLoader(shard, 8, 32, 7, 2, 2), Error);
}

TEST(DataLoader, ResumeFromStateRepeatsTheNextBatches) {
  TempDir dir;
  TokenShard shard = TokenShard::open(write_iota(dir.path, 3000));
  BatchLoader a(shard, 4, 20, 99, 1, 4);
  for (int i = 0; i < 3; ++i) a.next();
  const nlohmann::json saved = nlohmann::json::parse(a.state().dump());  // through text, as on disk
  EXPECT_EQ(saved["batches_drawn"], 3);
  std::vector<torch::Tensor> expected;
  for (int i = 0; i < 4; ++i) expected.push_back(a.next().first);

  BatchLoader b(shard, 4, 20, 99, 1, 4);
  b.set_state(saved);
  EXPECT_EQ(b.batches_drawn(), 3);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(torch::equal(b.next().first, expected[i])) << "batch " << i;

  BatchLoader wrong_seed(shard, 4, 20, 100, 1, 4);
  expect_error([&] { wrong_seed.set_state(saved); }, {"\"seed\""});
  BatchLoader wrong_seq(shard, 4, 21, 99, 1, 4);
  expect_error([&] { wrong_seq.set_state(saved); }, {"\"seq\""});
  nlohmann::json broken = saved;
  broken.erase("rng");
  EXPECT_THROW(b.set_state(broken), Error);
}

// Data-parallel ranks share one stream: skip() passes over exactly the batch next() would read.
TEST(DataLoader, SkipPassesOverTheBatchNextWouldRead) {
  TempDir dir;
  TokenShard shard = TokenShard::open(write_iota(dir.path, 3000));
  BatchLoader reader(shard, 4, 20, 5), skipper(shard, 4, 20, 5);
  reader.next();
  skipper.skip();
  EXPECT_EQ(skipper.batches_drawn(), 1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(reader.next().first, skipper.next().first)) << "batch " << i;
  EXPECT_EQ(skipper.state()["rng"], reader.state()["rng"]);
}

TEST(DataLoader, ShardSmallerThanOneWindowIsRefused) {
  TempDir dir;
  const std::string path = write_iota(dir.path, 10);
  TokenShard shard = TokenShard::open(path);
  expect_error([&] { BatchLoader(shard, 2, 10, 0); }, {path, "10 tokens", "11"});
  EXPECT_NO_THROW(BatchLoader(shard, 2, 9, 0));
}

TEST(DataSequential, WindowsAreConsecutiveAndCoverTheShard) {
  TempDir dir;
  TokenShard shard = TokenShard::open(write_iota(dir.path, 103));
  SequentialLoader loader(shard, 4, 10);
  EXPECT_EQ(loader.num_windows(), 10);  // floor((103 - 1) / 10)
  std::vector<int64_t> sizes;
  int64_t window = 0;
  while (auto batch = loader.next()) {
    auto& [x, y] = *batch;
    sizes.push_back(x.size(0));
    for (int64_t i = 0; i < x.size(0); ++i, ++window)
      for (int64_t t = 0; t < 10; ++t) {
        EXPECT_EQ(x[i][t].item<int64_t>(), window * 10 + t);
        EXPECT_EQ(y[i][t].item<int64_t>(), window * 10 + t + 1);
      }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(window, 10);
  EXPECT_FALSE(loader.next().has_value());
  loader.reset();
  EXPECT_EQ(loader.next()->first[0][0].item<int64_t>(), 0);
}

TEST(DataSequential, MaxTokensAndRanks) {
  TempDir dir;
  TokenShard shard = TokenShard::open(write_iota(dir.path, 103));
  SequentialLoader capped(shard, 8, 10, 35);
  EXPECT_EQ(capped.num_windows(), 3);
  const auto spread = capped.next()->first;  // 3 of the 10 windows, spread evenly: floor(w·10/3)·10
  ASSERT_EQ(spread.size(0), 3);
  EXPECT_EQ(spread[0][0].item<int64_t>(), 0);
  EXPECT_EQ(spread[1][0].item<int64_t>(), 30);
  EXPECT_EQ(spread[2][0].item<int64_t>(), 60);

  std::vector<int64_t> starts0, starts1;
  SequentialLoader r0(shard, 2, 10, -1, 0, 2), r1(shard, 2, 10, -1, 1, 2);
  while (auto b = r0.next())
    for (int64_t i = 0; i < b->first.size(0); ++i) starts0.push_back(b->first[i][0].item<int64_t>());
  while (auto b = r1.next())
    for (int64_t i = 0; i < b->first.size(0); ++i) starts1.push_back(b->first[i][0].item<int64_t>());
  EXPECT_EQ(starts0, (std::vector<int64_t>{0, 20, 40, 60, 80}));
  EXPECT_EQ(starts1, (std::vector<int64_t>{10, 30, 50, 70, 90}));
}

TEST(DataSequential, TooSmallShardIsRefused) {
  TempDir dir;
  const std::string path = write_iota(dir.path, 10);
  expect_error([&] { SequentialLoader(TokenShard::open(path), 1, 10); }, {path, "10 tokens"});
}

TEST(DataMeta, MissingOrForeignMetaIsRefused) {
  TempDir dir;
  expect_error([&] { read_dataset_meta(dir.path.string()); }, {"meta.json"});
  std::ofstream(dir.path / "meta.json") << "{\"format\": \"something-else\"}";
  expect_error([&] { read_dataset_meta(dir.path.string()); }, {"meta.json", "fbt-dataset"});
  std::ofstream(dir.path / "meta.json") << "{not json";
  expect_error([&] { read_dataset_meta(dir.path.string()); }, {"meta.json", "JSON"});
}

// Issue 21 item 9: the tokenizer block every reader relies on is checked where it is read, so
// a damaged one is an error naming the file and the field, never a raw JSON-library exception.
TEST(DataMeta, DamagedTokenizerBlockNamesTheField) {
  TempDir dir;
  const nlohmann::json good{{"format", "fbt-dataset"},
                            {"format_version", 1},
                            {"tokenizer", {{"type", "byte"}, {"vocab_size", 259}, {"eos_id", 258}}}};
  std::ofstream(dir.path / "meta.json") << good.dump();
  EXPECT_EQ(read_dataset_meta(dir.path.string()).at("tokenizer").at("vocab_size"), 259);
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {nlohmann::json{{"tokenizer", "byte"}}, "tokenizer: expected a JSON object"},
      {nlohmann::json{{"tokenizer", {{"vocab_size", "259"}}}}, "field 'vocab_size': expected an integer"},
      {nlohmann::json{{"tokenizer", {{"vocab_size", 0}}}}, "'vocab_size' is 0"},
      {nlohmann::json{{"tokenizer", {{"eos_id", 259}}}}, "'eos_id' is 259, outside [0, vocab_size 259)"},
  };
  for (const auto& [patch, expected] : cases) {
    auto meta = good;
    meta.merge_patch(patch);
    std::ofstream(dir.path / "meta.json", std::ios::trunc) << meta.dump();
    expect_error([&] { read_dataset_meta(dir.path.string()); }, {"meta.json", expected});
  }
  auto meta = good;
  meta.erase("tokenizer");
  std::ofstream(dir.path / "meta.json", std::ios::trunc) << meta.dump();
  expect_error([&] { read_dataset_meta(dir.path.string()); }, {"meta.json", "field 'tokenizer' is missing"});
}

}  // namespace
}  // namespace fbt
