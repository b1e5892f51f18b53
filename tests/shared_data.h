// Shared test helper: the public datasets in FBT_SHARED_DATA (../shared/data by default), which
// a user's machine may lack; the tests that read them are skipped there, with the path.
#pragma once
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace fbt::testing {

/// FBT_SHARED_DATA/relative.
inline std::string shared_data(const std::string& relative) { return std::string(FBT_SHARED_DATA) + "/" + relative; }

}  // namespace fbt::testing

/// Skips the current test (use in a test body or SetUp) when FBT_SHARED_DATA/relative is missing.
#define FBT_SKIP_WITHOUT_SHARED_DATA(relative)                         \
  if (!std::filesystem::exists(::fbt::testing::shared_data(relative))) \
  GTEST_SKIP() << "no " << ::fbt::testing::shared_data(relative)       \
               << " (the shared datasets; configure with -DFBT_SHARED_DATA=DIR to run this test)"
