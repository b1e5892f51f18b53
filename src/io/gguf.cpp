// GGUF reader (ggml's docs/gguf.md): header, typed metadata, tensor infos, tensor data -> fp32.
#include "fbt/io/gguf.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "fbt/io/gguf_quants.h"
#include "fbt/util/error.h"
#include "fbt/util/utf8.h"

namespace fbt {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;

// gguf_type, the metadata value types of docs/gguf.md.
enum : uint32_t {
  kUint8,
  kInt8,
  kUint16,
  kInt16,
  kUint32,
  kInt32,
  kFloat32,
  kBool,
  kString,
  kArray,
  kUint64,
  kInt64,
  kFloat64
};

/// The fewest bytes a value of `type` takes in the file (arrays and strings: their headers), or 0
/// for an unknown type.
uint64_t min_value_bytes(uint32_t type) {
  switch (type) {
    case kUint8:
    case kInt8:
    case kBool: return 1;
    case kUint16:
    case kInt16: return 2;
    case kUint32:
    case kInt32:
    case kFloat32: return 4;
    case kUint64:
    case kInt64:
    case kFloat64:
    case kString: return 8;
    case kArray: return 12;
    default: return 0;
  }
}

/// Sequential little-endian reads of one file that never go past its end: every read first
/// checks the bytes it needs against the file size, and errors name the file and `what`.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    if (!std::filesystem::is_regular_file(path)) throw Error("'" + path + "' is not a file (expected a .gguf file)");
    in_.open(path, std::ios::binary);
    if (!in_) throw Error("'" + path + "': cannot open for reading");
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
    in_.seekg(0);
  }
  uint64_t size() const { return size_; }
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  [[noreturn]] void fail(const std::string& what) const { throw Error("'" + path_ + "': " + what); }

  void need(uint64_t n, const std::string& what) const {
    if (n > left())
      fail("truncated reading " + what + " (" + std::to_string(n) + " bytes needed at byte " + std::to_string(pos_) +
           ", the file has " + std::to_string(size_) + ")");
  }
  template <class T>
  T pod(const std::string& what) {
    need(sizeof(T), what);
    T v;
    in_.read(reinterpret_cast<char*>(&v), sizeof(T));
    if (!in_) fail("read error at byte " + std::to_string(pos_) + " reading " + what);
    pos_ += sizeof(T);
    return v;
  }
  /// A gguf_string_t: a uint64 length and that many bytes of UTF-8 (docs/gguf.md), checked.
  std::string str(const std::string& what) {
    const auto n = pod<uint64_t>(what + " (its length)");
    need(n, what);
    std::string s(n, '\0');
    in_.read(s.data(), static_cast<std::streamsize>(n));
    if (!in_) fail("read error at byte " + std::to_string(pos_) + " reading " + what);
    check_utf8(s, what);
    pos_ += n;
    return s;
  }

 private:
  /// Fails naming `what` and the first malformed byte unless `s`, read at pos_, is valid UTF-8.
  void check_utf8(std::string_view s, const std::string& what) const {
    for (size_t at = 0; at < s.size();) {
      const size_t n = utf8_char_len(s.substr(at));
      if (n == 0) {
        char byte[8];
        std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(s[at]));
        fail(what + " is not valid UTF-8 (byte " + byte + " at byte " + std::to_string(pos_ + at) +
             " of the file; GGUF strings are UTF-8)");
      }
      at += n;
    }
  }

  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0, pos_ = 0;
};

nlohmann::json read_value(Reader& r, uint32_t type, const std::string& what, int depth) {
  switch (type) {
    case kUint8: return r.pod<uint8_t>(what);
    case kInt8: return r.pod<int8_t>(what);
    case kUint16: return r.pod<uint16_t>(what);
    case kInt16: return r.pod<int16_t>(what);
    case kUint32: return r.pod<uint32_t>(what);
    case kInt32: return r.pod<int32_t>(what);
    case kUint64: return r.pod<uint64_t>(what);
    case kInt64: return r.pod<int64_t>(what);
    case kFloat32: return r.pod<float>(what);
    case kFloat64: return r.pod<double>(what);
    case kBool: {
      const auto b = r.pod<uint8_t>(what);
      if (b > 1) r.fail(what + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
      return b == 1;
    }
    case kString: return r.str(what);
    case kArray: {
      if (depth >= kMaxArrayDepth) r.fail(what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      const auto elem = r.pod<uint32_t>(what + " (element type)");
      const auto n = r.pod<uint64_t>(what + " (element count)");
      if (min_value_bytes(elem) == 0) r.fail(what + ": unknown array element type " + std::to_string(elem));
      if (n > r.left() / min_value_bytes(elem))
        r.fail("truncated reading " + what + ": " + std::to_string(n) + " elements cannot fit in the " +
               std::to_string(r.left()) + " bytes left");
      auto out = nlohmann::json::array();
      out.get_ref<nlohmann::json::array_t&>().reserve(n);
      for (uint64_t i = 0; i < n; ++i)
        out.push_back(read_value(r, elem, what + "[" + std::to_string(i) + "]", depth + 1));
      return out;
    }
    default: r.fail(what + ": unknown value type " + std::to_string(type));
  }
}

GgufTensorInfo read_tensor_info(Reader& r, uint64_t index) {
  const std::string what = "tensor info " + std::to_string(index);
  GgufTensorInfo t;
  t.name = r.str(what + " (name)");
  const std::string named = "tensor '" + t.name + "'";
  const auto n_dims = r.pod<uint32_t>(named + " (dimension count)");
  if (n_dims == 0 || n_dims > kMaxDims)
    r.fail(named + ": " + std::to_string(n_dims) + " dimensions (GGUF allows 1 to " + std::to_string(kMaxDims) + ")");
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const auto ne = r.pod<uint64_t>(named + " (dimension " + std::to_string(d) + ")");
    if (ne == 0 || ne > (uint64_t{1} << 50) / static_cast<uint64_t>(numel))
      r.fail(named + ": dimension " + std::to_string(d) + " is " + std::to_string(ne) + " (tensor too large or empty)");
    numel *= static_cast<int64_t>(ne);
    t.ne.push_back(static_cast<int64_t>(ne));
  }
  t.type = r.pod<uint32_t>(named + " (type)");
  t.offset = r.pod<uint64_t>(named + " (data offset)");
  return t;
}

/// The checks of the data section: alignment, whole blocks per row, data within the file.
void check_tensor_data(const Reader& r, const GgufFile& f, const GgufTensorInfo& t) {
  const std::string named = "tensor '" + t.name + "'";
  if (t.offset % f.alignment != 0)
    r.fail(named + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(f.alignment));
  const auto layout = ggml_block_layout(t.type);
  if (!layout) return;  // read_gguf_tensor names the type if the tensor is ever read
  if (t.ne[0] % layout->elements != 0)
    r.fail(named + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of " + ggml_type_name(t.type) +
           "'s block of " + std::to_string(layout->elements));
  const uint64_t bytes = static_cast<uint64_t>(t.numel() / layout->elements * layout->bytes);
  if (t.offset > f.file_size || f.data_offset + t.offset + bytes > f.file_size)
    r.fail(named + ": its " + std::to_string(bytes) + " bytes of data at offset " + std::to_string(t.offset) +
           " run past the end of the file (" + std::to_string(f.file_size) + " bytes; truncated?)");
}

}  // namespace

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : ne) n *= d;
  return n;
}

std::vector<int64_t> GgufTensorInfo::shape() const { return {ne.rbegin(), ne.rend()}; }

const GgufTensorInfo* GgufFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

GgufFile read_gguf(const std::string& path) {
  Reader r(path);
  GgufFile f;
  f.path = path;
  f.file_size = r.size();
  const auto magic = r.pod<uint32_t>("the magic number");
  if (magic != kMagic) r.fail("not a GGUF file (the first 4 bytes are not \"GGUF\")");
  f.version = r.pod<uint32_t>("the version");
  if (f.version != 2 && f.version != 3)
    r.fail("GGUF version " + std::to_string(f.version) +
           " is not supported (2 and 3 are; a big-endian file reads as a huge version)");
  const auto n_tensors = r.pod<uint64_t>("the tensor count");
  const auto n_kv = r.pod<uint64_t>("the metadata entry count");
  // Each entry takes at least 12 bytes (key length + type), each tensor info at least 28.
  if (n_kv > r.left() / 12 || n_tensors > r.left() / 28)
    r.fail("header counts " + std::to_string(n_kv) + " metadata entries and " + std::to_string(n_tensors) +
           " tensors, more than the file can hold (truncated or corrupt)");
  for (uint64_t i = 0; i < n_kv; ++i) {
    const auto key = r.str("the key of metadata entry " + std::to_string(i));
    if (f.metadata.contains(key)) r.fail("metadata key '" + key + "' appears twice");
    const auto type = r.pod<uint32_t>("the type of metadata '" + key + "'");
    f.metadata[key] = read_value(r, type, "metadata '" + key + "'", 0);
  }
  if (f.metadata.contains("general.alignment")) {
    const auto& a = f.metadata.at("general.alignment");
    if (!a.is_number_unsigned() || a.get<uint64_t>() == 0 || (a.get<uint64_t>() & (a.get<uint64_t>() - 1)) != 0)
      r.fail("metadata 'general.alignment' is " + a.dump() + ", not a power of two");
    f.alignment = a.get<uint64_t>();
  }
  std::set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    f.tensors.push_back(read_tensor_info(r, i));
    if (!names.insert(f.tensors.back().name).second) r.fail("tensor '" + f.tensors.back().name + "' appears twice");
  }
  f.data_offset = (r.pos() + f.alignment - 1) / f.alignment * f.alignment;
  for (const auto& t : f.tensors) check_tensor_data(r, f, t);
  return f;
}

std::vector<uint8_t> read_gguf_tensor_bytes(const GgufFile& file, const GgufTensorInfo& info) {
  const auto layout = ggml_block_layout(info.type);
  if (!layout)
    throw Error("'" + file.path + "': tensor '" + info.name + "' has type " + ggml_type_name(info.type) +
                ", which fbt cannot dequantize (supported: " + ggml_supported_types() + ")");
  std::vector<uint8_t> bytes(
      static_cast<size_t>(info.numel() / layout->elements * layout->bytes));  // checked by read_gguf
  std::ifstream in(file.path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(file.data_offset + info.offset));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in)
    throw Error("'" + file.path + "': cannot read the data of tensor '" + info.name + "' (file changed or truncated?)");
  return bytes;
}

torch::Tensor read_gguf_tensor(const GgufFile& file, const GgufTensorInfo& info) {
  const auto bytes = read_gguf_tensor_bytes(file, info);
  try {
    return dequantize_ggml(info.type, bytes.data(), info.numel()).reshape(info.shape());
  } catch (const Error& e) {
    throw Error("'" + file.path + "': tensor '" + info.name + "' (" + ggml_type_name(info.type) + "): " + e.what());
  }
}

}  // namespace fbt
