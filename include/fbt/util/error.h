// fbt::Error: the one exception type for bad user input (files, fields, flags).
#pragma once
#include <stdexcept>
#include <string>

namespace fbt {

/// Thrown for bad input: the message names the file, field or flag at fault and what was
/// expected. Command-line tools print `error: <message>` and exit with status 1.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace fbt
