// Tests for save_tensors / load_tensors: bitwise round trips, the safetensors layout, and rejection
// of truncated, corrupt, garbage and malformed files; failed saves leave the old file intact.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fbt/io/safetensors.h"
#include "expect_error.h"
#include "fbt/util/error.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

/// The raw bytes of `t` in row-major order.
std::string tensor_bytes(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

/// A safetensors file assembled by hand: 8-byte little-endian length, header, data.
std::string safetensors_file(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

using fbt::testing::error_of;

class TensorIO : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fbt_tensor_io_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(TensorIO, RoundTripIsBitwiseForAllDtypes) {
  torch::manual_seed(0);
  const fbt::NamedTensors saved = {
      {"f32", torch::randn({3, 4})},
      {"f32_transposed", torch::randn({4, 3}).t()},  // non-contiguous view
      {"f16", torch::randn({2, 5}).to(torch::kFloat16)},
      // -0, ±inf, a subnormal and a value that needs rounding: compared byte by byte.
      {"bf16", torch::tensor({-0.0f, INFINITY, -INFINITY, 1e-40f, 3.14159f}).to(torch::kBFloat16)},
      {"f64", torch::randn({2, 2, 2}, torch::kFloat64)},
      {"i64", torch::arange(-5, 7, torch::kInt64).reshape({3, 4})},
      {"i32", torch::tensor({INT32_MIN, -1, 0, INT32_MAX}, torch::kInt32)},
      {"i16", torch::tensor({-32768, 12345, 32767}, torch::kInt16)},
      {"i8", torch::tensor({-128, 0, 127}, torch::kInt8)},
      {"u8", torch::tensor({0, 128, 255}, torch::kUInt8)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(2.5)},                        // 0-dim
      {"empty", torch::zeros({0, 3})},                       // 0 elements
      {"param", torch::randn({3}, torch::requires_grad())},  // detached on save
  };
  const std::string path = file("all.safetensors");
  fbt::save_tensors(path, saved, json::object());
  const fbt::TensorFile loaded = fbt::load_tensors(path);

  ASSERT_EQ(loaded.tensors.size(), saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {  // file order is insertion order
    const auto& [name, want] = saved[i];
    const auto& [got_name, got] = loaded.tensors[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(got_name, name);
    EXPECT_EQ(got.scalar_type(), want.scalar_type());
    EXPECT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_FALSE(got.requires_grad());
    EXPECT_TRUE(torch::equal(got, want.detach()));
    EXPECT_EQ(tensor_bytes(got), tensor_bytes(want.detach()));
  }
  auto loaded_tensor = [&](const std::string& name) {
    for (const auto& [n, t] : loaded.tensors)
      if (n == name) return t;
    throw std::runtime_error("no tensor " + name);
  };
  EXPECT_EQ(loaded_tensor("scalar").dim(), 0);
  EXPECT_EQ(loaded_tensor("scalar").item<float>(), 2.5f);
  // -0.0 in bf16 is 0x8000: only its sign bit is set.
  EXPECT_EQ(tensor_bytes(loaded_tensor("bf16")).substr(0, 2), std::string("\x00\x80", 2));
}

TEST_F(TensorIO, MetadataRoundTrips) {
  const json metadata = {{"format_version", 1},
                         {"config", {{"d_model", 64}, {"rope_theta", 10000.5}, {"name", "é ✓"}}},
                         {"steps", {1, 2, 3}},
                         {"done", true},
                         {"nothing", nullptr}};
  const std::string path = file("meta.safetensors");
  fbt::save_tensors(path, {{"x", torch::ones({2})}}, metadata);
  EXPECT_EQ(fbt::load_tensors(path).metadata, metadata);

  fbt::save_tensors(path, {}, json::array({"no", "tensors"}));
  const fbt::TensorFile empty = fbt::load_tensors(path);
  EXPECT_TRUE(empty.tensors.empty());
  EXPECT_EQ(empty.metadata, json::array({"no", "tensors"}));
}

// A placed tensor is read into the storage the caller gives (no second copy) and is the tensor
// returned; an undefined place gets a new tensor; a place of the wrong shape or dtype is refused.
TEST_F(TensorIO, PlacedTensorsAreReadIntoTheGivenStorage) {
  const std::string path = file("placed.safetensors");
  const auto a = torch::arange(6, torch::kFloat).view({2, 3}), b = torch::arange(4, torch::kLong);
  fbt::save_tensors(path, {{"a", a}, {"b", b}}, json{{"k", 1}});
  auto target = torch::full({2, 3}, -1.0f);
  std::vector<std::string> asked;
  const auto loaded = fbt::load_tensors(path, [&](const json& metadata, const std::string& name,
                                                  const std::vector<int64_t>& shape, torch::ScalarType dtype) {
    EXPECT_EQ(metadata, json({{"k", 1}}));
    asked.push_back(name + (dtype == torch::kFloat ? ":f32" : ":other") + ":" + std::to_string(shape.size()));
    return name == "a" ? target : torch::Tensor();
  });
  EXPECT_EQ(asked, (std::vector<std::string>{"a:f32:2", "b:other:1"}));
  EXPECT_TRUE(torch::equal(target, a));
  EXPECT_EQ(loaded.tensors[0].second.data_ptr(), target.data_ptr());
  EXPECT_TRUE(torch::equal(loaded.tensors[1].second, b));
  for (const auto& wrong : {torch::zeros({3, 2}), torch::zeros({2, 3}, torch::kDouble), torch::zeros({3, 2}).t()})
    EXPECT_THROW(fbt::load_tensors(path, [&](const json&, const std::string&, const std::vector<int64_t>&,
                                             torch::ScalarType) { return wrong; }),
                 fbt::Error);
}

TEST_F(TensorIO, HeaderIsStandardSafetensors) {
  const std::string path = file("std.safetensors");
  fbt::save_tensors(path,
                    {{"w", torch::full({2, 3}, 1.5f)},
                     {"b", torch::ones({4}, torch::kBFloat16)},
                     {"step", torch::tensor(int64_t{7})}},
                    {{"k", "v"}});
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);  // data section 8-byte aligned, as Python's safetensors writes it
  ASSERT_EQ(bytes.size(), 8 + n + 24 + 8 + 8);
  const json header = json::parse(bytes.substr(8, n));

  EXPECT_EQ(header["w"], json::parse(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"));
  EXPECT_EQ(header["b"], json::parse(R"({"dtype":"BF16","shape":[4],"data_offsets":[24,32]})"));
  EXPECT_EQ(header["step"], json::parse(R"({"dtype":"I64","shape":[],"data_offsets":[32,40]})"));
  EXPECT_EQ(header["__metadata__"]["fbt"], R"({"k":"v"})");
  EXPECT_EQ(header["__metadata__"]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(header.size(), 4u);

  // Little-endian payloads: 1.5f = 0x3FC00000, bf16 1.0 = 0x3F80, int64 7.
  const std::string data = bytes.substr(8 + n);
  EXPECT_EQ(data.substr(0, 4), std::string("\x00\x00\xc0\x3f", 4));
  EXPECT_EQ(data.substr(20, 4), std::string("\x00\x00\xc0\x3f", 4));
  EXPECT_EQ(data.substr(24, 2), std::string("\x80\x3f", 2));
  EXPECT_EQ(data.substr(32, 8), std::string("\x07\0\0\0\0\0\0\0", 8));
}

TEST_F(TensorIO, Sha256MatchesKnownVectors) {
  const std::string path = file("sha.safetensors");
  auto stored_sha = [&] {
    const std::string bytes = read_bytes(path);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    return json::parse(bytes.substr(8, n))["__metadata__"]["sha256"].get<std::string>();
  };
  // FIPS 180-2 test vector: sha256("abc").
  fbt::save_tensors(path, {{"abc", torch::tensor({97, 98, 99}, torch::kUInt8)}}, nullptr);
  EXPECT_EQ(stored_sha(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  fbt::save_tensors(path, {}, nullptr);  // sha256 of the empty string
  EXPECT_EQ(stored_sha(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_F(TensorIO, TruncatedOrExtendedFileIsRejected) {
  const std::string path = file("trunc.safetensors");
  fbt::save_tensors(path, {{"w", torch::randn({64, 64})}}, json::object());
  const auto size = fs::file_size(path);

  fs::resize_file(path, size - 1);
  std::string msg = error_of([&] { fbt::load_tensors(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(size)), std::string::npos) << msg;      // expected size
  EXPECT_NE(msg.find(std::to_string(size - 1)), std::string::npos) << msg;  // actual size

  fs::resize_file(path, size / 2);
  msg = error_of([&] { fbt::load_tensors(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  fbt::save_tensors(path, {{"w", torch::randn({64, 64})}}, json::object());
  std::ofstream(path, std::ios::binary | std::ios::app) << 'x';
  msg = error_of([&] { fbt::load_tensors(path); });
  EXPECT_NE(msg.find("extended"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(size + 1)), std::string::npos) << msg;
}

TEST_F(TensorIO, FlippedDataByteIsReportedAsCorrupt) {
  const std::string path = file("flip.safetensors");
  fbt::save_tensors(path, {{"a", torch::randn({8})}, {"b", torch::arange(16)}}, json::object());
  std::string bytes = read_bytes(path);
  bytes[bytes.size() - 5] ^= 0x10;  // inside tensor "b"
  write_bytes(path, bytes);
  const std::string msg = error_of([&] { fbt::load_tensors(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("corrupt"), std::string::npos) << msg;
}

// Issue 21 item 11: a same-length edit of the header (here a metadata value) keeps every size
// valid and the data checksum right, and is caught by header_sha256.
TEST_F(TensorIO, SameLengthHeaderEditIsReportedAsCorrupt) {
  const std::string path = file("edit.safetensors");
  fbt::save_tensors(path, {{"w", torch::randn({4})}}, json{{"rope_theta", 10000.0}});
  std::string bytes = read_bytes(path);
  const auto at = bytes.find("10000.0");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 7, "90000.0");
  write_bytes(path, bytes);
  const std::string msg = error_of([&] { fbt::load_tensors(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("header checksum mismatch"), std::string::npos) << msg;
}

TEST_F(TensorIO, GarbageFileIsRejected) {
  const std::string path = file("garbage.bin");
  const std::string cases[] = {
      "",                                                      // empty
      "abc",                                                   // shorter than the length field
      "this is not a tensor file, just some text\n",           // absurd header length
      safetensors_file("{not json", ""),                       // header is not JSON
      safetensors_file("[1, 2, 3]", ""),                       // header is not an object
      safetensors_file(R"({"x": {"dtype": "F32"}})", "data"),  // no shape, no metadata
      safetensors_file("{}", ""),                              // valid JSON, no __metadata__
  };
  for (const std::string& bytes : cases) {
    SCOPED_TRACE(bytes);
    write_bytes(path, bytes);
    const std::string msg = error_of([&] { fbt::load_tensors(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
  const std::string msg = error_of([&] { fbt::load_tensors(dir_.string()); });  // a directory
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
}

TEST_F(TensorIO, MalformedHeaderEntriesAreRejected) {
  const std::string path = file("bad.safetensors");
  const std::string meta = R"("__metadata__": {"fbt": "{}", "sha256": ")" + std::string(64, '0') + R"("})";
  auto load_error = [&](const std::string& entries, const std::string& data) {
    write_bytes(path, safetensors_file("{" + entries + ", " + meta + "}", data));
    return error_of([&] { fbt::load_tensors(path); });
  };
  const std::string data(16, '\0');
  std::string msg = load_error(R"("x": {"dtype": "C64", "shape": [2], "data_offsets": [0, 16]})", data);
  EXPECT_NE(msg.find("dtype"), std::string::npos) << msg;
  msg = load_error(R"("x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]})", data);
  EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
  msg = load_error(R"("x": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]})", data);
  EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
  msg = load_error(R"("x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]})",
                   data);
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
  msg = load_error(R"("x": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]})", data);
  EXPECT_NE(msg.find("gap"), std::string::npos) << msg;
  msg = load_error(R"("x": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]})", data);
  EXPECT_NE(msg.find("data_offsets"), std::string::npos) << msg;
  // Well-formed but the stored checksum is wrong.
  msg = load_error(R"("x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})", data);
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
}

TEST_F(TensorIO, MissingFileIsNamed) {
  const std::string path = file("does_not_exist.safetensors");
  const std::string msg = error_of([&] { fbt::load_tensors(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST_F(TensorIO, FailedSaveLeavesExistingFileIntact) {
  const std::string path = file("ckpt.safetensors");
  fbt::save_tensors(path, {{"w", torch::randn({5, 5})}}, {{"step", 1}});
  const std::string before = read_bytes(path);

  // Unsupported dtype.
  std::string msg = error_of([&] {
    fbt::save_tensors(path, {{"w", torch::randn({5, 5})}, {"z", torch::zeros({2}, torch::kComplexFloat)}},
                      {{"step", 2}});
  });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'z'"), std::string::npos) << msg;
  // Duplicate and reserved names.
  EXPECT_THROW(fbt::save_tensors(path, {{"w", torch::ones({1})}, {"w", torch::ones({1})}}, {}), fbt::Error);
  EXPECT_THROW(fbt::save_tensors(path, {{"__metadata__", torch::ones({1})}}, {}), fbt::Error);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(fbt::load_tensors(path).metadata, json({{"step", 1}}));

  // Target directory does not exist.
  const std::string missing = file("no_such_dir/ckpt.safetensors");
  msg = error_of([&] { fbt::save_tensors(missing, {{"w", torch::ones({1})}}, {}); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(file("no_such_dir")));

  // The final rename fails (the target is a non-empty directory): the written tmp is removed.
  const std::string target = file("occupied");
  fs::create_directories(target);
  write_bytes(target + "/keep", "keep");
  msg = error_of([&] { fbt::save_tensors(target, {{"w", torch::ones({1})}}, {}); });
  EXPECT_NE(msg.find(target), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(target + ".tmp"));
  EXPECT_EQ(read_bytes(target + "/keep"), "keep");
}

}  // namespace
