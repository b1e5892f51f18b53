// GGUF tokenizer.ggml.* metadata -> Hugging Face tokenizer.json / tokenizer_config.json objects.
#include "fbt/io/gguf_tokenizer.h"

#include <map>
#include <vector>

#include "fbt/util/error.h"
#include "fbt/util/json_fields.h"

namespace fbt {
namespace {

using nlohmann::json;

// The regexes of llama-vocab.cpp (llm_tokenizer_bpe's constructor), by pre-tokenizer type.
const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const std::string kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// token_type values of llama.cpp's llama_token_type (gguf-py TokenType).
constexpr int kControl = 3, kUserDefined = 4;

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split_sequence(const std::vector<std::string>& regexes) {
  json steps = json::array();
  for (const auto& r : regexes)
    steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", r}}}, {"behavior", "Isolated"}, {"invert", false}});
  steps.push_back(byte_level(false));
  return {{"type", "Sequence"}, {"pretokenizers", steps}};
}

/// Metadata `key` of `f` as an array of strings; throws naming the file and the key.
std::vector<std::string> string_array(const GgufFile& f, const std::string& key) {
  const std::string where = "'" + f.path + "': metadata '" + key + "'";
  if (!f.metadata.contains(key)) throw Error(where + " is missing");
  const auto& a = f.metadata.at(key);
  if (!a.is_array()) throw Error(where + " is not an array");
  std::vector<std::string> out;
  out.reserve(a.size());
  for (const auto& s : a) {
    if (!s.is_string()) throw Error(where + " holds a non-string element");
    out.push_back(s.get<std::string>());
  }
  return out;
}

/// The token of id metadata `key` (e.g. tokenizer.ggml.bos_token_id), or null when absent.
json special_token(const GgufFile& f, const std::string& key, const std::vector<std::string>& tokens) {
  if (!f.metadata.contains(key)) return nullptr;
  const auto& id = f.metadata.at(key);
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= static_cast<int64_t>(tokens.size()))
    throw Error("'" + f.path + "': metadata '" + key + "' is " + id.dump() + ", not a token id below " +
                std::to_string(tokens.size()));
  return tokens[id.get<size_t>()];
}

json added_tokens(const GgufFile& f, const std::vector<std::string>& tokens) {
  json added = json::array();
  if (!f.metadata.contains("tokenizer.ggml.token_type")) return added;
  const auto& types = f.metadata.at("tokenizer.ggml.token_type");
  if (!types.is_array() || types.size() != tokens.size())
    throw Error("'" + f.path + "': metadata 'tokenizer.ggml.token_type' is not an array of one type per token");
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int type = types[id].is_number_integer() ? types[id].get<int>() : 0;
    if (type != kControl && type != kUserDefined) continue;
    added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", type == kControl}});
  }
  return added;
}

}  // namespace

json hf_pre_tokenizer_of_gguf(const std::string& pre, const std::string& origin) {
  static const std::map<std::string, std::vector<std::string>> splits = {
      {"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {"gpt-2", {kGpt2}}, {"phi-2", {kGpt2}},
      {"llama3", {kLlama3}}, {"llama-v3", {kLlama3}}, {"llama-bpe", {kLlama3}},
      {"qwen2", {kQwen2}}, {"deepseek-r1-qwen", {kQwen2}},
      {"starcoder", {R"(\p{N})", kGpt2}}, {"refact", {R"(\p{N})", kGpt2}}};
  if (pre == "smollm")
    return {{"type", "Sequence"},
            {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
  const auto it = splits.find(pre);
  if (it == splits.end()) {
    std::string names = "smollm";
    for (const auto& [name, regexes] : splits) names += ", " + name;
    throw Error(origin + ": metadata 'tokenizer.ggml.pre' is \"" + pre + "\", a pre-tokenizer fbt does not know (supported: " +
                names + ")");
  }
  return split_sequence(it->second);
}

HfTokenizerFiles hf_tokenizer_from_gguf(const GgufFile& f) {
  const std::string origin = "'" + f.path + "'";
  if (!f.metadata.contains("tokenizer.ggml.model"))
    throw Error(origin + ": metadata key 'tokenizer.ggml.model' is missing: the file carries no tokenizer "
                "(tokenizer.ggml.*), and fbt imports a model only with its tokenizer");
  const auto& model_value = f.metadata.at("tokenizer.ggml.model");
  const std::string model = model_value.is_string() ? model_value.get<std::string>() : model_value.dump();
  if (model == "llama")
    throw Error(origin + ": metadata 'tokenizer.ggml.model' is \"llama\" (SentencePiece); importing SentencePiece "
                "tokenizers from GGUF is not supported yet (byte-level BPE \"gpt2\" is)");
  if (model != "gpt2")
    throw Error(origin + ": metadata 'tokenizer.ggml.model' is \"" + model + "\"; only \"gpt2\" (byte-level BPE) is supported");
  const auto tokens = string_array(f, "tokenizer.ggml.tokens");
  const auto merges = string_array(f, "tokenizer.ggml.merges");
  const auto& pre_value = f.metadata.value("tokenizer.ggml.pre", json("default"));
  if (!pre_value.is_string()) throw Error(origin + ": metadata 'tokenizer.ggml.pre' is not a string");

  json vocab = json::object();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[tokens[id]] = id;
  if (vocab.size() != tokens.size()) throw Error(origin + ": metadata 'tokenizer.ggml.tokens' holds a token twice");
  const json bos = special_token(f, "tokenizer.ggml.bos_token_id", tokens);
  bool add_bos = false;
  if (f.metadata.contains("tokenizer.ggml.add_bos_token"))
    read_field(f.metadata.at("tokenizer.ggml.add_bos_token"), origin + ": metadata 'tokenizer.ggml.add_bos_token'", add_bos);
  json post = nullptr;
  if (add_bos && bos.is_string())
    post = {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                      {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{bos.get<std::string>(), {{"id", bos}, {"ids", {vocab.at(bos.get<std::string>())}}, {"tokens", {bos}}}}}}};
  HfTokenizerFiles out;
  out.tokenizer = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
      {"added_tokens", added_tokens(f, tokens)},
      {"normalizer", nullptr},
      {"pre_tokenizer", hf_pre_tokenizer_of_gguf(pre_value.get<std::string>(), origin)},
      {"post_processor", post},
      {"decoder", byte_level(true)},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                 {"ignore_merges", pre_value == "llama3" || pre_value == "llama-v3" || pre_value == "llama-bpe"},
                 {"vocab", vocab}, {"merges", merges}}}};
  out.config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                {"bos_token", bos},
                {"eos_token", special_token(f, "tokenizer.ggml.eos_token_id", tokens)},
                {"pad_token", special_token(f, "tokenizer.ggml.padding_token_id", tokens)},
                {"add_bos_token", add_bos},
                {"chat_template", f.metadata.value("tokenizer.chat_template", json(nullptr))}};
  return out;
}

}  // namespace fbt
