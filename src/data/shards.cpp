// Token shard writer, memory-mapped reader, dataset meta reader and batch loaders (see data.h).
#include "fbt/data/shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "fbt/util/error.h"
#include "fbt/util/hash.h"
#include "fbt/util/json_fields.h"
#include "fbt/util/out_of_memory.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are read in host byte order");

namespace fbt {
namespace {

struct Header {
  char magic[8];
  uint32_t version, vocab_size, dtype, reserved;
  uint64_t count;
};
static_assert(sizeof(Header) == kShardHeaderBytes, "shard header must be 32 bytes");

int64_t dtype_width(uint32_t dtype) { return dtype == kShardDtypeU16 ? 2 : 4; }

void check_loader_shape(const std::string& what, int64_t batch, int64_t seq, int64_t rank, int64_t world_size) {
  if (batch < 1 || seq < 1)
    throw Error(what + ": batch and seq must be >= 1 (got batch " + std::to_string(batch) + ", seq " +
                std::to_string(seq) + ")");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw Error(what + ": rank " + std::to_string(rank) + " is outside [0, world_size " + std::to_string(world_size) +
                ")");
}

}  // namespace

uint32_t shard_dtype_for_vocab(int64_t vocab_size) { return vocab_size <= 65535 ? kShardDtypeU16 : kShardDtypeU32; }

// ---- ShardWriter ----

ShardWriter::ShardWriter(const std::string& path, int64_t vocab_size)
    : path_(path), vocab_size_(vocab_size), dtype_(shard_dtype_for_vocab(vocab_size)) {
  if (vocab_size < 1 || vocab_size > int64_t{UINT32_MAX})
    throw Error(path + ": vocab size " + std::to_string(vocab_size) + " is outside [1, 2^32)");
  out_.open(path, std::ios::binary | std::ios::trunc);
  if (!out_) throw Error("cannot create token shard '" + path + "'");
  Header h{};
  std::memcpy(h.magic, kShardMagic, sizeof h.magic);
  h.version = kShardVersion;
  h.vocab_size = static_cast<uint32_t>(vocab_size);
  h.dtype = dtype_;
  out_.write(reinterpret_cast<const char*>(&h), sizeof h);
}

void ShardWriter::append(const std::vector<int64_t>& tokens) {
  for (int64_t t : tokens)
    if (t < 0 || t >= vocab_size_)
      throw Error(path_ + ": token id " + std::to_string(t) + " is outside [0, " + std::to_string(vocab_size_) + ")");
  if (dtype_ == kShardDtypeU16) {
    std::vector<uint16_t> buf(tokens.begin(), tokens.end());
    out_.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size() * 2));
  } else {
    std::vector<uint32_t> buf(tokens.begin(), tokens.end());
    out_.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size() * 4));
  }
  count_ += static_cast<int64_t>(tokens.size());
}

void ShardWriter::close() {
  const uint64_t count = static_cast<uint64_t>(count_);
  out_.seekp(offsetof(Header, count));
  out_.write(reinterpret_cast<const char*>(&count), sizeof count);
  out_.close();
  if (!out_) throw Error("I/O error writing token shard '" + path_ + "'");
}

// ---- TokenShard ----

struct TokenShard::Mapping {
  std::string path;
  const unsigned char* base = nullptr;  // whole file, header included
  size_t bytes = 0;
  int64_t count = 0, vocab = 0, width = 0;
  ~Mapping() {
    if (base) munmap(const_cast<unsigned char*>(base), bytes);
  }
};

TokenShard TokenShard::open(const std::string& path, int64_t expected_vocab) {
  auto m = std::make_shared<Mapping>();
  m->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open token shard '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error("cannot stat token shard '" + path + "'");
  }
  const auto actual = static_cast<uint64_t>(st.st_size);
  if (actual < static_cast<uint64_t>(kShardHeaderBytes)) {
    ::close(fd);
    throw Error("token shard '" + path + "' is truncated: " + std::to_string(actual) +
                " bytes, smaller than the 32-byte header");
  }
  void* p = mmap(nullptr, actual, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw Error("cannot mmap token shard '" + path + "': " + std::strerror(errno));
  m->base = static_cast<const unsigned char*>(p);
  m->bytes = actual;

  Header h;
  std::memcpy(&h, m->base, sizeof h);
  if (std::memcmp(h.magic, kShardMagic, sizeof h.magic) != 0)
    throw Error("'" + path + "' is not an fbt token shard (bad magic; expected \"FBTTOKS\\0\")");
  if (h.version != kShardVersion)
    throw Error("token shard '" + path + "' has format version " + std::to_string(h.version) +
                "; this build reads version " + std::to_string(kShardVersion));
  if (h.dtype != kShardDtypeU16 && h.dtype != kShardDtypeU32)
    throw Error("token shard '" + path + "' has unknown dtype code " + std::to_string(h.dtype));
  if (h.vocab_size == 0 || h.dtype != shard_dtype_for_vocab(h.vocab_size))
    throw Error("token shard '" + path + "': dtype code " + std::to_string(h.dtype) + " does not match vocab size " +
                std::to_string(h.vocab_size));
  if (expected_vocab >= 0 && h.vocab_size != expected_vocab)
    throw Error("token shard '" + path + "' has vocab size " + std::to_string(h.vocab_size) + ", expected " +
                std::to_string(expected_vocab));
  const int64_t width = dtype_width(h.dtype);
  if (h.count > (actual - kShardHeaderBytes) / width || actual != kShardHeaderBytes + h.count * width) {
    const std::string expected =
        h.count > (uint64_t{1} << 60) ? "more than 2^60" : std::to_string(kShardHeaderBytes + h.count * width);
    throw Error("token shard '" + path + "' is truncated or corrupt: header says " + std::to_string(h.count) +
                " tokens, so expected " + expected + " bytes, but the file has " + std::to_string(actual) + " bytes");
  }
  m->count = static_cast<int64_t>(h.count);
  m->vocab = h.vocab_size;
  m->width = width;
  TokenShard shard;
  shard.map_ = std::move(m);
  return shard;
}

int64_t TokenShard::size() const { return map_->count; }
int64_t TokenShard::vocab_size() const { return map_->vocab; }
const std::string& TokenShard::path() const { return map_->path; }

int64_t TokenShard::at(int64_t i) const {
  int64_t v;
  read(i, 1, &v);
  return v;
}

void TokenShard::read(int64_t start, int64_t n, int64_t* out) const {
  const Mapping& m = *map_;
  if (start < 0 || n < 0 || start + n > m.count)
    throw std::out_of_range("token range [" + std::to_string(start) + ", " + std::to_string(start + n) +
                            ") outside shard '" + m.path + "' of " + std::to_string(m.count) + " tokens");
  const unsigned char* p = m.base + kShardHeaderBytes + start * m.width;
  for (int64_t i = 0; i < n; ++i) {
    if (m.width == 2) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
    } else {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = v;
    }
    if (out[i] >= m.vocab)
      throw Error("token shard '" + m.path + "' holds id " + std::to_string(out[i]) + " at position " +
                  std::to_string(start + i) + ", outside its vocab of " + std::to_string(m.vocab));
  }
}

// ---- dataset meta ----

nlohmann::json read_dataset_meta(const std::string& data_dir) {
  const std::string path = (std::filesystem::path(data_dir) / "meta.json").string();
  std::ifstream in(path);
  if (!in) throw Error("cannot open '" + path + "' (is '" + data_dir + "' a prepared data dir?)");
  nlohmann::json meta;
  try {
    in >> meta;
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + path + "' is not valid JSON: " + json_error_brief(e));
  }
  if (!meta.is_object() || !meta.contains("format") || meta["format"] != "fbt-dataset")
    throw Error("'" + path + "' is not an fbt dataset meta file (field \"format\" is not \"fbt-dataset\")");
  if (!meta.contains("format_version") || meta["format_version"] != 1)
    throw Error("'" + path + "': field \"format_version\" is " + meta.value("format_version", nlohmann::json()).dump() +
                "; this build reads version 1");
  // The fields every reader relies on, type-checked here so no reader meets a raw JSON error.
  const auto tok = required_field<nlohmann::json>(meta, "tokenizer", path);
  const std::string where = path + ": tokenizer";
  required_field<std::string>(tok, "type", where);
  const auto vocab = required_field<int64_t>(tok, "vocab_size", where);
  if (vocab < 1) throw Error(where + ": field 'vocab_size' is " + std::to_string(vocab) + ", expected >= 1");
  for (const char* id : {"eos_id", "bos_id", "pad_id"})
    if (tok.contains(id)) {
      const auto v = required_field<int64_t>(tok, id, where);
      const int64_t low = std::string(id) == "eos_id" ? 0 : -1;  // -1: no BOS / PAD (HF tokenizers)
      if (v < low || v >= vocab)
        throw Error(where + ": field '" + id + "' is " + std::to_string(v) + ", outside [" + std::to_string(low) +
                    ", vocab_size " + std::to_string(vocab) + ")");
    }
  required_field<int64_t>(tok, "eos_id", where);
  return meta;
}

TokenShard open_split(const std::string& data_dir, const std::string& split, bool verify) {
  const nlohmann::json meta = read_dataset_meta(data_dir);
  const std::string meta_path = (std::filesystem::path(data_dir) / "meta.json").string();
  nlohmann::json entry;
  try {
    entry = meta.at("splits").at(split);
  } catch (const nlohmann::json::exception&) {
    throw Error("'" + meta_path + "': field \"splits\" has no split '" + split + "'");
  }
  const std::string where = meta_path + ": splits." + split;
  const auto file = (std::filesystem::path(data_dir) / required_field<std::string>(entry, "file", where)).string();
  auto shard = TokenShard::open(file, meta.at("tokenizer").at("vocab_size").get<int64_t>());
  // Cheap checks that the shard is the one prepare wrote (a replaced or overwritten shard would
  // otherwise train or score silently): its token count, and a sampled hash (hash.h); the full
  // sha256 on request.
  const auto tokens = required_field<int64_t>(entry, "tokens", where);
  if (shard.size() != tokens)
    throw Error(file + ": holds " + std::to_string(shard.size()) + " tokens but " + meta_path + " records " +
                std::to_string(tokens) + " for the " + split + " split (overwritten, or from another dataset?)");
  if (verify) {
    if (sha256_hex_file(file) != required_field<std::string>(entry, "sha256", where))
      throw Error(file + ": sha256 differs from " + meta_path + " (the file was changed after fbt prepare)");
  } else if (entry.contains("sampled_sha256") &&
             sha256_hex_file_sampled(file) != required_field<std::string>(entry, "sampled_sha256", where)) {
    throw Error(file + ": sampled sha256 differs from " + meta_path +
                " (the file was changed after fbt prepare; --verify checks the whole file)");
  }
  return shard;
}

// ---- BatchLoader ----

BatchLoader::BatchLoader(TokenShard shard, int64_t batch, int64_t seq, uint64_t seed, int64_t rank, int64_t world_size)
    : shard_(std::move(shard)), batch_(batch), seq_(seq), seed_(seed), rank_(rank), world_size_(world_size) {
  check_loader_shape("BatchLoader on '" + shard_.path() + "'", batch, seq, rank, world_size);
  if (shard_.size() < seq + 1)
    throw Error("token shard '" + shard_.path() + "' has " + std::to_string(shard_.size()) +
                " tokens, fewer than one window of seq + 1 = " + std::to_string(seq + 1));
  // Seed and rank both enter the seed sequence, so every (seed, rank) gets its own stream.
  std::seed_seq sseq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(rank),
                     0x46425431u};
  rng_.seed(sseq);
}

std::pair<torch::Tensor, torch::Tensor> BatchLoader::next() {
  const auto starts = static_cast<uint64_t>(shard_.size() - seq_);  // valid window starts
  torch::Tensor rows;
  try {
    rows = torch::empty({batch_, seq_ + 1}, torch::kInt64);  // [B,T+1]
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    throw Error("cannot allocate a batch of " + std::to_string(batch_) + " sequences of " + std::to_string(seq_) +
                " tokens: lower the batch size (train.batch_size) or the sequence length (train.seq_len) (" +
                first_line(e) + ")");
  }
  int64_t* p = rows.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_; ++b) {
    // Modulo of a 64-bit draw: platform-independent, bias < starts / 2^64.
    const auto start = static_cast<int64_t>(rng_() % starts);
    shard_.read(start, seq_ + 1, p + b * (seq_ + 1));
  }
  ++drawn_;
  return {rows.narrow(1, 0, seq_).contiguous(), rows.narrow(1, 1, seq_).contiguous()};  // [B,T] each
}

void BatchLoader::skip() {
  for (int64_t b = 0; b < batch_; ++b) rng_();  // the draws of next(), one per row
  ++drawn_;
}

MicroBatch BatchLoader::next_batch() {
  auto [x, y] = next();
  return {x, y, batch_ * seq_, batch_ * seq_};
}
MicroBatch BatchLoader::skip_batch() {
  skip();
  return {{}, {}, batch_ * seq_, batch_ * seq_};
}
nlohmann::json BatchLoader::state() const {
  std::ostringstream rng;
  rng << rng_;
  return {{"kind", "random_windows"},      {"seed", seed_},           {"rank", rank_},
          {"world_size", world_size_},     {"batch", batch_},         {"seq", seq_},
          {"shard_tokens", shard_.size()}, {"batches_drawn", drawn_}, {"rng", rng.str()}};
}

void BatchLoader::set_state(const nlohmann::json& state) {
  try {
    if (state.at("kind") != "random_windows")
      throw Error("loader state: field \"kind\" is " + state.at("kind").dump() + ", expected \"random_windows\"");
    auto expect = [&](const char* field, auto mine) {
      const auto saved = state.at(field).get<decltype(mine)>();
      if (saved != mine)
        throw Error("loader state: field \"" + std::string(field) + "\" is " + std::to_string(saved) +
                    " but this loader has " + std::to_string(mine));
    };
    expect("seed", seed_);
    expect("rank", rank_);
    expect("world_size", world_size_);
    expect("batch", batch_);
    expect("seq", seq_);
    expect("shard_tokens", shard_.size());
    std::istringstream in(state.at("rng").get<std::string>());
    std::mt19937_64 rng;
    in >> rng;
    if (in.fail()) throw Error("loader state: field \"rng\" is not a std::mt19937_64 state");
    rng_ = rng;
    drawn_ = state.at("batches_drawn").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("loader state: missing or mistyped field: ") + e.what());
  }
}

// ---- SequentialLoader ----

SequentialLoader::SequentialLoader(TokenShard shard, int64_t batch, int64_t seq, int64_t max_tokens, int64_t rank,
                                   int64_t world_size)
    : shard_(std::move(shard)), batch_(batch), seq_(seq), rank_(rank), world_size_(world_size), next_window_(rank) {
  check_loader_shape("SequentialLoader on '" + shard_.path() + "'", batch, seq, rank, world_size);
  int64_t targets = shard_.size() - 1;  // every token but the first can be a target
  if (max_tokens >= 0) targets = std::min(targets, max_tokens);
  shard_windows_ = std::max<int64_t>(shard_.size() - 1, 0) / seq;
  num_windows_ = std::max<int64_t>(targets, 0) / seq;
  if (num_windows_ == 0)
    throw Error("token shard '" + shard_.path() + "' has " + std::to_string(shard_.size()) + " tokens" +
                (max_tokens >= 0 ? " (max_tokens " + std::to_string(max_tokens) + ")" : "") +
                ", fewer than one window of seq + 1 = " + std::to_string(seq + 1));
}

std::optional<std::pair<torch::Tensor, torch::Tensor>> SequentialLoader::next() {
  if (next_window_ >= num_windows_) return std::nullopt;
  const int64_t mine = (num_windows_ - next_window_ + world_size_ - 1) / world_size_;  // left for this rank
  const int64_t b = std::min(batch_, mine);
  torch::Tensor rows = torch::empty({b, seq_ + 1}, torch::kInt64);  // [b,T+1]
  int64_t* p = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < b; ++i, next_window_ += world_size_)
    shard_.read(window_start(next_window_), seq_ + 1, p + i * (seq_ + 1));
  return std::make_pair(rows.narrow(1, 0, seq_).contiguous(), rows.narrow(1, 1, seq_).contiguous());
}

}  // namespace fbt
