// Conversation datasets for supervised fine-tuning: the input formats, the loss-mask
// shards written by `fbt prepare --conversations`, and the batches `fbt train` draws from them.
//
// A conversation dataset is a prepared data dir (prepare.h) whose train.bin / val.bin hold the
// conversations rendered by the model's chat template (chat_template.h), back to back, with
// train.mask.bin / val.mask.bin beside them: shards (shards.h) of vocab 4 holding, per token,
// bit 0 = the SFT loss scores it (an assistant token) and bit 1 = it starts a conversation.
// meta.json adds "conversations": {format, chat_template, end_of_turn_id, train: {conversations,
// scored_tokens}, val: {...}}.
#pragma once
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fbt/data/chat_template.h"
#include "fbt/data/shards.h"

namespace fbt {

/// Mask bits of a conversation dataset's mask shards.
constexpr uint32_t kMaskScored = 1, kMaskStart = 2, kMaskVocab = 4;

/// The conversations of one JSONL input file, each as a JSON array of messages (a document for
/// read_corpus). `format`:
///   messages  {"messages": [{"role", "content"}, ...]} (OpenAI's chat format)
///   alpaca    {"instruction", "input"?, "output"} (Stanford Alpaca), or {"instruction",
///             "instances": [{"input", "output"}, ...]} (its seed tasks, one conversation per
///             instance): user = instruction, + "\n\n" + input when the input is not empty;
///             assistant = output
///   gsm8k     {"question", "answer"}: user = question; assistant = answer without the calculator
///             annotations "<<48/2=24>>" (the solution keeps its "#### N" line)
/// Every conversation must hold an assistant message (chat_messages_from_json's rules apply).
/// Throws fbt::Error naming the file, line and field.
std::vector<std::string> read_conversations(const std::filesystem::path& path, const std::string& text,
                                            const std::string& format);

/// Throws fbt::Error naming --conversations unless `format` is messages, alpaca or gsm8k.
void check_conversation_format(const std::string& format);

/// Counts of a split written by write_conversations.
struct ConversationStats {
  int64_t conversations = 0, tokens = 0, scored = 0, bytes = 0;
};

/// Renders each conversation of `conversations` (JSON arrays of messages) with `chat` into the
/// token shard `tokens_path` and the mask shard `mask_path` (file comment). Throws fbt::Error for
/// a conversation that renders without a scored token.
ConversationStats write_conversations(const std::vector<std::string>& conversations, const ChatTemplate& chat,
                                      int64_t vocab_size, const std::filesystem::path& tokens_path,
                                      const std::filesystem::path& mask_path);

/// True if the prepared data dir's meta.json (`meta`) describes a conversation dataset.
bool is_conversation_dataset(const nlohmann::json& meta);

/// The conversations of one split of a conversation dataset.
class SftData {
 public:
  /// Opens DIR/<split>.bin (open_split) and DIR/<split>.mask.bin and indexes the conversation
  /// starts. Throws fbt::Error naming the file if the mask is missing, of another length, or does
  /// not start a conversation at token 0.
  static SftData open(const std::string& data_dir, const std::string& split);

  int64_t size() const { return static_cast<int64_t>(starts_.size()); }
  /// Tokens of conversation i.
  int64_t length(int64_t i) const;
  /// Conversations longer than max_tokens (truncated to their first max_tokens by batch()).
  int64_t longer_than(int64_t max_tokens) const;

  /// A micro-batch of conversations `indices`, each cut to its first seq + 1 tokens: row b has
  /// inputs ids[0, n−1) and targets ids[1, n) (−1 where the mask does not score the target), and
  /// is right-padded with `pad_id` inputs and −1 targets to the longest row. Rows start plain:
  /// a conversation's first token is position 0 of its row. With `tensors` false only the counts.
  MicroBatch batch(const std::vector<int64_t>& indices, int64_t seq, int64_t pad_id, bool tensors = true) const;

 private:
  SftData(TokenShard tokens, TokenShard mask) : tokens_(std::move(tokens)), mask_(std::move(mask)) {}
  TokenShard tokens_, mask_;
  std::vector<int64_t> starts_;  // token offset of each conversation, ascending
};

/// Training micro-batches of `batch` conversations (at most seq + 1 tokens each, SftData::batch),
/// in a fresh seeded random order every epoch (Fisher–Yates with std::mt19937_64 seeded from
/// seed and the epoch), so resuming at (epoch, position) repeats the stream exactly.
class SftLoader : public TrainBatches {
 public:
  /// Throws fbt::Error if batch or seq < 1 or the data holds no conversation.
  SftLoader(SftData data, int64_t batch, int64_t seq, int64_t pad_id, uint64_t seed);

  MicroBatch next_batch() override;
  MicroBatch skip_batch() override;
  /// {"kind": "conversations", "seed", "batch", "seq", "conversations", "epoch", "position",
  /// "batches_drawn"}.
  nlohmann::json state() const override;
  void set_state(const nlohmann::json& state) override;

 private:
  std::vector<int64_t> take();  // the next batch's conversation indices
  void shuffle();               // order_ for epoch_
  SftData data_;
  int64_t batch_, seq_, pad_id_;
  uint64_t seed_;
  int64_t epoch_ = 0, position_ = 0, drawn_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace fbt
