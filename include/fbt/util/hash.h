// SHA-256 digests (OpenSSL EVP) of memory buffers and files, as lowercase hex.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace fbt {

/// SHA-256 of `n` bytes at `data`, as 64 lowercase hex characters.
std::string sha256_hex(const void* data, size_t n);

/// SHA-256 of the file at `path` (read in 1 MiB chunks), as 64 lowercase hex characters.
/// Throws fbt::Error naming the file if it cannot be opened or read.
std::string sha256_hex_file(const std::string& path);

/// A cheap fingerprint of a large file: the SHA-256 of its size (decimal, then a newline) and of
/// `blocks` blocks of `block_bytes` bytes at evenly spaced offsets (the first and last blocks
/// included; the whole file when it holds no more than blocks x block_bytes bytes). Detects a
/// replaced, resized or overwritten file at the cost of reading a few MiB; it is not proof
/// against an edit between blocks (sha256_hex_file is). Throws fbt::Error naming the file.
std::string sha256_hex_file_sampled(const std::string& path, int64_t blocks = 64, int64_t block_bytes = 1 << 16);

}  // namespace fbt
