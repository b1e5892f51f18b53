// A GGUF file's tokenizer (tokenizer.ggml.* metadata) as Hugging Face tokenizer.json and
// tokenizer_config.json objects.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "fbt/io/gguf.h"

namespace fbt {

/// The two files of an HF tokenizer directory, as JSON objects.
struct HfTokenizerFiles {
  nlohmann::json tokenizer;  ///< tokenizer.json
  nlohmann::json config;     ///< tokenizer_config.json: bos_token, eos_token, pad_token, add_bos_token, chat_template
};

/// The HF pre_tokenizer of llama.cpp's byte-level BPE pre-tokenizer `pre` (tokenizer.ggml.pre),
/// following the regex lists of llama.cpp's llama-vocab.cpp (llm_tokenizer_bpe): "default" (also
/// used when the key is absent), "gpt-2"/"phi-2", "llama3"/"llama-v3"/"llama-bpe",
/// "qwen2"/"deepseek-r1-qwen", "smollm"/"starcoder"/"refact". Each regex becomes a Split (Regex,
/// Isolated), applied in order as llama.cpp's unicode_regex_split does, then ByteLevel
/// (use_regex false); smollm is the Digits(individual) + ByteLevel(use_regex true) pair of
/// SmolLM's own tokenizer.json, which splits the same way. Throws fbt::Error naming `origin`,
/// the value and the supported names for another value.
nlohmann::json hf_pre_tokenizer_of_gguf(const std::string& pre, const std::string& origin);

/// The HF tokenizer of `file`'s tokenizer.ggml.* metadata, as transformers builds it from the same
/// file (AutoTokenizer.from_pretrained(dir, gguf_file=...)).
/// - Model "gpt2" (byte-level BPE): model BPE with vocab = tokenizer.ggml.tokens (id = index) and
///   merges = tokenizer.ggml.merges, the pre_tokenizer above, decoder ByteLevel.
/// - Model "llama" (SentencePiece BPE: Llama 2, Mistral, TinyLlama, ...): vocab = the tokens, merges
///   recovered from tokenizer.ggml.scores (transformers' generate_merges), byte_fallback over the
///   256 "<0xNN>" pieces, pre_tokenizer Metaspace (prepend "▁" to the text's first segment when
///   tokenizer.ggml.add_space_prefix, default true), the Replace / ByteFallback / Fuse / Strip
///   decoder; tokenizer.ggml.add_bos_token defaults to true, as in llama.cpp.
///   tokenizer.ggml.add_eos_token is not applied (fbt ends its documents with EOS itself).
/// Both: added_tokens = the CONTROL (token_type 3, special), USER_DEFINED (4, not special) and, for
/// "llama", UNKNOWN (2, special) tokens; a BOS-prepending post_processor when add_bos_token. The
/// config holds bos/eos/pad tokens (by id), add_bos_token and tokenizer.chat_template. Throws
/// fbt::Error naming the file and the key for a missing tokenizer.ggml.model (a file without a
/// tokenizer: fbt imports none without one) or another model, a missing or mistyped token list,
/// merges ("gpt2") or scores ("llama": one number per token), a missing byte piece ("llama"), or a
/// special-token id outside the vocabulary.
HfTokenizerFiles hf_tokenizer_from_gguf(const GgufFile& file);

}  // namespace fbt
