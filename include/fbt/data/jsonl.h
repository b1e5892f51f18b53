// JSON Lines input (https://jsonlines.org): one JSON value per line, blank lines skipped.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fbt/util/error.h"

namespace fbt {

/// Calls f(record, where) for each non-blank line of `text` parsed as JSON, `where` being
/// "ORIGIN:LINE" (1-based) for error messages. Throws fbt::Error "ORIGIN:LINE: invalid JSON: ..."
/// for a line that does not parse; whatever f throws passes through.
template <class F>
void for_each_jsonl_record(const std::string& origin, const std::string& text, F&& f) {
  size_t pos = 0;
  for (int64_t number = 1; pos < text.size(); ++number) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line = std::string_view(text).substr(pos, end - pos);
    pos = end + 1;
    if (line.find_first_not_of(" \t\r\f\v") == std::string_view::npos) continue;
    const std::string where = origin + ":" + std::to_string(number);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": invalid JSON: " + e.what());
    }
    f(record, where);
  }
}

}  // namespace fbt
