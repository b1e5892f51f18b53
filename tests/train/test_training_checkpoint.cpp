// trainer.json (TrainerState): round trip, checksum, and every bad field named (issue 21 items
// 3, 9, 11).
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <sstream>

#include "expect_error.h"
#include "fbt/train/training_checkpoint.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

using testing::error_of;

TrainerState sample_state() {
  TrainerState s;
  s.step = 7;
  s.tokens = 700;
  s.token_equivalent = 900;
  s.pass_counts = {{1, 5}, {2, 2}};
  s.wall_s = 1.5;
  std::ostringstream rng;
  rng << std::mt19937_64(42);
  s.pass_rng = rng.str();
  s.torch_generators = {"00ff10"};
  s.loader = {{"kind", "random_windows"}};
  return s;
}

TEST(TrainerState, RoundTripsThroughItsJson) {
  const auto s = sample_state();
  const auto j = nlohmann::json::parse(s.to_json().dump(2));  // as written and read back
  const auto back = TrainerState::from_json(j, "t.json");
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.tokens, 700);
  EXPECT_EQ(back.token_equivalent, 900);
  EXPECT_EQ(back.pass_counts, s.pass_counts);
  EXPECT_EQ(back.pass_rng, s.pass_rng);
  EXPECT_EQ(back.torch_generators, s.torch_generators);
  EXPECT_EQ(back.loader, s.loader);
  EXPECT_DOUBLE_EQ(back.wall_s, 1.5);
  EXPECT_EQ(generator_state_to_hex(generator_state_from_hex("00ff10", "g")), "00ff10");
}

// Any edit after writing is caught by the checksum, and names the file.
TEST(TrainerState, AnEditedFieldFailsTheChecksum) {
  auto j = sample_state().to_json();
  j["tokens"] = 701;
  EXPECT_NE(error_of([&] {
              TrainerState::from_json(j, "run/step-0000007/trainer.json");
            }).find("run/step-0000007/trainer.json: checksum mismatch"),
            std::string::npos);
}

// Without a checksum (files written before it existed) every field is still checked by type
// and range, and the message names the file and the field (item 9: never a raw JSON error).
TEST(TrainerState, EveryBadFieldIsNamed) {
  auto base = sample_state().to_json();
  base.erase("checksum");
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j["step"] = "sixty"; }, "field 'step': expected an integer"},
      {[](nlohmann::json& j) { j.erase("tokens"); }, "field 'tokens' is missing"},
      {[](nlohmann::json& j) { j["consecutive_bad"] = -1; }, "field 'consecutive_bad' is -1"},
      {[](nlohmann::json& j) { j["pass_rng"] = "1 2 3"; }, "field 'pass_rng' is not a std::mt19937_64 state"},
      {[](nlohmann::json& j) { j["torch_generator"] = "zz"; }, "'z' is not a lowercase hex digit"},
      {[](nlohmann::json& j) { j["torch_generator"] = "abc"; }, "3 hex digits"},
      {[](nlohmann::json& j) {
         j["pass_counts"] = {{"two", 1}};
       },
       "field 'pass_counts': entry \"two\""},
      {[](nlohmann::json& j) { j["loader"] = 5; }, "field 'loader' is not an object"},
      {[](nlohmann::json& j) { j = nlohmann::json::array(); }, "expected a JSON object"},
  };
  for (const auto& [damage, expected] : cases) {
    auto j = base;
    damage(j);
    const auto msg = error_of([&] { TrainerState::from_json(j, "T.json"); });
    EXPECT_EQ(msg.rfind("T.json", 0), 0u) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace fbt
