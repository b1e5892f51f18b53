// save_tensors / load_tensors: safetensors files carrying fbt JSON metadata and a data sha256.
#include "fbt/io/safetensors.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>

#include "fbt/util/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors files are little-endian; fbt writes host bytes as they are");

namespace fbt {
namespace {

struct DtypeInfo {
  torch::ScalarType type;
  const char* name;  // safetensors dtype string
};

const DtypeInfo kDtypes[] = {
    {torch::kFloat32, "F32"}, {torch::kFloat16, "F16"}, {torch::kBFloat16, "BF16"}, {torch::kFloat64, "F64"},
    {torch::kInt64, "I64"},   {torch::kInt32, "I32"},   {torch::kInt16, "I16"},     {torch::kInt8, "I8"},
    {torch::kUInt8, "U8"},    {torch::kBool, "BOOL"},
};

const DtypeInfo* dtype_by_type(torch::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return &d;
  return nullptr;
}

const DtypeInfo* dtype_by_name(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

/// Incremental sha256 over OpenSSL's EVP interface.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("OpenSSL: cannot initialise sha256");
  }
  void update(const void* data, size_t n) {
    if (n > 0 && EVP_DigestUpdate(ctx_.get(), data, n) != 1) throw std::runtime_error("OpenSSL: sha256 update failed");
  }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), digest, &len) != 1) throw std::runtime_error("OpenSSL: sha256 final failed");
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
      out += kHex[digest[i] >> 4];
      out += kHex[digest[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

/// sha256 of the header's compact dump (keys sorted) without __metadata__.header_sha256: covers
/// the metadata, names, dtypes, shapes and offsets, so a same-length edit of the header is caught.
std::string header_checksum(nlohmann::json header) {
  header["__metadata__"].erase("header_sha256");
  const std::string text = header.dump();
  Sha256 sha;
  sha.update(text.data(), text.size());
  return sha.hex();
}

size_t nbytes(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

void write_all(int fd, const void* data, size_t n, const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Error(tmp + ": write failed: " + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void save_tensors(const std::string& path, const NamedTensors& tensors, const nlohmann::json& metadata) {
  // Validate and materialise everything before touching the file system.
  std::vector<torch::Tensor> cpu;
  std::set<std::string> names;
  nlohmann::json header = nlohmann::json::object();
  Sha256 sha;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error(path + ": tensor '" + name + "' is undefined");
    if (name == "__metadata__" || !names.insert(name).second)
      throw Error(path + ": tensor name '" + name + "' is reserved or duplicated");
    const DtypeInfo* d = dtype_by_type(t.scalar_type());
    if (!d || t.layout() != torch::kStrided)
      throw Error(path + ": tensor '" + name + "' has unsupported dtype/layout " +
                  std::string(c10::toString(t.scalar_type())));
    cpu.push_back(t.detach().to(torch::kCPU).contiguous());
    const uint64_t n = nbytes(cpu.back());
    sha.update(cpu.back().data_ptr(), n);
    header[name] = {{"dtype", d->name}, {"shape", cpu.back().sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  header["__metadata__"] = {{"fbt", metadata.dump()}, {"sha256", sha.hex()}};
  header["__metadata__"]["header_sha256"] = header_checksum(header);
  std::string header_str = header.dump();
  header_str.append((8 - header_str.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  const uint64_t header_len = header_str.size();

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(tmp + ": cannot create: " + std::strerror(errno));
  try {
    write_all(fd, &header_len, 8, tmp);
    write_all(fd, header_str.data(), header_str.size(), tmp);
    for (const auto& t : cpu) write_all(fd, t.data_ptr(), nbytes(t), tmp);
    if (::fsync(fd) != 0) throw Error(tmp + ": fsync failed: " + std::strerror(errno));
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw Error(tmp + ": close failed: " + std::strerror(errno));
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(path + ": cannot rename " + tmp + " over it: " + std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

namespace {

/// load_tensors (fbt = true) and load_foreign_tensors (fbt = false): the same structural checks;
/// only fbt's own files must carry fbt metadata and a matching data checksum.
TensorFile read_tensor_file(const std::string& path, bool fbt, const TensorPlacement& place) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(path + ": cannot open for reading: " + std::strerror(errno));
  const std::streamoff end = in.tellg();
  if (end < 0) throw Error(path + ": cannot read (not a regular file?)");
  const uint64_t file_size = static_cast<uint64_t>(end);
  in.seekg(0);

  uint64_t header_len = 0;
  if (file_size < 8)
    throw Error(path + ": " + std::to_string(file_size) + " bytes is too short for a safetensors file (truncated?)");
  if (!in.read(reinterpret_cast<char*>(&header_len), 8)) throw Error(path + ": cannot read: " + std::strerror(errno));
  if (header_len > file_size - 8)
    throw Error(path + ": header length " + std::to_string(header_len) + " exceeds the " + std::to_string(file_size) +
                "-byte file (truncated or not a safetensors file)");
  std::string header_str(header_len, '\0');
  if (!in.read(header_str.data(), header_len)) throw Error(path + ": cannot read the header");

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_str);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": header is not valid JSON (" + e.what() + ")");
  }
  if (!header.is_object()) throw Error(path + ": header is not a JSON object");

  struct Entry {
    std::string name;
    const DtypeInfo* dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  TensorFile out;
  std::string stored_sha;
  for (const auto& [name, v] : header.items()) {
    const std::string where = path + ": " + (name == "__metadata__" ? name : "tensor '" + name + "'") + ": ";
    try {
      if (name == "__metadata__" && !fbt) {
        out.metadata = v;  // other writers' free-form string map (transformers: {"format": "pt"})
        continue;
      }
      if (name == "__metadata__") {
        out.metadata = nlohmann::json::parse(v.at("fbt").get<std::string>());
        stored_sha = v.at("sha256").get<std::string>();
        if (v.contains("header_sha256") && v.at("header_sha256").get<std::string>() != header_checksum(header))
          throw Error(where +
                      "header checksum mismatch: the header (metadata, names, shapes) was edited or is corrupt");
        continue;
      }
      Entry e{name, dtype_by_name(v.at("dtype").get<std::string>()), v.at("shape").get<std::vector<int64_t>>(), 0, 0};
      const auto offsets = v.at("data_offsets").get<std::vector<uint64_t>>();
      if (!e.dtype) throw Error(where + "unknown dtype " + v.at("dtype").dump());
      if (offsets.size() != 2 || offsets[0] > offsets[1])
        throw Error(where + "data_offsets " + v.at("data_offsets").dump() + " is not [begin, end]");
      e.begin = offsets[0];
      e.end = offsets[1];
      uint64_t expected = torch::elementSize(e.dtype->type);
      for (int64_t dim : e.shape)
        if (dim < 0 || __builtin_mul_overflow(expected, static_cast<uint64_t>(dim), &expected))
          throw Error(where + "bad shape " + v.at("shape").dump());
      if (expected != e.end - e.begin)
        throw Error(where + "shape " + v.at("shape").dump() + " × " + e.dtype->name + " needs " +
                    std::to_string(expected) + " bytes but data_offsets span " + std::to_string(e.end - e.begin));
      entries.push_back(std::move(e));
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + "malformed header entry (" + e.what() + ")");
    }
  }
  if (fbt && stored_sha.empty()) throw Error(path + ": header has no __metadata__ (not written by fbt)");

  // Tensors must tile the data section [0, data_end) in offset order, with nothing after it.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::make_pair(a.begin, a.end) < std::make_pair(b.begin, b.end);
  });
  uint64_t data_end = 0;
  for (const auto& e : entries) {
    if (e.begin != data_end)
      throw Error(path + ": tensor '" + e.name + "' data_offsets [" + std::to_string(e.begin) + ", " +
                  std::to_string(e.end) + "] " + (e.begin < data_end ? "overlap the previous tensor" : "leave a gap") +
                  ": expected it to start at byte " + std::to_string(data_end));
    data_end = e.end;
  }
  const uint64_t data_size = file_size - 8 - header_len;
  if (data_end != data_size)
    throw Error(path + ": file is " + (data_size < data_end ? "truncated" : "extended") + ": expected " +
                std::to_string(8 + header_len + data_end) + " bytes (header + data), got " + std::to_string(file_size));

  Sha256 sha;
  for (const auto& e : entries) {
    torch::Tensor t = place ? place(out.metadata, e.name, e.shape, e.dtype->type) : torch::Tensor();
    if (!t.defined())
      t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype->type));
    else if (!t.device().is_cpu() || !t.is_contiguous() || t.sizes() != torch::IntArrayRef(e.shape) ||
             t.scalar_type() != e.dtype->type)
      throw Error(path + ": tensor '" + e.name +
                  "': the place given to read it into is not a contiguous CPU tensor "
                  "of its shape and dtype");
    const uint64_t n = e.end - e.begin;
    if (n > 0 && !in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(n)))
      throw Error(path + ": read failed in tensor '" + e.name + "'");
    sha.update(t.data_ptr(), n);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  const std::string actual_sha = sha.hex();
  if (fbt && actual_sha != stored_sha)
    throw Error(path + ": data checksum mismatch, file is corrupt (sha256 stored " + stored_sha + ", computed " +
                actual_sha + ")");
  return out;
}

}  // namespace

TensorFile load_tensors(const std::string& path, const TensorPlacement& place) {
  return read_tensor_file(path, /*fbt=*/true, place);
}

TensorFile load_foreign_tensors(const std::string& path) { return read_tensor_file(path, /*fbt=*/false, {}); }

}  // namespace fbt
