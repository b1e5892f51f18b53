// Reading a run's metrics.jsonl in tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fbt::testing {

/// The training lines of RUNDIR/metrics.jsonl (those with "passes"), in order.
inline std::vector<nlohmann::json> step_lines(const std::filesystem::path& run) {
  std::ifstream f(run / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("passes")) lines.push_back(j);
  }
  return lines;
}

}  // namespace fbt::testing
