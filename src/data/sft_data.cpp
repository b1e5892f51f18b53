// Conversation datasets for SFT: input formats, mask shards, SftData and SftLoader (sft_data.h).
#include "fbt/data/sft_data.h"

#include <algorithm>
#include <regex>

#include "fbt/data/jsonl.h"
#include "fbt/util/error.h"

namespace fbt {
namespace fs = std::filesystem;
namespace {

/// A string field of a record, or fbt::Error naming `where` and the field.
std::string string_field(const nlohmann::json& r, const char* field, const std::string& where) {
  if (!r.contains(field) || !r[field].is_string())
    throw Error(where + ": record has no string field \"" + field + "\"");
  return r[field].get<std::string>();
}

nlohmann::json user_assistant(const std::string& user, const std::string& assistant) {
  return nlohmann::json::array(
      {{{"role", "user"}, {"content", user}}, {{"role", "assistant"}, {"content", assistant}}});
}

/// The conversations of one record in `format` (sft_data.h).
std::vector<nlohmann::json> record_conversations(const nlohmann::json& r, const std::string& format,
                                                 const std::string& where) {
  if (!r.is_object()) throw Error(where + ": expected a JSON object");
  if (format == "messages") {
    if (!r.contains("messages")) throw Error(where + ": record has no field \"messages\"");
    return {r["messages"]};
  }
  if (format == "gsm8k") {
    static const std::regex calculator("<<[^>]*>>");
    return {user_assistant(string_field(r, "question", where),
                           std::regex_replace(string_field(r, "answer", where), calculator, ""))};
  }
  const std::string instruction = string_field(r, "instruction", where);
  auto prompt = [&](const std::string& input) { return input.empty() ? instruction : instruction + "\n\n" + input; };
  if (!r.contains("instances")) return {user_assistant(prompt(r.value("input", "")), string_field(r, "output", where))};
  if (!r["instances"].is_array() || r["instances"].empty())
    throw Error(where + ": field \"instances\" must be a non-empty array");
  std::vector<nlohmann::json> out;
  for (size_t i = 0; i < r["instances"].size(); ++i) {
    const auto& inst = r["instances"][i];
    const std::string at = where + ": instances[" + std::to_string(i) + "]";
    if (!inst.is_object()) throw Error(at + ": expected an object");
    out.push_back(user_assistant(prompt(inst.contains("input") ? string_field(inst, "input", at) : ""),
                                 string_field(inst, "output", at)));
  }
  return out;
}

}  // namespace

void check_conversation_format(const std::string& format) {
  if (format != "messages" && format != "alpaca" && format != "gsm8k")
    throw Error("--conversations " + format + ": expected messages, alpaca or gsm8k");
}

std::vector<std::string> read_conversations(const fs::path& path, const std::string& text, const std::string& format) {
  check_conversation_format(format);
  std::vector<std::string> out;
  for_each_jsonl_record(path.string(), text, [&](const nlohmann::json& record, const std::string& where) {
    for (auto& messages : record_conversations(record, format, where)) {
      const auto parsed = chat_messages_from_json(messages, where);
      if (std::none_of(parsed.begin(), parsed.end(), [](const ChatMessage& m) { return m.role == "assistant"; }))
        throw Error(where + ": the conversation has no assistant message (nothing for the SFT loss to score)");
      out.push_back(messages.dump());
    }
  });
  return out;
}

ConversationStats write_conversations(const std::vector<std::string>& conversations, const ChatTemplate& chat,
                                      int64_t vocab_size, const fs::path& tokens_path, const fs::path& mask_path) {
  ConversationStats s;
  ShardWriter tokens(tokens_path.string(), vocab_size), mask(mask_path.string(), kMaskVocab);
  for (const auto& c : conversations) {
    const auto r = chat.render(chat_messages_from_json(nlohmann::json::parse(c), "conversation"), false);
    std::vector<int64_t> bits(r.ids.size());
    int64_t scored = 0;
    for (size_t i = 0; i < r.ids.size(); ++i) {
      bits[i] = (r.scored[i] ? kMaskScored : 0) | (i == 0 ? kMaskStart : 0);
      scored += r.scored[i];
    }
    if (scored == 0) throw Error("a conversation renders without assistant tokens: " + c.substr(0, 200));
    tokens.append(r.ids);
    mask.append(bits);
    ++s.conversations;
    s.scored += scored;
    s.bytes += static_cast<int64_t>(r.text.size());
  }
  tokens.close();
  mask.close();
  s.tokens = tokens.count();
  return s;
}

bool is_conversation_dataset(const nlohmann::json& meta) { return meta.contains("conversations"); }

SftData SftData::open(const std::string& data_dir, const std::string& split) {
  const fs::path mask_path = fs::path(data_dir) / (split + ".mask.bin");
  if (!fs::exists(mask_path))
    throw Error("--data " + data_dir + ": " + mask_path.string() +
                " is missing (a conversation dataset needs it; "
                "prepare it again with fbt prepare --conversations)");
  SftData d(open_split(data_dir, split), TokenShard::open(mask_path.string(), kMaskVocab));
  if (d.mask_.size() != d.tokens_.size())
    throw Error(mask_path.string() + " holds " + std::to_string(d.mask_.size()) + " entries but " + d.tokens_.path() +
                " holds " + std::to_string(d.tokens_.size()) + " tokens");
  std::vector<int64_t> bits(1 << 16);
  for (int64_t at = 0; at < d.mask_.size(); at += static_cast<int64_t>(bits.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(bits.size()), d.mask_.size() - at);
    d.mask_.read(at, n, bits.data());
    for (int64_t i = 0; i < n; ++i)
      if (bits[i] & kMaskStart) d.starts_.push_back(at + i);
  }
  if (d.starts_.empty() || d.starts_.front() != 0)
    throw Error(mask_path.string() + ": token 0 does not start a conversation (a damaged mask)");
  return d;
}

int64_t SftData::length(int64_t i) const {
  const int64_t end = i + 1 < size() ? starts_[i + 1] : tokens_.size();
  return end - starts_[i];
}

int64_t SftData::longer_than(int64_t max_tokens) const {
  int64_t n = 0;
  for (int64_t i = 0; i < size(); ++i) n += length(i) > max_tokens;
  return n;
}

MicroBatch SftData::batch(const std::vector<int64_t>& indices, int64_t seq, int64_t pad_id, bool tensors) const {
  MicroBatch mb;
  std::vector<std::vector<int64_t>> ids(indices.size()), bits(indices.size());
  int64_t width = 1;
  for (size_t b = 0; b < indices.size(); ++b) {
    const int64_t n = std::min(length(indices[b]), seq + 1);
    ids[b].resize(n);
    bits[b].resize(n);
    tokens_.read(starts_[indices[b]], n, ids[b].data());
    mask_.read(starts_[indices[b]], n, bits[b].data());
    width = std::max(width, n - 1);
    mb.tokens += n - 1;
    for (int64_t t = 1; t < n; ++t) mb.scored += bits[b][t] & kMaskScored;
  }
  if (!tensors) return mb;
  const auto B = static_cast<int64_t>(indices.size());
  mb.inputs = torch::full({B, width}, pad_id, torch::kInt64);  // [B,W]
  mb.targets = torch::full({B, width}, -1, torch::kInt64);     // [B,W]
  auto in = mb.inputs.accessor<int64_t, 2>();
  auto tg = mb.targets.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < static_cast<int64_t>(ids[b].size()); ++t) {
      in[b][t] = ids[b][t];
      if (bits[b][t + 1] & kMaskScored) tg[b][t] = ids[b][t + 1];
    }
  return mb;
}

SftLoader::SftLoader(SftData data, int64_t batch, int64_t seq, int64_t pad_id, uint64_t seed)
    : data_(std::move(data)), batch_(batch), seq_(seq), pad_id_(pad_id), seed_(seed) {
  if (batch < 1 || seq < 1)
    throw Error("conversation batches need batch_size >= 1 and seq_len >= 1 (got " + std::to_string(batch) + ", " +
                std::to_string(seq) + ")");
  if (data_.size() == 0) throw Error("the conversation dataset holds no conversation");
  shuffle();
}

void SftLoader::shuffle() {
  const auto n = static_cast<size_t>(data_.size());
  order_.resize(n);
  for (size_t i = 0; i < n; ++i) order_[i] = static_cast<int64_t>(i);
  std::seed_seq sseq{static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32), static_cast<uint32_t>(epoch_),
                     0x53465431u};
  std::mt19937_64 rng(sseq);
  for (size_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[rng() % (i + 1)]);
}

std::vector<int64_t> SftLoader::take() {
  std::vector<int64_t> out;
  while (static_cast<int64_t>(out.size()) < batch_) {
    if (position_ == data_.size()) {
      ++epoch_;
      position_ = 0;
      shuffle();
    }
    out.push_back(order_[position_++]);
  }
  ++drawn_;
  return out;
}

MicroBatch SftLoader::next_batch() { return data_.batch(take(), seq_, pad_id_); }
MicroBatch SftLoader::skip_batch() { return data_.batch(take(), seq_, pad_id_, false); }

nlohmann::json SftLoader::state() const {
  return {{"kind", "conversations"},       {"seed", seed_},   {"batch", batch_},       {"seq", seq_},
          {"conversations", data_.size()}, {"epoch", epoch_}, {"position", position_}, {"batches_drawn", drawn_}};
}

void SftLoader::set_state(const nlohmann::json& state) {
  try {
    if (state.at("kind") != "conversations")
      throw Error("loader state: field \"kind\" is " + state.at("kind").dump() + ", expected \"conversations\"");
    for (const auto& [field, mine] : {std::pair<const char*, int64_t>{"batch", batch_},
                                      {"seq", seq_},
                                      {"conversations", data_.size()},
                                      {"seed", static_cast<int64_t>(seed_)}})
      if (state.at(field).get<int64_t>() != mine)
        throw Error("loader state: field \"" + std::string(field) + "\" is " + state.at(field).dump() +
                    " but this loader has " + std::to_string(mine));
    const auto epoch = state.at("epoch").get<int64_t>(), position = state.at("position").get<int64_t>();
    if (epoch < 0 || position < 0 || position > data_.size())
      throw Error("loader state: epoch " + std::to_string(epoch) + " / position " + std::to_string(position) +
                  " is outside the dataset");
    epoch_ = epoch;
    position_ = position;
    drawn_ = state.at("batches_drawn").get<int64_t>();
    shuffle();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("loader state: missing or mistyped field: ") + e.what());
  }
}

}  // namespace fbt
