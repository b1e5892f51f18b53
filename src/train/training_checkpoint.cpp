// Training checkpoints: trainer.json with a checksum, step directories read back and checked,
// and the newest intact checkpoint for --resume.
#include "fbt/train/training_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "fbt/io/run_dir.h"
#include "fbt/util/error.h"
#include "fbt/util/hash.h"
#include "fbt/util/json_fields.h"

namespace fbt {
namespace fs = std::filesystem;
namespace {

std::string checksum_of(nlohmann::json j) {  // sha256 of the compact dump without "checksum"
  j.erase("checksum");
  const std::string text = j.dump();
  return sha256_hex(text.data(), text.size());
}

int64_t non_negative(const nlohmann::json& j, const char* key, const std::string& path) {
  const auto v = required_field<int64_t>(j, key, path);
  if (v < 0) throw Error(path + ": field '" + key + "' is " + std::to_string(v) + ", expected >= 0");
  return v;
}

/// The value of a string of 1 to 18 decimal digits, or -1 for anything else.
int64_t digits_value(const std::string& digits) {
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

/// Step number of a directory named step-NNNNNNN, or -1.
int64_t step_of(const std::string& name) {
  return name.compare(0, 5, "step-") == 0 ? digits_value(name.substr(std::min<size_t>(5, name.size()))) : -1;
}

}  // namespace

nlohmann::json TrainerState::to_json() const {
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& [k, v] : pass_counts) counts[std::to_string(k)] = v;
  nlohmann::json j{{"step", step},
                   {"tokens", tokens},
                   {"token_equivalent", token_equivalent},
                   {"consecutive_bad", consecutive_bad},
                   {"pass_counts", counts},
                   {"pass_rng", pass_rng},
                   {"torch_generator", torch_generators.at(0)},
                   {"loader", loader},
                   {"world_size", world_size},
                   {"wall_s", wall_s}};
  if (torch_generators.size() > 1) j["torch_generators"] = torch_generators;
  j["checksum"] = checksum_of(j);
  return j;
}

TrainerState TrainerState::from_json(const nlohmann::json& j, const std::string& path) {
  TrainerState s;
  if (!j.is_object()) throw Error(path + ": expected a JSON object");
  if (j.contains("checksum")) {
    const auto stored = required_field<std::string>(j, "checksum", path);
    if (stored != checksum_of(j)) throw Error(path + ": checksum mismatch (the file was edited or is corrupt)");
  }
  s.step = non_negative(j, "step", path);
  if (s.step < 1) throw Error(path + ": field 'step' is 0; a checkpoint follows at least one step");
  s.tokens = non_negative(j, "tokens", path);
  s.token_equivalent = non_negative(j, "token_equivalent", path);
  s.consecutive_bad = non_negative(j, "consecutive_bad", path);
  s.world_size = j.contains("world_size") ? non_negative(j, "world_size", path) : 1;
  if (s.world_size < 1) throw Error(path + ": field 'world_size' is 0");
  s.wall_s = j.contains("wall_s") ? required_field<double>(j, "wall_s", path) : 0.0;
  const auto counts = required_field<nlohmann::json>(j, "pass_counts", path);
  if (!counts.is_object()) throw Error(path + ": field 'pass_counts' is not an object");
  for (const auto& [k, v] : counts.items()) {
    const int64_t K = digits_value(k);
    if (K < 1 || !v.is_number_integer() || v.get<int64_t>() < 0)
      throw Error(path + ": field 'pass_counts': entry \"" + k + "\": " + v.dump() + " is not a count of steps per K");
    s.pass_counts[K] = v.get<int64_t>();
  }
  s.pass_rng = required_field<std::string>(j, "pass_rng", path);
  std::istringstream in(s.pass_rng);
  std::mt19937_64 rng;
  in >> rng;
  if (in.fail() || !(in >> std::ws).eof()) throw Error(path + ": field 'pass_rng' is not a std::mt19937_64 state");
  if (j.contains("torch_generators")) {
    const auto list = required_field<nlohmann::json>(j, "torch_generators", path);
    if (!list.is_array() || int64_t(list.size()) != s.world_size)
      throw Error(path + ": field 'torch_generators' is not a list of " + std::to_string(s.world_size) + " states");
    for (size_t r = 0; r < list.size(); ++r) {
      if (!list[r].is_string())
        throw Error(path + ": field 'torch_generators'[" + std::to_string(r) + "] is not a string");
      s.torch_generators.push_back(list[r].get<std::string>());
    }
  } else {
    s.torch_generators.push_back(required_field<std::string>(j, "torch_generator", path));
  }
  for (size_t r = 0; r < s.torch_generators.size(); ++r)
    generator_state_from_hex(s.torch_generators[r], path + ": generator state of rank " + std::to_string(r));
  s.loader = required_field<nlohmann::json>(j, "loader", path);
  if (!s.loader.is_object()) throw Error(path + ": field 'loader' is not an object");
  return s;
}

std::string generator_state_to_hex(const torch::Tensor& bytes) {
  const auto t = bytes.contiguous();
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const auto b = t.data_ptr<uint8_t>()[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

torch::Tensor generator_state_from_hex(const std::string& hex, const std::string& what) {
  if (hex.empty() || hex.size() % 2 != 0)
    throw Error(what + ": " + std::to_string(hex.size()) + " hex digits (expected an even number > 0)");
  auto t = torch::empty({int64_t(hex.size() / 2)}, torch::kUInt8);
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw Error(what + ": '" + std::string(1, c) + "' is not a lowercase hex digit");
  };
  for (size_t i = 0; i < hex.size() / 2; ++i)
    t.data_ptr<uint8_t>()[i] = uint8_t(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return t;
}

TrainingCheckpoint read_training_checkpoint(const std::string& dir) {
  TrainingCheckpoint c;
  c.dir = dir;
  const fs::path d(dir);
  const auto trainer_path = (d / "trainer.json").string();
  nlohmann::json tj;
  {
    std::ifstream f(trainer_path);
    if (!f) throw Error(trainer_path + ": cannot open (missing?)");
    try {
      tj = nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
      throw Error(trainer_path + ": not valid JSON (truncated?): " + json_error_brief(e));
    }
  }
  c.trainer = TrainerState::from_json(tj, trainer_path);
  const auto model_path = (d / "model.safetensors").string(), opt_path = (d / "optimizer.safetensors").string();
  c.model = load_tensors(model_path);
  c.info = checkpoint_info_from_metadata(c.model.metadata, model_path);
  c.optimizer = load_tensors(opt_path);
  if (c.info.step != c.trainer.step)
    throw Error(model_path + ": holds step " + std::to_string(c.info.step) + " but " + trainer_path + " step " +
                std::to_string(c.trainer.step) + " (files of different checkpoints)");
  const auto& om = c.optimizer.metadata;
  if (!om.is_object() || !om.contains("step") || om["step"] != c.trainer.step)
    throw Error(opt_path + ": metadata step " + (om.is_object() ? om.value("step", nlohmann::json()).dump() : "?") +
                " does not match " + trainer_path + " step " + std::to_string(c.trainer.step));
  return c;
}

std::vector<std::string> step_dirs_newest_first(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const auto name = entry.path().filename().string();
    if (step_of(name) >= 0 && entry.is_directory()) found.emplace_back(step_of(name), entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(path);
  return out;
}

TrainingCheckpoint read_resume_checkpoint(const std::string& run_dir, std::ostream& warnings) {
  const fs::path run(run_dir), latest_path = run / "latest";
  std::string named;  // the step directory `latest` names, "" when it is missing, empty or dangling
  if (fs::exists(latest_path)) {
    std::ifstream f(latest_path);
    std::string name;
    f >> name;
    if (name.empty())
      warnings << "warning: " << latest_path.string() << " is empty; looking for the newest intact checkpoint\n";
    else if (step_of(name) < 0 || !fs::is_directory(run / name))
      warnings << "warning: " << latest_path.string() << " names '" << name
               << "', which is not a step directory of the run (dangling); looking for the newest intact checkpoint\n";
    else
      named = (run / name).string();
  }
  std::vector<std::string> candidates;
  if (!named.empty()) candidates.push_back(named);
  for (const auto& dir : step_dirs_newest_first(run_dir))
    if (named.empty() || step_of(fs::path(dir).filename().string()) < step_of(fs::path(named).filename().string()))
      candidates.push_back(dir);
  if (candidates.empty())
    throw Error(
        "--resume: " + run_dir + " holds no checkpoint (no step directory" +
        (fs::exists(latest_path) ? std::string(" of those 'latest' could name") : std::string(", no 'latest'")) +
        "): the run stopped before its first checkpoint; start it again without --resume");
  std::string failures;
  for (const auto& dir : candidates) {
    try {
      auto c = read_training_checkpoint(dir);
      if (dir != candidates.front() || named.empty())
        warnings << "warning: resuming from " << dir << ", the newest intact checkpoint\n";
      return c;
    } catch (const Error& e) {
      warnings << "warning: checkpoint " << dir << " is damaged: " << e.what() << "\n";
      failures += "\n  " + dir + ": " + e.what();
    }
  }
  throw Error("--resume: no intact checkpoint in " + run_dir +
              (named.empty() ? " ('latest' is empty or dangling)" : "") + ":" + failures);
}

}  // namespace fbt
