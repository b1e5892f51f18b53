// `fbt prepare`: corpus reading, the train/val split, and the CLI end to end (files, meta counts,
// refusing to overwrite, bad-input errors).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fbt/data/shards.h"
#include "fbt/util/error.h"
#include "cli_test_helpers.h"
#include "temp_dir.h"
#include "fbt/data/prepare.h"
#include "fbt/data/tokenizer.h"
#include "fbt/util/hash.h"
#include "shared_data.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

using testing::TempDir;

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

using testing::slurp;

struct CliRun {
  int rc;
  std::string output;  // stdout + stderr
};

/// Runs the fbt CLI with `args` (already shell-quoted where needed).
CliRun fbt_cli(const std::string& args, const fs::path& log) {
  const std::string cmd = std::string(FBT_CLI) + " " + args + " > " + log.string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(log)};
}

std::vector<int64_t> shard_tokens(const TokenShard& s) {
  std::vector<int64_t> out(static_cast<size_t>(s.size()));
  s.read(0, s.size(), out.data());
  return out;
}

/// Decodes a shard document by document (split at `eos`).
std::vector<std::string> decode_documents(const TokenShard& s, const Tokenizer& tok) {
  std::vector<std::string> docs;
  std::vector<int64_t> cur;
  for (int64_t id : shard_tokens(s)) {
    if (id == tok.eos_id()) {
      docs.push_back(tok.decode(cur));
      cur.clear();
    } else {
      cur.push_back(id);
    }
  }
  EXPECT_TRUE(cur.empty()) << "shard must end with EOS";
  return docs;
}

TEST(PrepareSplit, ByDocumentIsSeededAndKeepsOrder) {
  std::vector<std::string> docs;
  for (int i = 0; i < 20; ++i) docs.push_back("doc" + std::to_string(i));
  const TrainValSplit a = split_train_val(docs, 0.25, 5), b = split_train_val(docs, 0.25, 5);
  EXPECT_EQ(a.val.size(), 5u);
  EXPECT_EQ(a.train.size(), 15u);
  EXPECT_EQ(a.val, b.val);
  std::vector<std::string> all = a.train;
  all.insert(all.end(), a.val.begin(), a.val.end());
  std::sort(all.begin(), all.end());
  std::vector<std::string> sorted = docs;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(all, sorted);
  auto index = [](const std::string& d) { return std::stoi(d.substr(3)); };
  for (size_t i = 1; i < a.train.size(); ++i) EXPECT_LT(index(a.train[i - 1]), index(a.train[i]));
  bool some_seed_differs = false;
  for (uint64_t seed = 6; seed < 10; ++seed) some_seed_differs |= split_train_val(docs, 0.25, seed).val != a.val;
  EXPECT_TRUE(some_seed_differs);
  // Tiny fractions still give one val document; huge ones leave one train document.
  EXPECT_EQ(split_train_val({"a", "b", "c"}, 0.01, 1).val.size(), 1u);
  EXPECT_EQ(split_train_val({"a", "b", "c"}, 0.99, 1).train.size(), 1u);
}

TEST(PrepareSplit, SingleDocumentIsCutAtALineBoundary) {
  std::string doc;
  for (int i = 0; i < 10; ++i) doc += "line " + std::to_string(i) + "\n";  // 7 bytes a line
  const TrainValSplit s = split_train_val({doc}, 0.1, 1);
  ASSERT_EQ(s.train.size(), 1u);
  ASSERT_EQ(s.val.size(), 1u);
  EXPECT_EQ(s.train[0], doc.substr(0, 63));  // 90% of 70 bytes = 63 = end of line 8
  EXPECT_EQ(s.val[0], "line 9\n");
  // The cut moves forward to the next line end...
  EXPECT_EQ(split_train_val({doc}, 0.15, 1).val[0], "line 9\n");
  // ...or back to the previous one when none is left after it.
  EXPECT_EQ(split_train_val({"aaaa\nbbbbbbbbbbbb"}, 0.1, 1).val[0], "bbbbbbbbbbbb");
  // No newline: cut at the next UTF-8 character boundary (40% of 10 bytes lands inside "\xC3\xA9").
  const TrainValSplit u = split_train_val({"abc\xC3\xA9"
                                           "defgh"},
                                          0.6, 1);
  EXPECT_EQ(u.train[0], "abc\xC3\xA9");
  EXPECT_EQ(u.val[0], "defgh");
  EXPECT_THROW(split_train_val({"x"}, 0.1, 1), Error);
}

TEST(PrepareCorpus, FilesDirectoriesJsonlAndBlankLineDocuments) {
  TempDir dir;
  write(dir.path / "d" / "b.txt", "bee");
  write(dir.path / "d" / "a.txt", "ay");
  write(dir.path / "d" / "sub" / "c.txt", "sea");
  write(dir.path / "d" / ".hidden", "skip me");
  write(dir.path / "d" / "empty.txt", "");
  write(dir.path / "r.jsonl", "{\"text\": \"one\", \"id\": 1}\n\n{\"text\": \"two\"}\n{\"text\": \"\"}\n");
  write(dir.path / "blocks.txt", "p1 l1\np1 l2\n\n \t\np2\n\n\np3 \r\n");
  const Corpus c = read_corpus({(dir.path / "d").string(), (dir.path / "r.jsonl").string()}, "text", "file");
  EXPECT_EQ(c.documents, (std::vector<std::string>{"ay", "bee", "sea", "one", "two"}));
  ASSERT_EQ(c.sources.size(), 5u);  // a, b, empty, sub/c, r.jsonl
  EXPECT_EQ(fs::path(c.sources[2].path).filename(), "empty.txt");
  EXPECT_EQ(c.sources[4].documents, 2);
  EXPECT_EQ(c.sources[0].sha256, sha256_hex("ay", 2));
  EXPECT_EQ(c.sources[0].bytes, 2);

  const Corpus b = read_corpus({(dir.path / "blocks.txt").string()}, "text", "blank");
  EXPECT_EQ(b.documents, (std::vector<std::string>{"p1 l1\np1 l2", "p2", "p3 \r"}));
}

TEST(PrepareCorpus, BadInputsNameTheInput) {
  TempDir dir;
  auto expect_error = [](const std::vector<std::string>& inputs, const std::string& part) {
    try {
      read_corpus(inputs, "text", "file");
      ADD_FAILURE() << "expected fbt::Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  const std::string missing = (dir.path / "nope.txt").string();
  expect_error({missing}, missing);
  write(dir.path / "empty.txt", "");
  expect_error({(dir.path / "empty.txt").string()}, "empty.txt");
  fs::create_directories(dir.path / "emptydir");
  expect_error({(dir.path / "emptydir").string()}, "emptydir");
  write(dir.path / "bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  expect_error({(dir.path / "bad.jsonl").string()}, "bad.jsonl:2");
  expect_error({(dir.path / "bad.jsonl").string()}, "\"text\"");
  write(dir.path / "broken.jsonl", "{\"text\": \n");
  expect_error({(dir.path / "broken.jsonl").string()}, "broken.jsonl:1");
  write(dir.path / "sub" / "x.txt", "x");
  expect_error({(dir.path / "sub" / "x.txt").string(), (dir.path / "sub").string()}, "given twice");
}

// Documents that do not round-trip are blamed on their real cause: invalid UTF-8, or an external
// model's whitespace settings (issue: both were reported as "invalid UTF-8"). BPE training says
// how many lines it cut.
TEST(PrepareLossy, WarningsNameTheRealCauseAndTheCutLines) {
  TempDir dir;
  // 3 documents per case so both splits exist; one has leading and doubled spaces.
  write(dir.path / "ws" / "a.txt", "the quick brown fox\njumps over the lazy dog\n");
  write(dir.path / "ws" / "b.txt", "  two  leading spaces and  doubled ones\n");
  write(dir.path / "ws" / "c.txt", "another plain line of text\n");
  const int rc =
      std::system(("cd " + dir.path.string() +
                   " && cat ws/*.txt > all.txt && spm_train --input=all.txt "
                   "--model_prefix=ext --model_type=bpe --vocab_size=300 --normalization_rule_name=identity "
                   "--byte_fallback=true --hard_vocab_limit=false --pad_id=3 --minloglevel=2 > /dev/null 2>&1")
                      .c_str());
  ASSERT_EQ(rc, 0);
  PrepareOptions o;
  o.inputs = {(dir.path / "ws").string()};
  o.out_dir = (dir.path / "d1").string();
  o.tokenizer_model = (dir.path / "ext.model").string();
  std::ostringstream log1;
  prepare_dataset(o, log1);
  EXPECT_NE(log1.str().find("1 document(s) of valid UTF-8 do not round-trip exactly"), std::string::npos) << log1.str();
  EXPECT_NE(log1.str().find("add_dummy_prefix=true, remove_extra_whitespaces=true"), std::string::npos) << log1.str();
  EXPECT_EQ(log1.str().find("invalid UTF-8"), std::string::npos) << log1.str();

  // fbt's own BPE model: only the invalid UTF-8 document is lossy. Each document has one line of
  // 5000 bytes, so the 2 training documents give 2 lines cut into pieces (of 4096 + 904 bytes).
  write(dir.path / "bad" / "a.txt", "plain text\n" + std::string(5000, 'y') + "\n");
  write(dir.path / "bad" / "b.txt", "bytes \xFF\xFE here\n" + std::string(5000, 'z') + "\n");
  write(dir.path / "bad" / "c.txt", "more plain text\n" + std::string(5000, 'w') + "\n");
  o.inputs = {(dir.path / "bad").string()};
  o.out_dir = (dir.path / "d2").string();
  o.tokenizer_model.clear();
  o.vocab_size = 300;
  std::ostringstream log2;
  prepare_dataset(o, log2);
  EXPECT_NE(log2.str().find("BPE training lines: 4 non-empty line(s); 2 longer than 4096 bytes, cut into pieces (6 "
                            "training lines)"),
            std::string::npos)
      << log2.str();
  EXPECT_NE(log2.str().find("1 document(s) hold invalid UTF-8"), std::string::npos) << log2.str();
  EXPECT_EQ(log2.str().find("of valid UTF-8 do not round-trip"), std::string::npos) << log2.str();
  EXPECT_NE(log2.str().find("BPE training lines: "), std::string::npos) << log2.str();
}

TEST(PrepareCli, ByteTokenizerEndToEnd) {
  TempDir dir;
  const std::vector<std::string> texts = {"First document.\nSecond line.\n", "caf\xC3\xA9 \xFF\xFE raw bytes", "third",
                                          "fourth one\n", "fifth!"};
  std::string inputs;
  int64_t total_bytes = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    write(dir.path / "in" / ("f" + std::to_string(i) + ".txt"), texts[i]);
    total_bytes += static_cast<int64_t>(texts[i].size());
  }
  const fs::path out = dir.path / "out";
  const CliRun r = fbt_cli("prepare --input " + (dir.path / "in").string() + " --out " + out.string() +
                               " --tokenizer byte --val-fraction 0.4 --seed 3",
                           dir.path / "log");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(fs::exists(out / "train.bin"));
  EXPECT_TRUE(fs::exists(out / "val.bin"));
  EXPECT_FALSE(fs::exists(out / "tokenizer.model"));
  for (const auto& e : fs::directory_iterator(out))  // no temp files left
    EXPECT_NE(e.path().filename().string()[0], '.') << e.path();

  const nlohmann::json meta = read_dataset_meta(out.string());
  EXPECT_EQ(meta["tokenizer"]["type"], "byte");
  EXPECT_EQ(meta["tokenizer"]["vocab_size"], 259);
  EXPECT_EQ(meta["tokenizer"]["eos_id"], 258);
  EXPECT_EQ(meta["options"]["seed"], 3);
  EXPECT_EQ(meta["options"]["val_fraction"], 0.4);
  EXPECT_EQ(meta["sources"].size(), 5u);
  EXPECT_EQ(meta["splits"]["val"]["documents"], 2);  // round(0.4 * 5)
  EXPECT_EQ(meta["splits"]["train"]["documents"], 3);

  auto tok = Tokenizer::load(out.string());
  std::vector<std::string> decoded;
  int64_t bytes = 0;
  for (const char* split : {"train", "val"}) {
    const TokenShard s = open_split(out.string(), split);
    EXPECT_EQ(meta["splits"][split]["tokens"], s.size());
    EXPECT_EQ(meta["splits"][split]["sha256"], sha256_hex_file((out / (std::string(split) + ".bin")).string()));
    const auto docs = decode_documents(s, *tok);
    EXPECT_EQ(meta["splits"][split]["documents"], docs.size());
    int64_t split_bytes = 0;
    for (const auto& d : docs) split_bytes += static_cast<int64_t>(d.size());
    EXPECT_EQ(meta["splits"][split]["bytes"], split_bytes);
    // Byte tokenizer: one token per byte plus one EOS per document.
    EXPECT_EQ(s.size(), split_bytes + static_cast<int64_t>(docs.size()));
    bytes += split_bytes;
    decoded.insert(decoded.end(), docs.begin(), docs.end());
  }
  EXPECT_EQ(bytes, total_bytes);
  std::sort(decoded.begin(), decoded.end());
  std::vector<std::string> expected = texts;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(decoded, expected);  // exact, invalid UTF-8 included
  EXPECT_EQ(meta["lossy_documents"], 0);
}

TEST(PrepareCli, BpeEndToEndReuseAndOverwriteRules) {
  FBT_SKIP_WITHOUT_SHARED_DATA("tinyshakespeare/input.txt");
  TempDir dir;
  const std::string shakespeare = slurp(FBT_SHARED_DATA "/tinyshakespeare/input.txt");
  std::vector<std::string> texts;
  for (int i = 0; i < 4; ++i) {
    texts.push_back(shakespeare.substr(static_cast<size_t>(i) * 40'000, 40'000));
    write(dir.path / "in" / ("part" + std::to_string(i) + ".txt"), texts.back());
  }
  const fs::path out = dir.path / "out", log = dir.path / "log";
  const std::string base = "prepare --input " + (dir.path / "in").string() + " --out " + out.string() +
                           " --vocab-size 400 --val-fraction 0.25";
  CliRun r = fbt_cli(base, log);
  ASSERT_EQ(r.rc, 0) << r.output;
  ASSERT_TRUE(fs::exists(out / "tokenizer.model"));
  const nlohmann::json meta = read_dataset_meta(out.string());
  EXPECT_EQ(meta["tokenizer"]["type"], "bpe");
  EXPECT_EQ(meta["tokenizer"]["vocab_size"], 400);
  EXPECT_EQ(meta["tokenizer"]["model_sha256"], sha256_hex_file((out / "tokenizer.model").string()));
  EXPECT_EQ(meta["splits"]["val"]["documents"], 1);
  auto tok = Tokenizer::load(out.string());
  int64_t bytes = 0;
  std::vector<std::string> decoded;
  for (const char* split : {"train", "val"}) {
    const TokenShard s = open_split(out.string(), split);
    EXPECT_EQ(meta["splits"][split]["tokens"], s.size());
    EXPECT_LT(s.size(), 0.8 * meta["splits"][split]["bytes"].get<double>());  // BPE compresses
    const auto docs = decode_documents(s, *tok);
    EXPECT_EQ(meta["splits"][split]["documents"], docs.size());
    for (const auto& d : docs) bytes += static_cast<int64_t>(d.size());
    decoded.insert(decoded.end(), docs.begin(), docs.end());
  }
  EXPECT_EQ(bytes, 160'000);
  std::sort(decoded.begin(), decoded.end());
  std::sort(texts.begin(), texts.end());
  EXPECT_EQ(decoded, texts);  // valid UTF-8 round-trips exactly through BPE

  // Same dataset again: nothing rewritten.
  const auto stamp = fs::last_write_time(out / "train.bin");
  r = fbt_cli(base, log);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("nothing to do"), std::string::npos) << r.output;
  EXPECT_EQ(fs::last_write_time(out / "train.bin"), stamp);

  // A different dataset (other seed) is refused and leaves the old one intact...
  const std::string old_meta = slurp(out / "meta.json");
  r = fbt_cli(base + " --seed 9", log);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("different"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--force"), std::string::npos) << r.output;
  EXPECT_EQ(slurp(out / "meta.json"), old_meta);
  EXPECT_EQ(fs::last_write_time(out / "train.bin"), stamp);

  // ...unless forced; reusing the tokenizer model and switching to the byte tokenizer also work.
  const fs::path model_copy = dir.path / "reuse.model";
  fs::copy_file(out / "tokenizer.model", model_copy);
  r = fbt_cli(base + " --seed 9 --force", log);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(read_dataset_meta(out.string())["options"]["seed"], 9);
  const fs::path out2 = dir.path / "out2";
  r = fbt_cli("prepare --input " + (dir.path / "in").string() + " --out " + out2.string() + " --tokenizer-model " +
                  model_copy.string(),
              log);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(slurp(out2 / "tokenizer.model"), slurp(model_copy));
  r = fbt_cli("prepare --input " + (dir.path / "in").string() + " --out " + out.string() + " --tokenizer byte --force",
              log);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_FALSE(fs::exists(out / "tokenizer.model"));
  EXPECT_EQ(Tokenizer::load(out.string())->type(), "byte");
}

TEST(PrepareCli, BadInputsFailWithoutWritingAnything) {
  TempDir dir;
  const fs::path out = dir.path / "out", log = dir.path / "log";
  const std::string missing = (dir.path / "missing.txt").string();
  CliRun r = fbt_cli("prepare --input " + missing + " --out " + out.string(), log);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find(missing), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));

  write(dir.path / "empty.txt", "");
  r = fbt_cli("prepare --input " + (dir.path / "empty.txt").string() + " --out " + out.string(), log);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("empty.txt"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));

  write(dir.path / "tiny.txt", "x");
  r = fbt_cli("prepare --input " + (dir.path / "tiny.txt").string() + " --out " + out.string() + " --tokenizer byte",
              log);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("too small"), std::string::npos) << r.output;

  r = fbt_cli("prepare --input " + (dir.path / "tiny.txt").string() + " --out " + out.string() + " --no-such-flag",
              log);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("no-such-flag"), std::string::npos) << r.output;

  r = fbt_cli("prepare --input " + (dir.path / "tiny.txt").string() + " --out " + out.string() + " --val-fraction 1.5",
              log);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("--val-fraction"), std::string::npos) << r.output;

  // A foreign file named like ours in --out is not overwritten.
  write(out / "train.bin", "precious");
  write(dir.path / "ok.txt", "hello\nworld\n");
  r = fbt_cli("prepare --input " + (dir.path / "ok.txt").string() + " --out " + out.string() + " --tokenizer byte",
              log);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(slurp(out / "train.bin"), "precious");
}

}  // namespace
}  // namespace fbt
