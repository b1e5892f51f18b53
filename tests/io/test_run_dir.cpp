// write_file_atomic: the OS error reaches the message (issue: "cannot rename temporary file into
// place: Success" for a directory, "cannot write file" with no cause for a missing directory).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fbt/io/run_dir.h"
#include "fbt/util/error.h"
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

}  // namespace
}  // namespace fbt
