// Record files: JSON arrays, JSON Lines (plain or gzip) and llama.cpp's HellaSwag text.
#include "fbt/data/records.h"

#include <fstream>
#include <iterator>

#include <zlib.h>

#include "fbt/util/error.h"

namespace fbt {

std::string read_record_text(const std::string& path, bool gzip) {
  if (!gzip) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot read task file '" + path + "'");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  const gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw Error("cannot read task file '" + path + "'");
  std::string text;
  char buffer[1 << 16];
  int got;
  while ((got = gzread(file, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(got));
  int code = Z_OK;
  const std::string message = got < 0 ? gzerror(file, &code) : "";
  gzclose(file);
  if (got < 0) throw Error(path + ": cannot decompress: " + message);
  return text;
}

namespace {

nlohmann::json parse_record(const std::string& text, const std::string& where) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": invalid JSON: " + e.what());
  }
}

}  // namespace

std::vector<nlohmann::json> read_records(const std::string& path, RecordFormat format) {
  std::vector<nlohmann::json> records;
  switch (format) {
    case RecordFormat::JsonArray: {
      const auto all = parse_record(read_record_text(path, false), path);
      if (!all.is_array()) throw Error(path + ": expected a JSON array of records");
      records.assign(all.begin(), all.end());
      break;
    }
    case RecordFormat::JsonLines:
    case RecordFormat::GzipJsonLines:
      for_each_record_line(
          path,
          [&](const std::string& line, int64_t number) {
            if (line.find_first_not_of(" \t\n\r\f\v") != std::string::npos)
              records.push_back(parse_record(line, path + ":" + std::to_string(number)));
          },
          format == RecordFormat::GzipJsonLines);
      break;
    case RecordFormat::HellaSwagText: {
      std::vector<std::string> lines;
      for_each_record_line(path, [&](const std::string& line, int64_t) { lines.push_back(line); });
      if (lines.size() % 6 != 0)
        throw Error(path + ": " + std::to_string(lines.size()) +
                    " lines, not a multiple of 6 (query, label, 4 endings)");
      for (size_t i = 0; i < lines.size(); i += 6) {
        if (lines[i + 1].size() != 1 || lines[i + 1][0] < '0' || lines[i + 1][0] > '3')
          throw Error(path + ":" + std::to_string(i + 2) + ": label \"" + lines[i + 1] + "\" is not 0-3");
        records.push_back(
            {{"query", lines[i]},
             {"label", lines[i + 1][0] - '0'},
             {"endings", nlohmann::json::array({lines[i + 2], lines[i + 3], lines[i + 4], lines[i + 5]})}});
      }
      break;
    }
  }
  return records;
}

}  // namespace fbt
