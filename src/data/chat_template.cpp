// Chat templates rendered natively (file comment of chat_template.h).
#include "fbt/data/chat_template.h"

#include <regex>

#include "fbt/data/hf_tokenizer.h"
#include "fbt/util/error.h"

namespace fbt {
namespace {

/// One piece of a rendering: text to tokenize, or (id >= 0) a token given by id.
struct Piece {
  std::string text;
  bool scored = false;
  int64_t id = -1;
};

/// Jinja's `trim` filter on ASCII whitespace (Python's str.strip also strips other Unicode spaces).
std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\v\f";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

/// A Jinja string literal's escapes (\n, \t, \', \", \\) resolved.
std::string unescape_literal(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
  }
  return out;
}

/// The default system message of a ChatML template: a literal '<|im_start|>system\n...<|im_end|>'
/// with no quote inside (SmolLM2's and Qwen2.5's else-branch), or "".
std::string chatml_default_system(const std::string& jinja) {
  static const std::regex literal(R"(<\|im_start\|>system(\n|\\n)([^'"]*?)<\|im_end\|>)");
  std::smatch m;
  return std::regex_search(jinja, m, literal) ? unescape_literal(m[2].str()) : "";
}

/// fbt's own tokenizers: each piece on its own, so the generation prompt's last token is the one
/// the SFT data had before every reply.
RenderedChat tokenize_pieces(const Tokenizer& tokenizer, const std::vector<Piece>& pieces) {
  RenderedChat r;
  for (const auto& p : pieces) {
    const auto ids = p.id >= 0 ? std::vector<int64_t>{p.id} : tokenizer.encode(p.text);
    r.ids.insert(r.ids.end(), ids.begin(), ids.end());
    r.scored.insert(r.scored.end(), ids.size(), p.scored ? 1 : 0);
    r.text += p.text;
  }
  return r;
}

/// Appends the text pieces [begin, end) to `r`, tokenized as one text, as
/// apply_chat_template(tokenize=True) does; a token is scored when its bytes overlap a scored
/// piece's (transformers' return_assistant_tokens_mask), so one that straddles a header and the
/// reply is scored.
void append_whole(const HfBpeTokenizer& tokenizer, std::vector<Piece>::const_iterator begin,
                  std::vector<Piece>::const_iterator end, RenderedChat& r) {
  std::string text, normalized;                  // normalized: what the token bytes spell
  std::vector<std::pair<size_t, size_t>> spans;  // scored byte ranges [begin, end) of `normalized`
  for (auto p = begin; p != end; ++p) {
    const std::string n = tokenizer.normalize(p->text);
    if (p->scored && !n.empty()) {
      if (!spans.empty() && spans.back().second == normalized.size())
        spans.back().second += n.size();
      else
        spans.emplace_back(normalized.size(), normalized.size() + n.size());
    }
    normalized += n;
    text += p->text;
  }
  std::vector<bool> prefixed;  // the token starts with a space the text does not have (Metaspace)
  const auto ids = tokenizer.encode_marking_prefixes(text, prefixed);
  size_t at = 0, s = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t spelled = tokenizer.bytes_of(ids[i]).size();
    const size_t next = at + (prefixed[i] && spelled > 0 ? spelled - 1 : spelled);
    while (s < spans.size() && spans[s].second <= at) ++s;
    r.ids.push_back(ids[i]);
    r.scored.push_back(s < spans.size() && spans[s].first < next ? 1 : 0);
    at = next;
  }
  if (at != normalized.size())
    throw Error("chat template: the tokens of the rendered conversation spell " + std::to_string(at) +
                " bytes, not its " + std::to_string(normalized.size()) +
                " (a normalizer that changes text across a message boundary); cannot mark the assistant tokens");
  r.text += text;
}

/// An HF tokenizer: each run of text pieces tokenized whole (append_whole); the pieces that are
/// ids (the fbt template's document prefix and EOS) put in between as they are.
RenderedChat tokenize_whole(const HfBpeTokenizer& tokenizer, const std::vector<Piece>& pieces) {
  RenderedChat r;
  auto run = pieces.begin();
  for (auto p = pieces.begin(); p != pieces.end(); ++p) {
    if (p->id < 0) continue;
    if (run != p) append_whole(tokenizer, run, p, r);
    r.ids.push_back(p->id);
    r.scored.push_back(p->scored ? 1 : 0);
    run = p + 1;
  }
  if (run != pieces.end()) append_whole(tokenizer, run, pieces.end(), r);
  return r;
}

}  // namespace

std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& messages, const std::string& origin) {
  if (!messages.is_array() || messages.empty())
    throw Error(origin + ": \"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = origin + ": messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      throw Error(where + ": expected an object with string fields \"role\" and \"content\"");
    ChatMessage c{m["role"].get<std::string>(), m["content"].get<std::string>()};
    if (c.role != "system" && c.role != "user" && c.role != "assistant")
      throw Error(where + ".role: \"" + c.role + "\" is not one of system, user, assistant");
    if (c.role == "system" && i > 0) throw Error(where + ": a system message may only come first");
    out.push_back(std::move(c));
  }
  return out;
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tokenizer, const std::string& name,
                                         const std::string& origin) {
  const auto* hf = dynamic_cast<const HfBpeTokenizer*>(&tokenizer);
  const std::string jinja = hf ? hf->chat_template() : "";
  ChatFormat format;
  if (name.empty() || name == "auto") {
    const std::string hint =
        "; pass --chat-template chatml, llama3 or fbt to render the conversation in one of "
        "the formats fbt knows (include/fbt/data/chat_template.h)";
    if (!hf) {
      format = ChatFormat::Fbt;
    } else if (jinja.empty()) {
      throw Error(origin + ": the tokenizer has no chat template" + hint);
    } else if (jinja.find("<think>") != std::string::npos ||
               jinja.find("Cutting Knowledge Date") != std::string::npos) {
      throw Error(origin +
                  ": a chat template with reasoning or date blocks (Qwen3, Llama-3.1+) that fbt does not "
                  "render" +
                  hint);
    } else if (jinja.find("<|im_start|>") != std::string::npos) {
      format = ChatFormat::ChatML;
    } else if (jinja.find("<|start_header_id|>") != std::string::npos) {
      format = ChatFormat::Llama3;
    } else {
      throw Error(origin + ": a chat template fbt does not recognise (it renders ChatML and Llama-3's)" + hint);
    }
  } else if (name == "chatml") {
    format = ChatFormat::ChatML;
  } else if (name == "llama3") {
    format = ChatFormat::Llama3;
  } else if (name == "fbt") {
    format = ChatFormat::Fbt;
  } else {
    throw Error("--chat-template " + name + ": expected auto, chatml, llama3 or fbt");
  }

  ChatTemplate t(tokenizer, format);
  auto single = [&](const std::string& token) {  // the id of a special token the format needs
    const auto ids = tokenizer.encode(token);
    if (ids.size() != 1)
      throw Error(origin + ": the tokenizer has no " + token + " token, which the " + t.name() +
                  " chat template needs");
    return ids[0];
  };
  switch (format) {
    case ChatFormat::ChatML:
      single("<|im_start|>");
      t.end_of_turn_ = single("<|im_end|>");
      t.default_system_ = chatml_default_system(jinja);
      break;
    case ChatFormat::Llama3:
      if (single("<|begin_of_text|>") != tokenizer.bos_id())
        throw Error(origin + ": <|begin_of_text|> is not the tokenizer's BOS, which the llama3 chat template needs");
      single("<|start_header_id|>");
      single("<|end_header_id|>");
      t.end_of_turn_ = single("<|eot_id|>");
      break;
    case ChatFormat::Fbt: t.end_of_turn_ = tokenizer.eos_id(); break;
  }
  return t;
}

std::string ChatTemplate::name() const {
  switch (format_) {
    case ChatFormat::ChatML: return "chatml";
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::Fbt: return "fbt";
  }
  return "";
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  if (messages.empty()) throw Error("a chat needs at least one message");
  std::vector<Piece> pieces;
  auto text = [&](std::string s, bool scored = false) { pieces.push_back({std::move(s), scored}); };
  switch (format_) {
    case ChatFormat::ChatML:
      if (!default_system_.empty() && messages[0].role != "system")
        text("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
      for (const auto& m : messages) {
        const bool a = m.role == "assistant";
        text("<|im_start|>" + m.role + "\n");
        text(m.content, a);
        text("<|im_end|>", a);
        text("\n");
      }
      if (add_generation_prompt) text("<|im_start|>assistant\n");
      break;
    case ChatFormat::Llama3:
      text("<|begin_of_text|>");
      for (const auto& m : messages) {
        const bool a = m.role == "assistant";
        text("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
        text(trim(m.content), a);
        text("<|eot_id|>", a);
      }
      if (add_generation_prompt) text("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case ChatFormat::Fbt:
      for (int64_t id : tokenizer_->document_prefix()) pieces.push_back({"", false, id});
      for (const auto& m : messages) {
        if (m.role != "assistant") {
          text((m.role == "system" ? "System: " : "User: ") + m.content + "\n\n");
          continue;
        }
        text("Assistant: ");
        text(m.content, true);
        pieces.push_back({"", true, tokenizer_->eos_id()});
      }
      if (add_generation_prompt) text("Assistant: ");
      break;
  }
  const auto* hf = dynamic_cast<const HfBpeTokenizer*>(tokenizer_);
  return hf ? tokenize_whole(*hf, pieces) : tokenize_pieces(*tokenizer_, pieces);
}

}  // namespace fbt
