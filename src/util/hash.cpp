// SHA-256 digests via OpenSSL's EVP interface (see include/fbt/util/hash.h).
#include "fbt/util/hash.h"

#include <openssl/evp.h>

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

}  // namespace fbt
