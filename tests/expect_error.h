// Shared test helpers for fbt::Error messages: the message a call throws, and a check that it
// names every expected part.
#pragma once
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fbt/util/error.h"

namespace fbt::testing {

/// The message of the fbt::Error that `f` throws (a test failure, and "", if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected fbt::Error";
  return "";
}

/// Expects `f` to throw fbt::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  const std::string message = error_of(f);
  for (const auto& p : parts) EXPECT_NE(message.find(p), std::string::npos) << message;
}

}  // namespace fbt::testing
