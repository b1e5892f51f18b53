// SHA-256 digests via OpenSSL's EVP interface (see include/fbt/util/hash.h).
#include "fbt/util/hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <vector>

#include "fbt/util/error.h"

namespace fbt {
namespace {

using MdCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

MdCtx new_sha256_ctx() {
  MdCtx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: OpenSSL EVP initialisation failed");
  return ctx;
}

void update(EVP_MD_CTX* ctx, const void* data, size_t n) {
  if (EVP_DigestUpdate(ctx, data, n) != 1) throw std::runtime_error("sha256: EVP_DigestUpdate failed");
}

std::string finish_hex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, digest, &len) != 1) throw std::runtime_error("sha256: EVP_DigestFinal_ex failed");
  static const char* kHex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xF];
  }
  return out;
}

}  // namespace

std::string sha256_hex(const void* data, size_t n) {
  MdCtx ctx = new_sha256_ctx();
  update(ctx.get(), data, n);
  return finish_hex(ctx.get());
}

std::string sha256_hex_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open '" + path + "' to compute its sha256");
  MdCtx ctx = new_sha256_ctx();
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    update(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw Error("read error on '" + path + "' while computing its sha256");
  return finish_hex(ctx.get());
}

std::string sha256_hex_file_sampled(const std::string& path, int64_t blocks, int64_t block_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error("cannot open '" + path + "' to compute its sampled sha256");
  const int64_t size = in.tellg();
  MdCtx ctx = new_sha256_ctx();
  const std::string size_text = std::to_string(size) + "\n";  // the size is part of what is hashed
  update(ctx.get(), size_text.data(), size_text.size());
  std::vector<char> buf(static_cast<size_t>(block_bytes));
  for (int64_t b = 0; b < blocks; ++b) {
    // Block b starts at b/(blocks-1) of the way to the last block's start: the first block,
    // the last, and evenly spaced ones between; a file of at most blocks x block_bytes is read whole.
    const int64_t span = std::max<int64_t>(0, size - block_bytes);
    const int64_t start = size <= blocks * block_bytes ? b * block_bytes : span * b / std::max<int64_t>(1, blocks - 1);
    if (start >= size) break;
    in.seekg(start);
    in.read(buf.data(), static_cast<std::streamsize>(std::min(block_bytes, size - start)));
    if (in.bad() || in.gcount() <= 0) throw Error("read error on '" + path + "' while computing its sampled sha256");
    update(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  return finish_hex(ctx.get());
}

}  // namespace fbt
