// Crash-safe file writes (checkpoints, run records, tokenizers, results).
#pragma once
#include <string>

namespace fbt {

/// Writes `text` to `path` via `path.tmp`, fsync and rename, then fsyncs the directory, so a
/// crash or power loss leaves either the old or the new file; throws fbt::Error naming the path
/// and the OS error on failure (the old file is then untouched).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace fbt
