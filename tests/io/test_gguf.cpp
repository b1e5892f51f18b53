// GGUF reader (issue 17): the tiny fixtures of tests/fixtures/gguf read back with their metadata
// and tensor table, and damaged copies (truncated, bad magic, bad version, a huge count, an
// unsupported tensor type) are fbt::Errors naming the file and what is wrong.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_test_helpers.h"
#include "expect_error.h"
#include "fbt/io/gguf.h"
#include "fbt/io/gguf_import.h"
#include "temp_dir.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;

const fs::path kGgufDir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "gguf";
const std::string kLlama = (kGgufDir / "llama_tied_f32.gguf").string();

TEST(Gguf, ReadsMetadataAndTensorInfos) {
  const auto f = read_gguf(kLlama);
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.metadata.at("general.architecture"), "llama");
  EXPECT_EQ(f.metadata.at("llama.block_count"), 2);
  EXPECT_NEAR(f.metadata.at("llama.attention.layer_norm_rms_epsilon").get<double>(), 1e-5, 1e-12);  // FLOAT32
  EXPECT_EQ(f.metadata.at("tokenizer.ggml.tokens").size(), 384u);  // an array of strings
  EXPECT_EQ(f.metadata.at("tokenizer.ggml.tokens")[0], "<|begin_of_text|>");
  EXPECT_EQ(f.alignment, 32u);
  EXPECT_EQ(f.data_offset % 32, 0u);
  const auto* embd = f.find("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->ne, (std::vector<int64_t>{64, 384}));       // fastest first
  EXPECT_EQ(embd->shape(), (std::vector<int64_t>{384, 64}));  // V rows of D
  const auto t = read_gguf_tensor(f, *embd);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{384, 64}));
  EXPECT_EQ(t.scalar_type(), torch::kFloat);
  EXPECT_EQ(f.find("output.weight"), nullptr);  // tied
}

/// A copy of `src` in `dir` named `name` with `edit` applied to its bytes.
std::string damaged(const fs::path& dir, const std::string& name, const std::string& src,
                    const std::function<void(std::string&)>& edit) {
  auto bytes = testing::slurp(src);
  edit(bytes);
  const auto path = (dir / name).string();
  testing::write_file(path, bytes);
  return path;
}

/// The byte offset just after the first occurrence of `s` in `bytes`.
size_t after(const std::string& bytes, const std::string& s) {
  const auto at = bytes.find(s);
  EXPECT_NE(at, std::string::npos) << s;
  return at + s.size();
}

TEST(Gguf, TruncatedFilesNameWhereTheyEnd) {
  testing::TempDir tmp;
  const auto size = fs::file_size(kLlama);
  for (size_t keep : {size_t{0}, size_t{6}, size_t{20}, size_t{300}, size_t{3000}}) {
    SCOPED_TRACE(keep);
    const auto path = damaged(tmp.path, "cut.gguf", kLlama, [&](std::string& b) { b.resize(keep); });
    expect_error([&] { read_gguf(path); }, {"'" + path + "'", "truncated"});
  }
  const auto path = damaged(tmp.path, "cut.gguf", kLlama, [&](std::string& b) { b.resize(size - 100); });
  expect_error([&] { read_gguf(path); }, {"'" + path + "'", "tensor '", "past the end of the file", "truncated?"});
  expect_error([&] { import_gguf_model(path); }, {path, "past the end of the file"});
}

TEST(Gguf, CorruptHeadersAreNamed) {
  testing::TempDir tmp;
  auto path = damaged(tmp.path, "magic.gguf", kLlama, [](std::string& b) { b[0] = 'X'; });
  expect_error([&] { read_gguf(path); }, {path, "not a GGUF file"});
  path = damaged(tmp.path, "version.gguf", kLlama, [](std::string& b) { b[4] = 9; });
  expect_error([&] { read_gguf(path); }, {path, "GGUF version 9 is not supported"});
  // A metadata count of 2^40: refused before anything is allocated.
  path = damaged(tmp.path, "count.gguf", kLlama, [](std::string& b) { b[16 + 5] = 1; });
  expect_error([&] { read_gguf(path); }, {path, "metadata entries", "more than the file can hold"});
  // The token list's element count set to 2^40.
  path = damaged(tmp.path, "array.gguf", kLlama,
                 [](std::string& b) { b[after(b, "tokenizer.ggml.tokens") + 4 + 4 + 5] = 1; });
  expect_error([&] { read_gguf(path); }, {path, "metadata 'tokenizer.ggml.tokens'", "elements cannot fit"});
  expect_error([&] { read_gguf(tmp.path.string()); }, {tmp.path.string(), "is not a file"});
  expect_error([&] { read_gguf((tmp.path / "none.gguf").string()); }, {"none.gguf"});
}

// Issue 36 item 4: GGUF strings are UTF-8 (docs/gguf.md, gguf_string_t). A value, an element of
// a string array (token pieces included), a key or a tensor name that is not is an fbt::Error
// naming the file and the key, element or tensor; before, a bad byte in general.name surfaced as
// nlohmann's "invalid UTF-8 byte at index 0" only when the import wrote JSON, and one in
// tokenizer.chat_template was accepted silently.
TEST(Gguf, InvalidUtf8StringsNameTheKey) {
  testing::TempDir tmp;
  struct Case {
    std::string from, to, named;
  };
  const std::vector<Case> cases = {
      {"llama_tied_f32",
       "\xFF"
       "lama_tied_f32",
       "metadata 'general.name'"},  // not a UTF-8 byte
      {"llama_tied_f32",
       "\xC0\xAF"
       "ama_tied_f32",
       "metadata 'general.name'"},  // overlong '/'
      {"llama_tied_f32",
       "\xED\xA0\x80"
       "ma_tied_f32",
       "metadata 'general.name'"},  // a UTF-16 surrogate
      {"{{ bos_token }}",
       "\x80"
       "{ bos_token }}",
       "metadata 'tokenizer.chat_template'"},  // a lone continuation
      {"<|begin_of_text|>",
       "<|begin_of_text"
       "\xE2\x96",
       "metadata 'tokenizer.ggml.tokens'[0]"},  // cut short
      {"general.name",
       "general.nam"
       "\xFF",
       "the key of metadata entry 1"},
      {"token_embd.weight",
       "token_embd.weigh"
       "\xFF",
       "(name)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.to);
    ASSERT_EQ(c.from.size(), c.to.size());  // every offset stays valid
    const auto path = damaged(tmp.path, "utf8.gguf", kLlama,
                              [&](std::string& b) { b.replace(after(b, c.from) - c.from.size(), c.to.size(), c.to); });
    expect_error([&] { read_gguf(path); }, {"'" + path + "': ", c.named, " is not valid UTF-8"});
  }
  const auto path =
      damaged(tmp.path, "name.gguf", kLlama, [](std::string& b) { b[after(b, "general.name") + 12] = '\xFF'; });
  expect_error([&] { import_gguf_model(path); }, {"'" + path + "': metadata 'general.name' is not valid UTF-8"});
}

TEST(Gguf, UnsupportedTensorTypeIsNamed) {
  testing::TempDir tmp;
  // blk.0.ffn_up.weight's info: name, n_dims (4 bytes), 2 dims (16 bytes), then its type: IQ4_XS (23).
  const auto path =
      damaged(tmp.path, "iq4xs.gguf", kLlama, [](std::string& b) { b[after(b, "blk.0.ffn_up.weight") + 4 + 16] = 23; });
  const auto f = read_gguf(path);  // the table itself is fine
  expect_error([&] { read_gguf_tensor(f, *f.find("blk.0.ffn_up.weight")); },
               {path, "tensor 'blk.0.ffn_up.weight'", "type IQ4_XS", "cannot dequantize", "Q4_K, Q5_K, Q6_K"});
  expect_error([&] { import_gguf_model(path); }, {path, "blk.0.ffn_up.weight", "IQ4_XS"});
}

// A K type needs rows of whole 256-value super-blocks: the fixture's ffn_up rows (64 values) as
// Q4_K are refused when the table is read, before any data is.
TEST(Gguf, KQuantRowsMustBeWholeSuperBlocks) {
  testing::TempDir tmp;
  const auto path =
      damaged(tmp.path, "q4k.gguf", kLlama, [](std::string& b) { b[after(b, "blk.0.ffn_up.weight") + 4 + 16] = 12; });
  expect_error([&] { read_gguf(path); },
               {path, "tensor 'blk.0.ffn_up.weight'", "row length 64 is not a multiple of Q4_K's block of 256"});
}

}  // namespace
}  // namespace fbt
