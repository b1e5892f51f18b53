// ModelConfig: presets, parameter counts from the architecture formula, strict JSON round trip.
#include <gtest/gtest.h>

#include "fbt/model/config.h"
#include "fbt/model/model.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

int64_t count_parameters(FBT& model) {
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

// Parameter count worked out by hand from paper Appendix A shapes (tied head counted once).
int64_t hand_count(int64_t V, int64_t D, int64_t L, int64_t H, int64_t Hkv, int64_t F) {
  const int64_t Dh = D / H;
  const int64_t per_layer = D * D           // W_q
                            + D * Hkv * Dh  // W_k
                            + D * Hkv * Dh  // W_v
                            + D * D         // W_o
                            + D * H         // per-head output gate
                            + 2 * Dh        // q, k RMSNorm gains
                            + 3 * D * F     // SwiGLU
                            + 4 * D;        // sandwich norm gains
  return V * D + L * per_layer + 2 * D * D /* W_U, W_G */ + 2 * D /* input, final norm */;
}

TEST(ModelConfig, OneBillionPresetParameterCount) {
  auto c = ModelConfig::preset("1b");
  const int64_t expected = hand_count(100352, 1536, 24, 16, 8, 6656);
  EXPECT_EQ(c.parameter_count(), expected);
  EXPECT_NEAR(expected / 1e9, 1.065, 0.01);  // "≈1.06 B"
  FBT model(c);                              // constructing the 1b model on CPU works
  EXPECT_EQ(count_parameters(model), expected);
}

TEST(ModelConfig, SmallAndDebugParameterCounts) {
  auto small = ModelConfig::preset("small");
  FBT m(small);
  EXPECT_EQ(count_parameters(m), hand_count(4096, 256, 6, 4, 2, 688));
  auto debug = ModelConfig::preset("debug");
  FBT d(debug);
  EXPECT_EQ(count_parameters(d), hand_count(259, 64, 2, 4, 2, 176));
}

TEST(ModelConfig, OneBillionWindowLayout) {
  auto c = ModelConfig::preset("1b");
  for (int64_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.layer_window(l), (l % 6 == 5) ? 0 : 2048) << "layer " << l;
}

TEST(ModelConfig, JsonRoundTrip) {
  auto c = ModelConfig::preset("small");
  c.fusion = Fusion::GluPlusToken;
  c.feedback_state = FeedbackState::PreNorm;
  c.doc_separator_id = 3;
  auto j = c.to_json();
  EXPECT_EQ(j.at("fusion"), "glu_plus_token");
  auto back = ModelConfig::from_json(nlohmann::json::parse(j.dump()), "test");
  EXPECT_EQ(back, c);
}

TEST(ModelConfig, StrictParsingNamesTheProblem) {
  auto expect_error = [](const nlohmann::json& j, const std::string& needle) {
    try {
      ModelConfig::from_json(j, "cfg.json");
      FAIL() << "no error for " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cfg.json"), std::string::npos) << e.what();
    }
  };
  expect_error({{"d_modle", 64}}, "d_modle");
  expect_error({{"d_model", "64"}}, "d_model");
  expect_error({{"fusion", "additive"}}, "glu_plus_token");
  EXPECT_THROW(ModelConfig::from_json({{"n_heads", 3}}, "x"), Error);  // 64 % 3 != 0
  EXPECT_THROW(ModelConfig::preset("2b"), Error);
}

}  // namespace
}  // namespace fbt
