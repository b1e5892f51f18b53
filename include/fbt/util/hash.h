// SHA-256 digests (OpenSSL EVP) of memory buffers and files, as lowercase hex.
#pragma once
#include <cstddef>
#include <string>

namespace fbt {

/// SHA-256 of `n` bytes at `data`, as 64 lowercase hex characters.
std::string sha256_hex(const void* data, size_t n);

/// SHA-256 of the file at `path` (read in 1 MiB chunks), as 64 lowercase hex characters.
/// Throws fbt::Error naming the file if it cannot be opened or read.
std::string sha256_hex_file(const std::string& path);

}  // namespace fbt
