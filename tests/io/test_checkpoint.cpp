// Model checkpoints: bitwise round trip, corrupted/truncated/mismatched files (issue #2, test 7).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fbt/io/checkpoint.h"
#include "fbt/io/safetensors.h"
#include "fbt/util/error.h"
#include "fbt/util/huge_pages.h"
#include "expect_error.h"
#include "temp_dir.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

struct CheckpointTest : ::testing::Test {
  testing::TempDir tmp;
  fs::path dir = tmp.path;
  std::string path(const std::string& name) { return (dir / name).string(); }
};

using testing::expect_error;

TEST_F(CheckpointTest, RoundTripIsBitwise) {
  auto c = ModelConfig::preset("debug");
  c.doc_separator_id = 258;
  auto model = testing::make_test_model(c);
  const nlohmann::json tok{{"type", "byte"}, {"vocab_size", 259}};
  save_model(path("m.safetensors"), model, tok, 42);
  CheckpointInfo info;
  auto loaded = load_model(path("m.safetensors"), &info);
  EXPECT_EQ(info.step, 42);
  EXPECT_EQ(info.config, c);
  EXPECT_EQ(info.tokenizer, tok);
  EXPECT_EQ(info.format_version, kCheckpointFormatVersion);
  auto a = model->named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& p : a) EXPECT_TRUE(torch::equal(p.value(), b[p.key()])) << p.key();
  // Read into the huge-page mapping load_model puts the weights in.
  for (const auto& p : b) EXPECT_TRUE(in_huge_page_mapping(p.value())) << p.key();
  // Same logits from the reloaded model.
  torch::NoGradGuard ng;
  auto tokens = torch::randint(0, 259, {1, 8}, torch::kLong);
  loaded->eval();
  EXPECT_TRUE(torch::equal(model->forward(tokens), loaded->forward(tokens)));
}

TEST_F(CheckpointTest, CorruptedAndTruncatedFilesAreRejected) {
  auto model = testing::make_test_model();
  const auto p = path("m.safetensors");
  save_model(p, model, {}, 1);
  const auto size = fs::file_size(p);
  fs::copy_file(p, path("trunc.safetensors"));
  fs::resize_file(path("trunc.safetensors"), size - 10);
  expect_error([&] { load_model(path("trunc.safetensors")); }, {"trunc.safetensors", "truncated"});

  fs::copy_file(p, path("flip.safetensors"));
  {
    std::fstream f(path("flip.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(size - 100);
    char ch;
    f.read(&ch, 1);
    f.seekp(size - 100);
    ch ^= 0x40;
    f.write(&ch, 1);
  }
  expect_error([&] { load_model(path("flip.safetensors")); }, {"flip.safetensors", "corrupt"});
  expect_error([&] { load_model(path("missing.safetensors")); }, {"missing.safetensors"});
}

TEST_F(CheckpointTest, MismatchedConfigIsNamed) {
  auto model = testing::make_test_model();
  save_model(path("m.safetensors"), model, {}, 1);
  auto other = ModelConfig::preset("debug");
  other.d_ff = 192;
  FBT different(other);
  expect_error([&] { load_weights(path("m.safetensors"), different); }, {"m.safetensors", "d_ff", "176", "192"});
  other = ModelConfig::preset("debug");
  other.fusion = Fusion::GluPlusToken;
  FBT fused(other);
  expect_error([&] { load_weights(path("m.safetensors"), fused); }, {"fusion", "glu_plus_token"});
}

TEST_F(CheckpointTest, FailedSaveKeepsEarlierCheckpoint) {
  auto model = testing::make_test_model();
  const auto p = path("m.safetensors");
  save_model(p, model, {}, 1);
  const auto before = fs::file_size(p);
  EXPECT_THROW(save_model((dir / "no_such_dir" / "m.safetensors").string(), model, {}, 2), Error);
  EXPECT_EQ(read_checkpoint_info(p).step, 1);
  EXPECT_EQ(fs::file_size(p), before);
}

// Issue 21 items 9 and 11: every metadata field is checked by type and a checkpoint must state
// every setting (a missing key would silently take its default); the messages name the field.
TEST_F(CheckpointTest, DamagedMetadataFieldsAreNamed) {
  auto model = testing::make_test_model();
  const auto p = path("m.safetensors");
  save_model(p, model, {}, 1);
  const auto good = load_tensors(p);
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& m) { m["step"] = "sixty"; }, "field 'step': expected an integer"},
      {[](nlohmann::json& m) { m["format_version"] = "1"; }, "field 'format_version': expected an integer"},
      {[](nlohmann::json& m) { m["git_sha"] = 123; }, "field 'git_sha': expected a string"},
      {[](nlohmann::json& m) { m["model_config"].erase("rope_theta"); }, "model_config lacks 'rope_theta'"},
      {[](nlohmann::json& m) { m["tokenizer"] = 5; }, "field 'tokenizer' is not an object"},
  };
  for (const auto& [damage, expected] : cases) {
    auto meta = good.metadata;
    damage(meta);
    save_tensors(path("bad.safetensors"), good.tensors, meta);  // a consistent file with bad metadata
    expect_error([&] { read_checkpoint_info(path("bad.safetensors")); }, {"bad.safetensors", expected});
  }
}

// Checkpoints written before a group of config keys was added (issue 17's Llama block family,
// issue 23's input_norm and fusion_init) lack all of that group and of every later one, and
// still load with the numerics they were trained with; one lacking only some keys of a group is
// damaged.
TEST_F(CheckpointTest, CheckpointsWithoutLaterConfigKeysLoadWithTheirNumerics) {
  auto model = testing::make_test_model();
  const auto p = path("m.safetensors");
  save_model(p, model, {}, 1);
  const auto good = load_tensors(p);
  const auto groups = ModelConfig::added_key_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].front(), "block");
  EXPECT_EQ(groups[1], (std::vector<std::string>{"input_norm", "fusion_init"}));
  auto tokens = torch::randint(model->config().vocab_size, {1, 8}, torch::kLong);
  torch::NoGradGuard no_grad;
  for (size_t first = 0; first < groups.size(); ++first) {  // written before group `first`
    auto old = good.metadata;
    for (size_t g = first; g < groups.size(); ++g)
      for (const auto& key : groups[g]) old["model_config"].erase(key);
    ASSERT_FALSE(old["model_config"].contains(groups[first].front()));
    const auto file = path("old" + std::to_string(first) + ".safetensors");
    save_tensors(file, good.tensors, old);
    CheckpointInfo info;
    auto loaded = load_model(file, &info);
    EXPECT_EQ(info.config, model->config());
    EXPECT_TRUE(torch::equal(loaded->forward(tokens), model->forward(tokens)));

    auto partial = good.metadata;
    partial["model_config"].erase(groups[first].front());
    save_tensors(path("partial.safetensors"), good.tensors, partial);
    expect_error([&] { read_checkpoint_info(path("partial.safetensors")); },
                 {"partial.safetensors", "model_config lacks '" + groups[first].front() + "'"});
  }
}

}  // namespace
}  // namespace fbt
