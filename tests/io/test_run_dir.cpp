// Run directory files: write_file_atomic's OS errors (issue: "cannot rename temporary file into
// place: Success" for a directory, "cannot write file" with no cause for a missing directory) and
// metrics.jsonl truncation on resume (issue 21 items 5, 14).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fbt/io/run_dir.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/error.h"
#include "cli_test_helpers.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

std::string error_of(const std::string& path) {
  try {
    write_file_atomic(path, "text\n");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(WriteFileAtomic, ErrorsCarryTheOsReason) {
  testing::TempDir tmp;
  const auto dir = tmp.path / "a_directory";
  fs::create_directories(dir);
  const std::string onto_dir = error_of(dir.string());
  EXPECT_NE(onto_dir.find("cannot rename temporary file into place: Is a directory"), std::string::npos) << onto_dir;
  EXPECT_FALSE(fs::exists(dir.string() + ".tmp"));  // the temporary file is gone

  const std::string missing = error_of((tmp.path / "missing" / "f.json").string());
  EXPECT_NE(missing.find("No such file or directory"), std::string::npos) << missing;

  std::ofstream(tmp.path / "plain") << "x";
  const std::string under_file = error_of((tmp.path / "plain" / "f.json").string());
  EXPECT_NE(under_file.find("Not a directory"), std::string::npos) << under_file;

  EXPECT_EQ(error_of((tmp.path / "ok.json").string()), "no error");
  std::ifstream in(tmp.path / "ok.json");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "text");
}

TEST(RunDir, TruncateMetricsDropsLaterStepsAndCutLines) {
  testing::TempDir tmp;
  const auto path = (tmp.path / "metrics.jsonl").string();
  testing::write_file(path, "{\"step\":1}\n{\"step\":2,\"val\":{}}\n{\"step\":3}\n{\"step\":4}\n{\"ste");
  EXPECT_EQ(truncate_metrics(path, 2), 3);
  EXPECT_EQ(testing::slurp(path), "{\"step\":1}\n{\"step\":2,\"val\":{}}\n");
  EXPECT_EQ(truncate_metrics(path, 2), 0);  // nothing left to drop: untouched
  EXPECT_EQ(truncate_metrics((tmp.path / "absent").string(), 2), 0);
}

// Item 14: the OS error is printed (never the "Success" of a clobbered errno), and the old file
// survives a failed write.
TEST(WriteFileAtomic, NamesTheOsErrorAndLeavesNoTemporary) {
  testing::TempDir tmp;
  const auto into_dir = testing::error_of([&] { write_file_atomic(tmp.path.string(), "x"); });  // a directory
  EXPECT_EQ(into_dir.find("Success"), std::string::npos) << into_dir;
  EXPECT_NE(into_dir.find("Is a directory"), std::string::npos) << into_dir;
  const auto missing = testing::error_of([&] { write_file_atomic((tmp.path / "no" / "f.json").string(), "x"); });
  EXPECT_NE(missing.find("No such file or directory"), std::string::npos) << missing;
  const auto file = (tmp.path / "f.json").string();
  write_file_atomic(file, "old");
  EXPECT_EQ(testing::slurp(file), "old");
  EXPECT_FALSE(fs::exists(file + ".tmp"));
}

// write_directory_atomic: a trailing slash names the same directory; a user's OUT.partial is
// refused, not removed; a killed command's (with the marker) is replaced; an empty --out is named.
TEST(WriteDirectoryAtomic, TrailingSlashUserPartialAndEmptyOut) {
  testing::TempDir tmp;
  const auto out = tmp.path / "run";
  write_directory_atomic(out.string() + "/",
                         [](const std::string& dir) { testing::write_file(fs::path(dir) / "a.txt", "a"); });
  EXPECT_EQ(testing::slurp(out / "a.txt"), "a");
  EXPECT_FALSE(fs::exists(out / ".fbt-partial"));
  EXPECT_FALSE(fs::exists(tmp.path / "run.partial"));

  const auto keep = tmp.path / "keep";
  testing::write_file(tmp.path / "keep.partial" / "notes.txt", "precious");
  testing::expect_error([&] { check_new_directory(keep.string()); }, {"keep.partial", "move it away"});
  testing::expect_error([&] { write_directory_atomic(keep.string(), [](const std::string&) {}); }, {"keep.partial"});
  EXPECT_EQ(testing::slurp(tmp.path / "keep.partial" / "notes.txt"), "precious");
  EXPECT_FALSE(fs::exists(keep));

  const auto killed = tmp.path / "killed";
  testing::write_file(tmp.path / "killed.partial" / ".fbt-partial", "");
  testing::write_file(tmp.path / "killed.partial" / "half.bin", "x");
  write_directory_atomic(killed.string(),
                         [](const std::string& dir) { testing::write_file(fs::path(dir) / "b.txt", "b"); });
  EXPECT_EQ(testing::slurp(killed / "b.txt"), "b");
  EXPECT_FALSE(fs::exists(killed / "half.bin"));

  testing::expect_error([] { check_new_directory(""); }, {"--out is empty"});
  testing::expect_error([&] { check_new_directory(out.string() + "/"); }, {"already exists"});
}

TEST(RunDir, AGgufCheckpointPointsAtImport) {
  testing::TempDir tmp;
  testing::write_file(tmp.path / "model.gguf", "GGUF");
  testing::expect_error([&] { resolve_checkpoint((tmp.path / "model.gguf").string()); },
                        {"model.gguf' is a GGUF file", "fbt import --from gguf"});
}

}  // namespace
}  // namespace fbt
