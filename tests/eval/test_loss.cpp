// evaluate_loss: pass-0 loss vs a hand-computed cross-entropy, K ≥ T passes vs the sequential
// recurrence, the CPU decode step's rows, bits per byte for the byte tokenizer, and a vocab mismatch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "fbt/eval/loss.h"
#include "fbt/infer/cpu_decoder.h"
#include "fbt/model/passes.h"
#include "fbt/util/error.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::make_test_model;

constexpr int64_t kContext = 16;

struct EvalLoss : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("fbt_evalloss_" + std::to_string(::getpid()));
  ModelConfig config = [] {
    auto c = ModelConfig::preset("debug");
    c.context = kContext;
    c.doc_separator_id = ByteTokenizer::kEos;  // document starts inside windows stay plain
    return c;
  }();
  ByteTokenizer tokenizer;
  std::vector<int64_t> stream;  // the shard's tokens: random bytes, EOS ending documents
  std::string shard_path;

  void SetUp() override {
    fs::create_directories(dir);
    std::mt19937 rng(3);
    for (int i = 0; i < 5 * kContext + 7; ++i)
      stream.push_back(rng() % 10 == 0 ? ByteTokenizer::kEos : static_cast<int64_t>(rng() % 256));
    shard_path = (dir / "val.bin").string();
    ShardWriter writer(shard_path, ByteTokenizer::kVocab);
    writer.append(stream);
    writer.close();
  }
  void TearDown() override { fs::remove_all(dir); }
};

// (a) passes=0 is the standard forward: compare with log_softmax of model->forward per window.
TEST_F(EvalLoss, PassZeroMatchesHandComputedCrossEntropy) {
  auto model = make_test_model(config);
  LossEvalOptions o;
  o.max_tokens = -1;
  o.passes = 2;
  o.batch = 2;  // 5 windows: batches of 2, 2, 1
  const auto results = evaluate_loss(model, TokenShard::open(shard_path), tokenizer, o);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].name, "passes=0");
  EXPECT_EQ(results[2].name, "passes=2");
  EXPECT_EQ(results[0].tokens, 5 * kContext);

  torch::NoGradGuard no_grad;
  double nats = 0;
  for (int64_t w = 0; w < 5; ++w) {
    const auto begin = stream.begin() + w * kContext;
    auto inputs = torch::tensor(std::vector<int64_t>(begin, begin + kContext)).unsqueeze(0);           // [1,T]
    auto targets = torch::tensor(std::vector<int64_t>(begin + 1, begin + kContext + 1)).unsqueeze(0);  // [1,T]
    auto logp = torch::log_softmax(model->forward(inputs).to(torch::kDouble), -1);                     // [1,T,V]
    nats -= logp.gather(-1, targets.unsqueeze(-1)).sum().item<double>();
  }
  EXPECT_NEAR(results[0].nats_per_token, nats / (5 * kContext), 1e-5);

  o.max_tokens = 2 * kContext + 3;  // two full windows fit
  EXPECT_EQ(evaluate_loss(model, TokenShard::open(shard_path), tokenizer, o)[0].tokens, 2 * kContext);
}

// (b) With K ≥ T fused passes every position has converged to the sequential recurrence.
TEST_F(EvalLoss, LastPassMatchesSequentialWhenPassesCoverTheWindow) {
  auto model = make_test_model(config);
  LossEvalOptions o;
  o.max_tokens = -1;
  o.passes = kContext;
  o.rows = {sequential_row(model)};
  o.batch = 3;
  const auto results = evaluate_loss(model, TokenShard::open(shard_path), tokenizer, o);
  ASSERT_EQ(results.size(), static_cast<size_t>(kContext + 2));
  EXPECT_EQ(results.back().name, "sequential");
  EXPECT_NEAR(results[kContext].nats_per_token, results.back().nats_per_token, 1e-4);
  // Not trivially so: the fused recurrence scores differently from the standard forward.
  EXPECT_GT(std::abs(results[0].nats_per_token - results.back().nats_per_token),
            100 * std::abs(results[kContext].nats_per_token - results.back().nats_per_token));
}

// (c) Teacher-forced decoding through the CPU step: with fp32 weights it scores as the standard
// forward (decode standard) and the sequential recurrence (decode soft); with int8 weights close to
// them but not equal (the quantisation's cost is what the rows measure).
TEST_F(EvalLoss, DecodeRowsMatchStandardAndSequentialInFp32) {
  auto model = make_test_model(config);
  LossEvalOptions o;
  o.max_tokens = -1;
  o.passes = 0;
  o.rows = {sequential_row(model)};
  o.batch = 2;
  for (auto& row : decode_rows(model, std::make_shared<CpuDecoder>(model))) o.rows.push_back(row);
  const auto fp32 = evaluate_loss(model, TokenShard::open(shard_path), tokenizer, o);
  ASSERT_EQ(fp32.size(), 4u);
  EXPECT_EQ(fp32[2].name, "decode standard");
  EXPECT_EQ(fp32[3].name, "decode soft");
  EXPECT_NEAR(fp32[2].nats_per_token, fp32[0].nats_per_token, 1e-5);
  EXPECT_NEAR(fp32[3].nats_per_token, fp32[1].nats_per_token, 1e-5);
  EXPECT_GT(std::abs(fp32[3].nats_per_token - fp32[2].nats_per_token), 1e-3);  // soft is not standard here

  o.rows = {sequential_row(model)};
  for (auto& row :
       decode_rows(model, std::make_shared<CpuDecoder>(model, CpuDecoderOptions{false, DecodeWeights::Int8})))
    o.rows.push_back(row);
  const auto int8 = evaluate_loss(model, TokenShard::open(shard_path), tokenizer, o);
  for (int m : {2, 3}) {
    EXPECT_NEAR(int8[m].nats_per_token, fp32[m].nats_per_token, 0.05) << int8[m].name;
    EXPECT_NE(int8[m].nats_per_token, fp32[m].nats_per_token) << int8[m].name;
  }
}

/// Bytes of the targets SequentialLoader hands out for (path, T, max_tokens): with the byte
/// tokenizer one per id below 256 (specials decode to nothing).
int64_t loader_target_bytes(const std::string& path, int64_t max_tokens) {
  SequentialLoader loader(TokenShard::open(path), 1, kContext, max_tokens);
  int64_t bytes = 0;
  while (auto batch = loader.next()) bytes += (batch->second < 256).sum().item<int64_t>();
  return bytes;
}

// (c) Byte tokenizer: bits per byte divide by the bytes of the targets actually scored. With
// max_tokens below the shard, the windows are spread over it (here 3 of 5: windows 0, 1, 3), so
// the bytes are not those of a prefix of the shard.
TEST_F(EvalLoss, BitsPerByteUsesTheScoredTargetsUtf8Bytes) {
  auto model = make_test_model(config);
  LossEvalOptions o;
  o.max_tokens = 3 * kContext;
  o.passes = 1;
  const auto results = evaluate_loss(model, TokenShard::open(shard_path), tokenizer, o);
  const int64_t tokens = 3 * kContext, bytes = loader_target_bytes(shard_path, o.max_tokens);
  ASSERT_LT(bytes, tokens);  // the windows hold separators
  for (const auto& r : results) {
    EXPECT_EQ(r.tokens, tokens);
    EXPECT_NEAR(r.bits_per_byte, r.nats_per_token * tokens / (std::log(2.0) * bytes), 1e-12);
  }
}

// Issue 20's reproduction, scaled down: a split of many one-byte documents (byte, EOS) followed by
// a few long ones. A prefix of the shard is half separators, the spread windows mostly text: the
// prefix's byte count was 1.4x too small here (bits per byte reported 6.81 instead of 4.80 there).
TEST_F(EvalLoss, BitsPerByteOverUnevenDocumentsCountsTheSpreadWindows) {
  std::vector<int64_t> uneven;
  for (int i = 0; i < 200; ++i) uneven.insert(uneven.end(), {'a' + i % 26, ByteTokenizer::kEos});
  for (int d = 0; d < 10; ++d) {
    for (int i = 0; i < 100; ++i) uneven.push_back('a' + (i * 7 + d) % 26);
    uneven.push_back(ByteTokenizer::kEos);
  }
  const auto path = (dir / "uneven.bin").string();
  ShardWriter writer(path, ByteTokenizer::kVocab);
  writer.append(uneven);
  writer.close();
  auto model = make_test_model(config);
  LossEvalOptions o;
  o.max_tokens = 10 * kContext;  // 10 of the shard's 88 windows
  o.passes = 0;
  const auto r = evaluate_loss(model, TokenShard::open(path), tokenizer, o).at(0);
  const int64_t tokens = 10 * kContext, bytes = loader_target_bytes(path, o.max_tokens);
  int64_t prefix_bytes = 0;  // what the old code divided by
  for (int64_t i = 1; i <= tokens; ++i) prefix_bytes += uneven[i] < 256;
  ASSERT_GT(bytes, prefix_bytes + tokens / 4);
  EXPECT_NEAR(r.bits_per_byte, r.nats_per_token * tokens / (std::log(2.0) * bytes), 1e-12);
}

TEST_F(EvalLoss, ShardOfAnotherVocabIsRejected) {
  auto c = config;
  c.vocab_size = 300;
  auto model = make_test_model(c);
  try {
    evaluate_loss(model, TokenShard::open(shard_path), tokenizer, LossEvalOptions{});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("259"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fbt

namespace fbt {
namespace {

// The contraction diagnostic: loss at k equals evaluate_loss's passes=k (computed there through
// forward_passes in one call), the relative change equals the one computed here from the
// states forward_passes returns, and with k ≥ T the map has reached its fixed point (every
// position exact): the change is 0 and the loss is the sequential recurrence's.
TEST_F(EvalLoss, ContractionCurveMatchesKPassForwardAndReachesTheFixedPoint) {
  auto model = make_test_model(config);
  LossEvalOptions o;
  o.max_tokens = -1;
  o.batch = 2;
  o.passes = 3;
  o.rows = {sequential_row(model)};
  const auto shard = TokenShard::open(shard_path);
  const auto losses = evaluate_loss(model, shard, tokenizer, o);
  const auto curve = contraction_curve(model, shard, tokenizer, kContext + 2, o);
  ASSERT_EQ(curve.size(), size_t(kContext + 3));
  for (int k = 0; k <= 3; ++k) {
    EXPECT_NEAR(curve[k].nats_per_token, losses[k].nats_per_token, 1e-5) << k;
    EXPECT_NEAR(curve[k].bits_per_byte, losses[k].bits_per_byte, 1e-5) << k;
  }
  EXPECT_TRUE(std::isnan(curve[0].relative_change));

  // Relative change by hand on the same 5 windows, from forward_passes' states.
  torch::NoGradGuard no_grad;
  PassOptions po;
  po.passes = 4;
  po.keep_states = true;
  std::vector<double> change(4, 0.0);
  for (int64_t w = 0; w < 5; ++w) {
    const auto begin = stream.begin() + w * kContext;
    auto inputs = torch::tensor(std::vector<int64_t>(begin, begin + kContext)).unsqueeze(0);  // [1,T]
    const auto out = forward_passes(model, inputs, {}, po);
    for (int k = 1; k <= 3; ++k) {
      auto now = out.states[k].to(torch::kDouble), before = out.states[k - 1].to(torch::kDouble);  // [1,T,D]
      change[k] += ((now - before).norm(2, -1) / before.norm(2, -1)).sum().item<double>();
    }
  }
  for (int k = 1; k <= 3; ++k) EXPECT_NEAR(curve[k].relative_change, change[k] / (5 * kContext), 1e-4) << k;
  EXPECT_GT(curve[1].relative_change, 1e-3);  // the fused map does move the states
  // Pass k is exact for t < k: after T passes nothing changes any more (up to fp32 rounding).
  EXPECT_LT(curve[kContext + 1].relative_change, 1e-5);
  EXPECT_NEAR(curve[kContext + 2].nats_per_token, losses.back().nats_per_token, 1e-4);  // = sequential
  EXPECT_THROW(contraction_curve(model, shard, tokenizer, -1, o), Error);
}

}  // namespace
}  // namespace fbt
