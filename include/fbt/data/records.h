// Record files of the evaluation tasks and of `fbt synth`: JSON arrays, JSON Lines (plain or
// gzip), and llama.cpp's six-line HellaSwag text.
#pragma once
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fbt {

/// How a task file is read into JSON records.
enum class RecordFormat {
  JsonArray,      ///< one JSON array of objects
  JsonLines,      ///< one JSON object per line (blank lines skipped)
  HellaSwagText,  ///< llama.cpp's 6 lines per item -> {"query", "label" (int), "endings" [4]}
  GzipJsonLines,  ///< JsonLines compressed with gzip (e.g. HumanEval.jsonl.gz)
};

/// The records of the file `path` in `format`, in file order (HellaSwagText: the objects described
/// at RecordFormat). Throws fbt::Error naming the file (and line) if it cannot be read, decompressed
/// or parsed.
std::vector<nlohmann::json> read_records(const std::string& path, RecordFormat format);

/// The bytes of `path`, gunzipped if `gzip`. Throws fbt::Error naming the file.
std::string read_record_text(const std::string& path, bool gzip);

/// Calls f(line, line_number) for each line of `path` (1-based; '\n'-separated, a final '\r'
/// removed), gunzipped first if `gzip`. Throws what read_record_text throws.
template <class F>
void for_each_record_line(const std::string& path, F&& f, bool gzip = false) {
  std::istringstream in(read_record_text(path, gzip));
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    f(line, number);
  }
}

}  // namespace fbt
