// Reading a whole file into memory, with errors that name it.
#pragma once
#include <string>

namespace fbt {

/// The bytes of the file at `path`. Throws fbt::Error "cannot open WHAT 'PATH'" when it cannot
/// be opened and "read error on WHAT 'PATH'" when reading fails (`what` says what the file is
/// for, e.g. "tokenizer model").
std::string read_whole_file(const std::string& path, const std::string& what);

}  // namespace fbt
