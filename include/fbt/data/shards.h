// Token shards (on-disk format, writer, memory-mapped reader) and the batch loaders over them.
//
// Shard file, little-endian:
//   offset  0  char[8]  magic "FBTTOKS\0"
//           8  u32      format version (1)
//          12  u32      vocab size V
//          16  u32      dtype code: 1 = uint16 (V <= 65535), 2 = uint32
//          20  u32      reserved (0)
//          24  u64      token count N
//          32  N token ids, 2 or 4 bytes each
// A prepared data dir holds train.bin and val.bin in this format plus meta.json (see prepare.h);
// in the token stream every document is followed by the tokenizer's EOS id.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace fbt {

constexpr char kShardMagic[8] = {'F', 'B', 'T', 'T', 'O', 'K', 'S', '\0'};
constexpr uint32_t kShardVersion = 1;
constexpr int64_t kShardHeaderBytes = 32;
constexpr uint32_t kShardDtypeU16 = 1, kShardDtypeU32 = 2;

/// The dtype code a shard of vocab size V uses: uint16 if V <= 65535, else uint32.
uint32_t shard_dtype_for_vocab(int64_t vocab_size);

/// Streams token ids into a shard file. The header is written with count 0 on open and patched by
/// close(); a writer destroyed without close() leaves a file the reader refuses (size mismatch).
class ShardWriter {
 public:
  /// Creates (truncates) `path`. Throws fbt::Error naming it if it cannot be opened, or if
  /// vocab_size is outside [1, 2^32).
  ShardWriter(const std::string& path, int64_t vocab_size);
  /// Appends ids; throws fbt::Error if one is outside [0, vocab_size).
  void append(const std::vector<int64_t>& tokens);
  /// Tokens appended so far.
  int64_t count() const { return count_; }
  /// Writes the final header and closes; throws fbt::Error naming the file on an I/O error.
  void close();

 private:
  std::string path_;
  int64_t vocab_size_;
  uint32_t dtype_;
  int64_t count_ = 0;
  std::ofstream out_;
};

/// A read-only, memory-mapped shard. Copies are cheap and share the mapping.
class TokenShard {
 public:
  /// Maps `path` and validates magic, version, dtype (and its agreement with the vocab), vocab ==
  /// expected_vocab (skipped if expected_vocab < 0), and file size == 32 + N * width. Throws
  /// fbt::Error naming the file (for a size mismatch: expected and actual bytes).
  static TokenShard open(const std::string& path, int64_t expected_vocab = -1);

  int64_t size() const;        // token count N
  int64_t vocab_size() const;  // V from the header
  const std::string& path() const;
  /// Token i; throws std::out_of_range outside [0, N).
  int64_t at(int64_t i) const;
  /// Tokens [start, start + n) into `out`; throws std::out_of_range if the range leaves the shard
  /// and fbt::Error (naming file and offset) for a stored id >= V.
  void read(int64_t start, int64_t n, int64_t* out) const;

 private:
  TokenShard() = default;
  struct Mapping;
  std::shared_ptr<const Mapping> map_;
};

/// DIR/meta.json of a prepared data dir, with "format" and "format_version" checked. Throws
/// fbt::Error naming the file if it is missing, not JSON, or not an fbt dataset.
nlohmann::json read_dataset_meta(const std::string& data_dir);

/// Opens DIR/<split>.bin ("train" or "val") checked against DIR/meta.json: the vocab size, the
/// split's token count and, when meta.json records it (datasets prepared since it exists), the
/// sampled sha256 (hash.h: a few MiB read); with `verify`, the sha256 of the whole file. Throws
/// fbt::Error naming the file and what differs.
TokenShard open_split(const std::string& data_dir, const std::string& split, bool verify = false);

/// One training micro-batch: inputs [B,T] and targets [B,T] (int64, CPU; target -1 is not
/// scored), the input tokens it holds (padding excluded) and its scored targets.
struct MicroBatch {
  torch::Tensor inputs, targets;  ///< undefined for a skipped micro-batch
  int64_t tokens = 0;
  int64_t scored = 0;
};

/// A stream of training micro-batches (BatchLoader: random windows of a token stream; SftLoader,
/// sft_data.h: padded conversations). The ranks of a data-parallel run draw one stream and skip
/// each other's micro-batches; the counts of a skipped one weight the step's loss (trainer.cpp).
class TrainBatches {
 public:
  virtual ~TrainBatches() = default;
  /// The next micro-batch.
  virtual MicroBatch next_batch() = 0;
  /// Steps over the next micro-batch: its counts, no tensors.
  virtual MicroBatch skip_batch() = 0;
  /// Everything needed to resume (a JSON object with a "kind").
  virtual nlohmann::json state() const = 0;
  /// Restores state(); throws fbt::Error naming the field that belongs to another stream.
  virtual void set_state(const nlohmann::json& state) = 0;
};

/// Random-window training batches: each row is a window of T+1 consecutive tokens at a start
/// drawn uniformly from [0, N - T - 1] by the loader's own std::mt19937_64 (seeded from seed and
/// rank, so ranks draw independent streams; torch's global RNG is not touched).
class BatchLoader : public TrainBatches {
 public:
  /// Throws fbt::Error if batch or seq < 1, rank is outside [0, world_size), or the shard has
  /// fewer than seq + 1 tokens (message names the file, its token count and the window).
  BatchLoader(TokenShard shard, int64_t batch, int64_t seq, uint64_t seed, int64_t rank = 0, int64_t world_size = 1);

  /// {inputs [B,T], targets [B,T]}, int64 on CPU; targets[b][t] == inputs[b][t+1] within a row.
  /// Throws fbt::Error naming train.batch_size and train.seq_len if the batch cannot be allocated.
  std::pair<torch::Tensor, torch::Tensor> next();
  /// Steps over the batch next() would return without reading it (counts as drawn). Ranks of
  /// a data-parallel run share one stream and skip each other's micro-batches (trainer.cpp).
  void skip();
  int64_t batches_drawn() const { return drawn_; }
  /// next() with its counts: B·T tokens, all scored.
  MicroBatch next_batch() override;
  /// skip() with its counts.
  MicroBatch skip_batch() override;

  /// Everything needed to resume: {"kind", "seed", "rank", "world_size", "batch", "seq",
  /// "shard_tokens", "batches_drawn", "rng"} (rng = the generator's textual state).
  nlohmann::json state() const override;
  /// Restores state(); the following next() calls repeat those of the saved loader. Throws
  /// fbt::Error naming the field if the state belongs to a different seed, rank, world size,
  /// batch shape or shard size, or is malformed.
  void set_state(const nlohmann::json& state) override;

 private:
  TokenShard shard_;
  int64_t batch_, seq_;
  uint64_t seed_;
  int64_t rank_, world_size_;
  std::mt19937_64 rng_;
  int64_t drawn_ = 0;
};

/// Evaluation batches: non-overlapping windows of T tokens. The shard holds M = floor((N-1) / T)
/// consecutive windows (the tail of fewer than T tokens is skipped); a loader scores
/// n = floor(min(N-1, max_tokens) / T) of them, spread evenly over the shard so a capped
/// evaluation sees all of it, not just its beginning: window w = 0..n-1 has inputs
/// tokens[sT, sT+T) and targets tokens[sT+1, sT+T+1) with s = floor(w·M / n) (s = w when
/// uncapped). Rank r of W takes windows r, r+W, ...
class SequentialLoader {
 public:
  /// max_tokens < 0 means the whole shard. Throws fbt::Error if batch or seq < 1, rank is outside
  /// [0, world_size), or there is not a single window (names the file, token count and window).
  SequentialLoader(TokenShard shard, int64_t batch, int64_t seq, int64_t max_tokens = -1, int64_t rank = 0,
                   int64_t world_size = 1);

  /// Next {inputs [b,T], targets [b,T]} with 1 <= b <= B (the last batch may be short), or
  /// std::nullopt once this rank's windows are used up.
  std::optional<std::pair<torch::Tensor, torch::Tensor>> next();
  /// Start again from this rank's first window.
  void reset() { next_window_ = rank_; }
  /// Windows over all ranks; each scores T target tokens.
  int64_t num_windows() const { return num_windows_; }
  /// Shard offset of window w's first input token: windows are spread evenly over the shard
  /// (w·M/n windows of T, M the shard's windows, n the scored ones), so window w's targets are
  /// tokens [window_start(w) + 1, window_start(w) + T + 1).
  int64_t window_start(int64_t w) const { return w * shard_windows_ / num_windows_ * seq_; }

 private:
  TokenShard shard_;
  int64_t batch_, seq_, rank_, world_size_;
  int64_t shard_windows_;  // M: every window of the shard
  int64_t num_windows_;    // n: the windows scored
  int64_t next_window_;
};

}  // namespace fbt
