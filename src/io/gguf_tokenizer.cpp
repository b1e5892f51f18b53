// GGUF tokenizer.ggml.* metadata -> Hugging Face tokenizer.json / tokenizer_config.json objects.
#include "fbt/io/gguf_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_map>
#include <vector>

#include "fbt/util/error.h"
#include "fbt/util/json_fields.h"
#include "fbt/util/utf8.h"

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
constexpr int kUnknown = 2, kControl = 3, kUserDefined = 4;
const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

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

/// The added tokens of transformers' GGUF tokenizers: CONTROL tokens special, USER_DEFINED ones not,
/// and for SentencePiece (`sentencepiece`) the UNKNOWN token special too (LlamaTokenizer's
/// unk_token); all matched in the raw text (normalized false).
json added_tokens(const GgufFile& f, const std::vector<std::string>& tokens, bool sentencepiece) {
  json added = json::array();
  if (!f.metadata.contains("tokenizer.ggml.token_type")) return added;
  const auto& types = f.metadata.at("tokenizer.ggml.token_type");
  if (!types.is_array() || types.size() != tokens.size())
    throw Error("'" + f.path + "': metadata 'tokenizer.ggml.token_type' is not an array of one type per token");
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int type = types[id].is_number_integer() ? types[id].get<int>() : 0;
    const bool special = type == kControl || (sentencepiece && type == kUnknown);
    if (!special && type != kUserDefined) continue;
    added.push_back({{"id", id},
                     {"content", tokens[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
  }
  return added;
}

/// A boolean metadata key of `f`, or `fallback` when absent; mistyped is an error naming it.
bool flag(const GgufFile& f, const std::string& key, bool fallback) {
  if (!f.metadata.contains(key)) return fallback;
  bool value = fallback;
  read_field(f.metadata.at(key), "'" + f.path + "': metadata '" + key + "'", value);
  return value;
}

/// The merges a SentencePiece BPE vocabulary implies, as transformers' generate_merges makes them
/// for a GGUF "llama" tokenizer (tokenization_utils_base.py): for each token, every split into two
/// tokens of the vocabulary (ordered by the left then the right token's id) with the token's score;
/// then all of them stably sorted by (score, left length, right length in characters),
/// highest first. SentencePiece's BPE merges the pair whose result scores highest, which this rank
/// order reproduces.
json sentencepiece_merges(const std::vector<std::string>& tokens, const std::vector<double>& scores) {
  std::unordered_map<std::string, int64_t> id;
  for (size_t i = 0; i < tokens.size(); ++i) id.emplace(tokens[i], static_cast<int64_t>(i));
  struct Merge {
    int64_t left, right;
    double score;
    int64_t left_chars, right_chars;
  };
  std::vector<Merge> merges;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& token = tokens[t];
    std::vector<Merge> local;
    for (size_t b = utf8_char_len(token); b > 0 && b < token.size();
         b += std::max<size_t>(1, utf8_char_len(std::string_view(token).substr(b)))) {
      const auto l = id.find(token.substr(0, b)), r = id.find(token.substr(b));
      if (l != id.end() && r != id.end())
        local.push_back({l->second, r->second, scores[t], utf8_length(l->first), utf8_length(r->first)});
    }
    std::stable_sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_chars != b.left_chars) return a.left_chars > b.left_chars;
    return a.right_chars > b.right_chars;
  });
  json out = json::array();
  for (const Merge& m : merges)
    out.push_back({tokens[static_cast<size_t>(m.left)], tokens[static_cast<size_t>(m.right)]});
  return out;
}

/// The stages of transformers' LlamaTokenizer for a GGUF "llama" (SentencePiece BPE) tokenizer:
/// pre_tokenizer Metaspace ("▁", prepend_scheme "first", split false), decoder Replace "▁" -> " ",
/// ByteFallback, Fuse, Strip one leading space; the BPE model with byte_fallback and fuse_unk. A
/// file with tokenizer.ggml.add_space_prefix false gets prepend_scheme "never" and no Strip (as
/// llama.cpp reads the key; transformers ignores it). Checks that tokenizer.ggml.scores has one
/// number per token and that all 256 byte pieces "<0x00>".."<0xFF>" exist.
void sentencepiece_stages(const GgufFile& f, const std::vector<std::string>& tokens, json& tokenizer) {
  const std::string where = "'" + f.path + "': metadata ";
  if (!f.metadata.contains("tokenizer.ggml.scores")) throw Error(where + "'tokenizer.ggml.scores' is missing");
  const auto& score_list = f.metadata.at("tokenizer.ggml.scores");
  if (!score_list.is_array() || score_list.size() != tokens.size())
    throw Error(where + "'tokenizer.ggml.scores' holds " +
                (score_list.is_array() ? std::to_string(score_list.size()) : "no array") + " scores for " +
                std::to_string(tokens.size()) + " tokens (tokenizer.ggml.tokens)");
  std::vector<double> scores;
  for (size_t i = 0; i < score_list.size(); ++i) {
    if (!score_list[i].is_number())
      throw Error(where + "'tokenizer.ggml.scores'[" + std::to_string(i) + "] is not a number");
    scores.push_back(score_list[i].get<double>());
  }
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    if (std::find(tokens.begin(), tokens.end(), piece) == tokens.end())
      throw Error(
          where + "'tokenizer.ggml.tokens' lacks the byte-fallback piece " + std::string(piece) +
          " (a SentencePiece tokenizer needs all 256, <0x00>..<0xFF>, for the characters its vocabulary lacks)");
  }
  const bool prefix = flag(f, "tokenizer.ggml.add_space_prefix", true);
  tokenizer["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", prefix ? "first" : "never"}, {"split", false}};
  json decoders = {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}};
  if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tokenizer["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  tokenizer["model"]["byte_fallback"] = true;
  tokenizer["model"]["fuse_unk"] = true;
  tokenizer["model"]["merges"] = sentencepiece_merges(tokens, scores);
}

}  // namespace

json hf_pre_tokenizer_of_gguf(const std::string& pre, const std::string& origin) {
  static const std::map<std::string, std::vector<std::string>> splits = {
      {"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {"gpt-2", {kGpt2}},
      {"phi-2", {kGpt2}},
      {"llama3", {kLlama3}},
      {"llama-v3", {kLlama3}},
      {"llama-bpe", {kLlama3}},
      {"qwen2", {kQwen2}},
      {"deepseek-r1-qwen", {kQwen2}},
      {"starcoder", {R"(\p{N})", kGpt2}},
      {"refact", {R"(\p{N})", kGpt2}}};
  if (pre == "smollm")
    return {{"type", "Sequence"},
            {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
  const auto it = splits.find(pre);
  if (it == splits.end()) {
    std::string names = "smollm";
    for (const auto& [name, regexes] : splits) names += ", " + name;
    throw Error(origin + ": metadata 'tokenizer.ggml.pre' is \"" + pre +
                "\", a pre-tokenizer fbt does not know (supported: " + names + ")");
  }
  return split_sequence(it->second);
}

HfTokenizerFiles hf_tokenizer_from_gguf(const GgufFile& f) {
  const std::string origin = "'" + f.path + "'";
  if (!f.metadata.contains("tokenizer.ggml.model"))
    throw Error(origin +
                ": metadata key 'tokenizer.ggml.model' is missing: the file carries no tokenizer "
                "(tokenizer.ggml.*), and fbt imports a model only with its tokenizer");
  const auto& model_value = f.metadata.at("tokenizer.ggml.model");
  const std::string model = model_value.is_string() ? model_value.get<std::string>() : model_value.dump();
  if (model != "gpt2" && model != "llama")
    throw Error(origin + ": metadata 'tokenizer.ggml.model' is \"" + model +
                "\"; supported: \"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece BPE)");
  const bool sentencepiece = model == "llama";
  const auto tokens = string_array(f, "tokenizer.ggml.tokens");
  const auto& pre_value = f.metadata.value("tokenizer.ggml.pre", json("default"));
  if (!pre_value.is_string()) throw Error(origin + ": metadata 'tokenizer.ggml.pre' is not a string");

  json vocab = json::object();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[tokens[id]] = id;
  if (vocab.size() != tokens.size()) throw Error(origin + ": metadata 'tokenizer.ggml.tokens' holds a token twice");
  const json bos = special_token(f, "tokenizer.ggml.bos_token_id", tokens);
  // llama.cpp (and transformers) add a BOS to a SentencePiece vocabulary that does not say otherwise.
  const bool add_bos = flag(f, "tokenizer.ggml.add_bos_token", sentencepiece);
  json post = nullptr;
  if (add_bos && bos.is_string())
    post = {
        {"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens",
         {{bos.get<std::string>(), {{"id", bos}, {"ids", {vocab.at(bos.get<std::string>())}}, {"tokens", {bos}}}}}}};
  HfTokenizerFiles out;
  out.tokenizer = {{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", added_tokens(f, tokens, sentencepiece)},
                   {"normalizer", nullptr},
                   {"post_processor", post},
                   {"model",
                    {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"ignore_merges", pre_value == "llama3" || pre_value == "llama-v3" || pre_value == "llama-bpe"},
                     {"vocab", vocab}}}};
  if (sentencepiece) {
    sentencepiece_stages(f, tokens, out.tokenizer);
  } else {
    out.tokenizer["pre_tokenizer"] = hf_pre_tokenizer_of_gguf(pre_value.get<std::string>(), origin);
    out.tokenizer["decoder"] = byte_level(true);
    out.tokenizer["model"]["merges"] = string_array(f, "tokenizer.ggml.merges");
  }
  out.config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                {"bos_token", bos},
                {"eos_token", special_token(f, "tokenizer.ggml.eos_token_id", tokens)},
                {"pad_token", special_token(f, "tokenizer.ggml.padding_token_id", tokens)},
                {"add_bos_token", add_bos},
                {"chat_template", f.metadata.value("tokenizer.chat_template", json(nullptr))}};
  return out;
}

}  // namespace fbt
