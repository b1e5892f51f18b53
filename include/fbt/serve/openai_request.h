// The request bodies of `fbt serve`'s POST /v1/completions and /v1/chat/completions (OpenAI API
// reference: "Completions" (legacy) and "Chat"), parsed and checked into token-level requests.
//
// Fields read (others are ignored, as OpenAI-compatible servers do; those that would change the
// output and that fbt does not implement are refused): model (absent, null, "" or the served
// model's name; another is ApiError 404 "model_not_found"), prompt | messages, max_tokens
// (chat: also max_completion_tokens), temperature, top_p, top_k, seed, stop, n, stream,
// stream_options.include_usage, echo and logprobs (completions only), and the extensions fbt_mode
// ("standard" | "soft" | "fused") and fbt_fused_passes (k of fused(k)). Every problem is an
// ApiError 400 naming the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fbt/data/chat_template.h"
#include "fbt/data/tokenizer.h"
#include "fbt/infer/decode.h"
#include "fbt/infer/engine.h"
#include "fbt/infer/generate.h"

namespace fbt {

/// What request parsing needs to know about the served model.
struct ServedModel {
  /// The model id (`fbt serve --model-name`, listed by /v1/models): a request whose `model` is
  /// present, not null and not "" must name it (else 404 model_not_found).
  std::string name;
  const Tokenizer* tokenizer = nullptr;            ///< the checkpoint's tokenizer
  const ChatTemplate* chat = nullptr;              ///< its chat template; null: /v1/chat/completions answers 400
  int64_t context = 0;                             ///< model context in tokens
  DecodeMode default_mode = DecodeMode::Standard;  ///< `fbt serve --mode`
  int64_t default_fused_passes = 1;                ///< `fbt serve --fused-passes` (k when a request asks fused)
};

/// The fields both endpoints share.
struct GenerationParams {
  /// fbt_mode (default `fbt serve --mode`) with k = fbt_fused_passes (default `--fused-passes`)
  /// when it is fused
  Decoding decoding;
  /// temperature in {0} ∪ [1e-6, 2] (OpenAI's range), top_p in (0, 1], top_k as top_k_problem
  /// (generate.h) allows, -1 read as 0 (both "all", as vLLM's -1); seed: the request's, or a
  /// random one when absent. Choice i of a prompt samples with seed + i.
  SamplingOptions sampling;
  int64_t max_tokens = 16;        ///< tokens to generate per choice; 0 only for echo scoring
  std::vector<std::string> stop;  ///< text-level stop strings (1..16 non-empty)
  int64_t n = 1;                  ///< choices per prompt, in [1, 128]
  bool stream = false;            ///< answer as server-sent events
  bool include_usage = false;     ///< stream_options.include_usage: a last chunk with usage
  /// ignore_eos (vLLM's extension, also llama-server's): end-of-text and end of turn do not end a
  /// choice; as in vLLM they are sampled like any token and the choice runs to max_tokens or the context
  bool ignore_eos = false;
};

/// The request field of the OpenAI API that carries engine field `field` (BadRequest, engine.h):
/// "prompt", "max_tokens", "fbt_fused_passes", "temperature", "top_k", "top_p".
std::string openai_param(RequestField field);

/// A checked POST /v1/completions body.
struct CompletionRequest {
  GenerationParams params;
  /// Token ids per prompt. A text prompt is the tokenizer's document_prefix() (EOS for fbt's own
  /// tokenizers, as `fbt generate` starts a prompt) followed by its encoding; a token-id prompt
  /// is used as given.
  std::vector<std::vector<int64_t>> prompts;
  /// The text each prompt stands for (echo prepends it): the string given, or the decoded ids.
  std::vector<std::string> prompt_texts;
  bool echo = false;
  int64_t logprobs = -1;  ///< -1: none; k in [0, 20]: each token's logprob and the k most likely
};

/// A checked POST /v1/chat/completions body.
struct ChatRequest {
  GenerationParams params;      ///< max_tokens defaults to the room left in the context
  std::vector<int64_t> prompt;  ///< the messages rendered with the generation prompt
};

/// Parses and checks a completions body (`body`: the raw HTTP body). Throws ApiError 404
/// model_not_found when `model` names another model than model.name (first), and ApiError 400
/// naming the field for: a body that is not a JSON object (param ""), a field of the wrong JSON type, a missing
/// or empty prompt, token ids outside [0, vocab), a prompt that leaves no room in the context
/// (more than context − 1 tokens; with echo and max_tokens 0 up to context), max_tokens < 0 or 0
/// without echo, n outside [1, 128], temperature / top_p / top_k / logprobs / fbt_fused_passes
/// out of range, an unknown fbt_mode, bad stop strings, and unsupported options (suffix,
/// logit_bias, presence_penalty, frequency_penalty, best_of other than n).
CompletionRequest parse_completion_request(const std::string& body, const ServedModel& model);

/// Parses and checks a chat completions body: messages (chat_messages_from_json's rules, rendered
/// through model.chat) and the shared fields as for completions (no echo; logprobs must be absent
/// or false). Throws ApiError 400 naming the field, also when model.chat is null or the rendered
/// conversation leaves no room in the context.
ChatRequest parse_chat_request(const std::string& body, const ServedModel& model);

}  // namespace fbt
