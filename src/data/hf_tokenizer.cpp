// Hugging Face BPE tokenizers (byte-level, and SentencePiece-style with byte fallback):
// tokenizer.json reader, added-token matching, BPE merges, decoding, special ids, and the fbt
// tokenizer directory of an imported model.
#include "fbt/data/hf_tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <array>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "fbt/data/hf_pretokenizer.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/error.h"
#include "fbt/util/read_file.h"
#include "fbt/util/hash.h"
#include "fbt/util/json_fields.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

constexpr const char* kModelFile = "tokenizer.json";
constexpr const char* kTemplateFile = "chat_template.jinja";
constexpr size_t kCacheEntries = 1 << 16;  // pre-token -> ids cache, cleared when full
constexpr size_t kCachedPieceBytes = 256;  // longer pre-tokens are not cached

/// GPT-2's bytes_to_unicode (HF pre_tokenizers/byte_level.rs): the printable bytes 33-126,
/// 161-172 and 174-255 stand for themselves, the others for U+0100 onwards in byte order.
/// [0]: byte -> code point; [1]: code point -> byte + 1 (0: not in the alphabet), for cp < 512.
const std::array<std::array<uint32_t, 512>, 2>& byte_alphabet() {
  static const auto table = [] {
    std::array<std::array<uint32_t, 512>, 2> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      t[0][b] = printable ? b : next++;
      t[1][t[0][b]] = b + 1;
    }
    return t;
  }();
  return table;
}

/// The bytes a token's text stands for under the ByteLevel decoder (each character mapped back to
/// its byte), or nullopt if a character is outside the alphabet (the decoder then keeps the text).
std::optional<std::string> token_bytes(const std::string& token) {
  std::string out;
  for (int32_t i = 0, n = static_cast<int32_t>(token.size()); i < n;) {
    UChar32 c;
    U8_NEXT(token.data(), i, n, c);
    const uint32_t b = c >= 0 && c < 512 ? byte_alphabet()[1][static_cast<size_t>(c)] : 0;
    if (b == 0) return std::nullopt;
    out.push_back(static_cast<char>(b - 1));
  }
  return out;
}

/// The ByteLevel spelling of byte `b` (a one-character UTF-8 string).
std::string byte_char(unsigned char b) {
  char buf[4];
  int32_t n = 0;
  U8_APPEND_UNSAFE(buf, n, static_cast<UChar32>(byte_alphabet()[0][b]));
  return std::string(buf, static_cast<size_t>(n));
}

/// Rust's char::is_alphanumeric (Alphabetic or a number category), for single_word tokens.
bool alphanumeric(UChar32 c) {
  const auto type = u_charType(c);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER ||
         type == U_OTHER_NUMBER;
}

UChar32 last_char(std::string_view s) {
  int32_t i = static_cast<int32_t>(s.size());
  UChar32 c;
  U8_PREV(s.data(), 0, i, c);
  return c;
}

UChar32 first_char(std::string_view s) {
  int32_t i = 0;
  UChar32 c;
  U8_NEXT(s.data(), i, static_cast<int32_t>(s.size()), c);
  return c;
}

/// Bytes of whitespace (Rust's char::is_whitespace: White_Space) at the end / start of `s`.
size_t trailing_space(std::string_view s) {
  int32_t i = static_cast<int32_t>(s.size());
  while (i > 0) {
    int32_t j = i;
    UChar32 c;
    U8_PREV(s.data(), 0, j, c);
    if (!u_isUWhiteSpace(c)) break;
    i = j;
  }
  return s.size() - static_cast<size_t>(i);
}

size_t leading_space(std::string_view s) {
  int32_t i = 0;
  const auto n = static_cast<int32_t>(s.size());
  while (i < n) {
    int32_t j = i;
    UChar32 c;
    U8_NEXT(s.data(), j, n, c);
    if (!u_isUWhiteSpace(c)) break;
    i = j;
  }
  return static_cast<size_t>(i);
}

/// The id a TemplateProcessing / Sequence post-processor puts before the text, or -1.
int64_t post_processor_bos(const nlohmann::json& pp, const std::string& origin, const std::string& field) {
  if (pp.is_null()) return -1;
  const std::string type = pp.value("type", "");
  if (type == "ByteLevel") return -1;  // offsets only
  if (type == "Sequence") {
    int64_t bos = -1;
    const auto& list = pp.at("processors");
    for (size_t i = 0; i < list.size(); ++i)
      if (const int64_t id = post_processor_bos(list[i], origin, field + ".processors[" + std::to_string(i) + "]");
          id >= 0)
        bos = id;
    return bos;
  }
  if (type != "TemplateProcessing")
    throw Error(origin + ": field " + field + ".type is \"" + type +
                "\" (supported: null, ByteLevel, TemplateProcessing, Sequence)");
  std::vector<std::string> before;
  bool text_seen = false;
  for (const auto& item : pp.at("single")) {
    if (item.contains("Sequence")) {
      text_seen = true;
    } else if (text_seen) {
      throw Error(origin + ": field " + field + ".single adds tokens after the text, which is not supported");
    } else {
      before.push_back(item.at("SpecialToken").at("id").get<std::string>());
    }
  }
  if (before.empty()) return -1;
  if (before.size() > 1)
    throw Error(origin + ": field " + field + ".single adds " + std::to_string(before.size()) +
                " tokens before the text; only one (a BOS) is supported");
  return pp.at("special_tokens").at(before[0]).at("ids").at(0).get<int64_t>();
}

/// The id of token `content` in tokenizer.json: an added token, else the BPE vocab's; -1 if none.
int64_t find_token(const nlohmann::json& tokenizer, const std::string& content) {
  for (const auto& t : tokenizer.value("added_tokens", nlohmann::json::array()))
    if (t.value("content", "") == content) return t.at("id").get<int64_t>();
  const auto& vocab = tokenizer.at("model").at("vocab");
  const auto it = vocab.find(content);
  return it == vocab.end() ? -1 : it->get<int64_t>();
}

nlohmann::json parse_json(const std::string& text, const std::string& origin) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(origin + ": not valid JSON (" + json_error_brief(e) + ")");
  }
}

std::string special_content(const nlohmann::json& v) {
  return v.is_object() ? v.value("content", "") : v.is_string() ? v.get<std::string>() : "";
}

}  // namespace

// ---- the model

struct HfBpeTokenizer::Model {
  struct Added {
    std::string content;  // NFC'd when normalized and the normalizer is NFC
    int64_t id;
    bool lstrip, rstrip, single_word, normalized;
  };
  struct Segment {
    std::string_view text;
    int64_t id;  // the added token's, or -1: text to pre-tokenize
  };
  /// A SentencePiece-style decoder (Metaspace, or a Sequence of Replace / ByteFallback / Fuse /
  /// Strip): each token's text with `replaces` applied, "<0xNN>" tokens as their byte when
  /// byte_fallback (a run of them that is not UTF-8 as one U+FFFD per token), all joined, then up to
  /// strip_start leading and strip_stop trailing `strip` characters removed.
  struct PieceDecoder {
    std::vector<std::pair<std::string, std::string>> replaces;
    bool byte_fallback = false;
    std::string strip = " ";
    size_t strip_start = 0, strip_stop = 0;
  };
  std::string text, sha256, chat_template;
  int64_t vocab = 0, unk = -1;
  HfSpecialIds specials;
  bool nfc = false, ignore_merges = false;
  bool byte_level = true;  // ByteLevel decoder and alphabet; false: SentencePiece-style
  bool byte_fallback = false, fuse_unk = false;
  PieceDecoder piece_decoder;                          // when !byte_level
  std::unordered_map<std::string, int64_t> piece_ids;  // model.vocab spelling -> id (SentencePiece-style symbols)
  std::array<int64_t, 256> fallback_id{};              // the "<0xNN>" tokens; -1 if absent
  std::vector<bool> byte_piece;                        // ids that decode as one byte (ByteFallback)
  HfPreTokenizer pre;
  std::vector<Added> added;                                          // longest first
  std::array<bool, 256> starts_added{};                              // first bytes of the added tokens
  std::unordered_map<std::string, int64_t> bpe_vocab;                // raw bytes -> id (ByteLevel-alphabet tokens)
  std::unordered_map<std::string, int64_t> by_content;               // tokenizer.json spelling -> id
  std::array<int64_t, 256> byte_id{};                                // the one-byte tokens; -1 if absent
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left << 32 | right) -> (rank, merged)
  std::vector<std::string> id_bytes;                                 // id -> decoded bytes ("" for padding ids)
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache;

  void read_decoder(const nlohmann::json& decoder, const std::string& origin);
  void read_model(const nlohmann::json& model, const std::string& origin);
  std::string spelling(const std::string& token, int64_t id);
  void read_added(const nlohmann::json& tokens, const std::string& origin);
  int64_t checked_id(const nlohmann::json& id, const std::string& origin, const std::string& field) const;
  std::vector<Segment> split_added(std::string_view text, bool normalized) const;
  std::vector<int64_t> bpe(const std::string& piece) const;
  std::vector<int64_t> initial_symbols(const std::string& piece) const;
};

void HfBpeTokenizer::Model::read_decoder(const nlohmann::json& d, const std::string& origin) {
  const auto type_of = [](const nlohmann::json& j) { return j.is_object() ? j.value("type", "") : std::string(); };
  const auto unsupported = [&](const std::string& field, const nlohmann::json& j) {
    return Error(origin + ": field " + field + " is " + j.dump().substr(0, 100) +
                 "; supported decoders: ByteLevel, Metaspace, or a Sequence of Replace (String pattern), "
                 "ByteFallback, Fuse and Strip (after Fuse)");
  };
  if (type_of(d) == "ByteLevel") return;
  byte_level = false;
  if (type_of(d) == "Metaspace") {
    piece_decoder.replaces.emplace_back(d.value("replacement", "\xE2\x96\x81"), " ");  // HF's default, U+2581
    piece_decoder.strip_start =
        d.value("prepend_scheme", d.value("add_prefix_space", true) ? "always" : "never") != "never";
    return;
  }
  if (type_of(d) != "Sequence" || !d.contains("decoders") || !d.at("decoders").is_array())
    throw unsupported("decoder", d);
  bool fused = false, stripped = false;
  for (size_t i = 0; i < d.at("decoders").size(); ++i) {
    const auto& step = d.at("decoders")[i];
    const std::string field = "decoder.decoders[" + std::to_string(i) + "]", type = type_of(step);
    if (stripped) throw unsupported(field, step);
    if (type == "Replace" && !fused && step.contains("pattern") && step.at("pattern").contains("String")) {
      piece_decoder.replaces.emplace_back(step.at("pattern").at("String").get<std::string>(),
                                          step.at("content").get<std::string>());
    } else if (type == "ByteFallback" && !fused) {
      piece_decoder.byte_fallback = true;
    } else if (type == "Fuse") {
      fused = true;
    } else if (type == "Strip" && fused) {
      stripped = true;
      piece_decoder.strip = step.at("content").get<std::string>();
      piece_decoder.strip_start = step.at("start").get<size_t>();
      piece_decoder.strip_stop = step.at("stop").get<size_t>();
    } else {
      throw unsupported(field, step);
    }
  }
}

/// What token `token` (id `id`) spells when decoded, before any Strip: for a byte-level BPE its
/// bytes (the text itself for a token outside the ByteLevel alphabet, e.g. an added one); for a
/// SentencePiece-style one the text with the decoder's replacements, or the byte of "<0xNN>".
std::string HfBpeTokenizer::Model::spelling(const std::string& token, int64_t id) {
  if (byte_level) return token_bytes(token).value_or(token);
  if (piece_decoder.byte_fallback && token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
      std::isxdigit(static_cast<unsigned char>(token[3])) && std::isxdigit(static_cast<unsigned char>(token[4]))) {
    byte_piece[static_cast<size_t>(id)] = true;
    return std::string(1, static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
  }
  std::string out = token;
  for (const auto& [from, to] : piece_decoder.replaces)
    for (size_t pos = 0; (pos = out.find(from, pos)) != std::string::npos; pos += to.size())
      out.replace(pos, from.size(), to);
  return out;
}

int64_t HfBpeTokenizer::Model::checked_id(const nlohmann::json& id, const std::string& origin,
                                          const std::string& field) const {
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab)
    throw Error(origin + ": field " + field + " holds id " + id.dump() + ", outside the model's vocabulary [0, " +
                std::to_string(vocab) + ")");
  return id.get<int64_t>();
}

void HfBpeTokenizer::Model::read_model(const nlohmann::json& model, const std::string& origin) {
  const std::string type = model.value("type", "");
  if (type != "BPE") throw Error(origin + ": field model.type is \"" + type + "\"; only BPE models are supported");
  const auto unsupported = [&](const char* key, bool set) {
    if (set)
      throw Error(origin + ": field model." + std::string(key) + " is " + model.at(key).dump() +
                  ", which is not supported");
  };
  const auto non_empty = [&](const char* key) {
    return model.contains(key) && !model.at(key).is_null() && model.at(key) != "";
  };
  unsupported("dropout", model.contains("dropout") && !model.at("dropout").is_null());
  byte_fallback = model.value("byte_fallback", false);
  fuse_unk = model.value("fuse_unk", false);
  unsupported("byte_fallback", byte_fallback && byte_level);
  unsupported("continuing_subword_prefix", non_empty("continuing_subword_prefix"));
  unsupported("end_of_word_suffix", non_empty("end_of_word_suffix"));
  ignore_merges = model.value("ignore_merges", false);
  const auto& v = model.at("vocab");
  if (!v.is_object()) throw Error(origin + ": field model.vocab is not an object");
  std::unordered_map<std::string, int64_t> spelled;  // ByteLevel spelling -> id, for the merges
  for (const auto& [token, id_json] : v.items()) {
    const int64_t id = checked_id(id_json, origin, "model.vocab[\"" + token + "\"]");
    spelled[token] = id;
    by_content[token] = id;
    if (byte_level) {
      if (const auto bytes = token_bytes(token)) bpe_vocab[*bytes] = id;
    } else {
      piece_ids[token] = id;
    }
    id_bytes[static_cast<size_t>(id)] = spelling(token, id);
  }
  byte_id.fill(-1);
  fallback_id.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (const auto it = spelled.find(byte_char(static_cast<unsigned char>(b))); it != spelled.end())
      byte_id[b] = it->second;
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);  // HF BPE's byte-fallback spelling, format!("<{:#04X}>", b)
    if (const auto it = spelled.find(hex); it != spelled.end()) fallback_id[b] = it->second;
  }
  const auto& list = model.at("merges");
  for (size_t rank = 0; rank < list.size(); ++rank) {
    const auto& m = list[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos)
        throw Error(origin + ": field model.merges[" + std::to_string(rank) + "] is not \"a b\"");
      left = s.substr(0, space), right = s.substr(space + 1);
    } else {
      left = m.at(0).get<std::string>(), right = m.at(1).get<std::string>();
    }
    const auto l = spelled.find(left), r = spelled.find(right), merged = spelled.find(left + right);
    if (l == spelled.end() || r == spelled.end() || merged == spelled.end())
      throw Error(origin + ": field model.merges[" + std::to_string(rank) + "] (\"" + left + " " + right +
                  "\") names a token that is not in model.vocab");
    merges.emplace(static_cast<uint64_t>(l->second) << 32 | static_cast<uint64_t>(r->second),
                   std::pair{static_cast<int32_t>(rank), static_cast<int32_t>(merged->second)});
  }
  if (const auto it = model.find("unk_token"); it != model.end() && it->is_string() && spelled.count(*it))
    unk = spelled.at(*it);
}

void HfBpeTokenizer::Model::read_added(const nlohmann::json& tokens, const std::string& origin) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto& t = tokens[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    Added a{t.at("content").get<std::string>(), checked_id(t.at("id"), origin, field + ".id"),
            t.value("lstrip", false),           t.value("rstrip", false),
            t.value("single_word", false),      t.value("normalized", !t.value("special", false))};
    if (a.content.empty()) throw Error(origin + ": field " + field + ".content is empty");
    by_content[a.content] = a.id;
    id_bytes[static_cast<size_t>(a.id)] = spelling(a.content, a.id);
    if (a.normalized && nfc) a.content = fbt::nfc(a.content);
    starts_added[static_cast<unsigned char>(a.content[0])] = true;
    added.push_back(std::move(a));
  }
  std::stable_sort(added.begin(), added.end(),
                   [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
}

/// HF's AddedVocabulary::find_matches for the added tokens with this `normalized` flag:
/// leftmost-longest non-overlapping matches, skipping single_word ones next to a word character,
/// widened over the whitespace beside them for lstrip / rstrip.
std::vector<HfBpeTokenizer::Model::Segment> HfBpeTokenizer::Model::split_added(std::string_view text,
                                                                               bool normalized) const {
  std::vector<Segment> out;
  size_t done = 0;  // end of the last accepted token
  for (size_t pos = 0; pos < text.size();) {
    const Added* hit = nullptr;
    if (starts_added[static_cast<unsigned char>(text[pos])])
      for (const Added& a : added)
        if (a.normalized == normalized && text.compare(pos, a.content.size(), a.content) == 0) {
          hit = &a;
          break;
        }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->content.size();
    pos = stop;
    if (hit->single_word && ((start > 0 && alphanumeric(last_char(text.substr(0, start)))) ||
                             (stop < text.size() && alphanumeric(first_char(text.substr(stop))))))
      continue;
    if (hit->lstrip) start = std::max(start - trailing_space(text.substr(0, start)), done);
    if (hit->rstrip) stop += leading_space(text.substr(stop));
    if (done < start) out.push_back({text.substr(done, start - done), -1});
    out.push_back({text.substr(start, stop - start), hit->id});
    done = pos = stop;
  }
  if (done < text.size() || text.empty()) out.push_back({text.substr(done), -1});
  return out;
}

/// The symbols HF's BPE::merge_word starts from. Byte-level: the piece's bytes as one-byte tokens.
/// SentencePiece-style: each character's token; a character the vocab lacks becomes its bytes'
/// "<0xNN>" tokens (byte_fallback, when all exist), else the unk token (once for a run of them with
/// fuse_unk). Without an unk token such a character is dropped, as HF does.
std::vector<int64_t> HfBpeTokenizer::Model::initial_symbols(const std::string& piece) const {
  std::vector<int64_t> ids;
  bool after_unk = false;
  const auto add_unk = [&] {
    if (unk >= 0 && !(fuse_unk && after_unk)) ids.push_back(unk);
    after_unk = unk >= 0;
  };
  if (byte_level) {
    for (unsigned char b : piece) {
      if (byte_id[b] >= 0)
        ids.push_back(byte_id[b]), after_unk = false;
      else
        add_unk();
    }
    return ids;
  }
  for (size_t i = 0; i < piece.size();) {
    const size_t n =
        std::max<size_t>(1, utf8_char_len(std::string_view(piece).substr(i)));  // valid UTF-8: encode repaired it
    if (const auto it = piece_ids.find(piece.substr(i, n)); it != piece_ids.end()) {
      ids.push_back(it->second);
      after_unk = false;
    } else if (byte_fallback && std::all_of(piece.begin() + i, piece.begin() + i + n,
                                            [&](char b) { return fallback_id[static_cast<unsigned char>(b)] >= 0; })) {
      for (size_t k = i; k < i + n; ++k) ids.push_back(fallback_id[static_cast<unsigned char>(piece[k])]);
      after_unk = false;
    } else {
      add_unk();
    }
    i += n;
  }
  return ids;
}

/// HF's BPE::merge_word + Word::merge_all: the initial symbols, then repeatedly
/// the pair of lowest merge rank (leftmost on ties) merged, with a heap of candidate pairs.
std::vector<int64_t> HfBpeTokenizer::Model::bpe(const std::string& piece) const {
  if (ignore_merges)
    if (const auto it = bpe_vocab.find(piece); it != bpe_vocab.end()) return {it->second};
  struct Symbol {
    int64_t id;
    int prev, next;
    bool live;
  };
  std::vector<Symbol> s;
  for (const int64_t id : initial_symbols(piece)) {
    const int i = static_cast<int>(s.size());
    s.push_back({id, i - 1, i + 1, true});
  }
  if (!s.empty()) s.back().next = -1;
  struct Candidate {
    int32_t rank, pos, merged;
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto merge_of = [&](int64_t l, int64_t r) {
    const auto it = merges.find(static_cast<uint64_t>(l) << 32 | static_cast<uint64_t>(r));
    return it == merges.end() ? std::pair<int32_t, int32_t>{-1, -1} : it->second;
  };
  std::priority_queue<Candidate> heap;
  const auto push = [&](int pos) {
    if (pos < 0 || s[pos].next < 0) return;
    const auto [rank, merged] = merge_of(s[pos].id, s[s[pos].next].id);
    if (rank >= 0) heap.push({rank, pos, merged});
  };
  for (int i = 0; i + 1 < static_cast<int>(s.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = s[top.pos];
    if (!left.live || left.next < 0 || merge_of(left.id, s[left.next].id).second != top.merged) continue;  // stale
    Symbol& right = s[left.next];
    left.id = top.merged;
    right.live = false;
    left.next = right.next;
    if (left.next >= 0) s[left.next].prev = top.pos;
    push(left.prev);
    push(top.pos);
  }
  std::vector<int64_t> ids;
  for (const Symbol& x : s)
    if (x.live) ids.push_back(x.id);
  return ids;
}

// ---- HfBpeTokenizer

HfBpeTokenizer::HfBpeTokenizer(std::unique_ptr<const Model> model) : model_(std::move(model)) {}
HfBpeTokenizer::~HfBpeTokenizer() = default;

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_text(const std::string& json_text, const std::string& origin,
                                                          int64_t model_vocab, const HfSpecialIds& specials,
                                                          std::string chat_template) {
  const nlohmann::json j = parse_json(json_text, origin);
  auto m = std::make_unique<Model>();
  m->text = json_text;
  m->sha256 = sha256_hex(json_text.data(), json_text.size());
  m->chat_template = std::move(chat_template);
  m->vocab = model_vocab;
  m->specials = specials;
  m->id_bytes.assign(static_cast<size_t>(std::max<int64_t>(model_vocab, 0)), "");
  m->byte_piece.assign(m->id_bytes.size(), false);
  try {
    const auto& normalizer = j.value("normalizer", nlohmann::json());
    if (!normalizer.is_null() && normalizer.value("type", "") != "NFC")
      throw Error(origin + ": field normalizer.type is " + normalizer.value("type", nlohmann::json()).dump() +
                  "; supported: null, NFC");
    m->nfc = !normalizer.is_null();
    m->read_decoder(j.value("decoder", nlohmann::json()), origin);
    m->pre = HfPreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json()), origin);
    if (m->pre.metaspace() == m->byte_level)
      throw Error(origin + ": field pre_tokenizer is " +
                  (m->byte_level ? "a Metaspace, which needs a SentencePiece-style decoder"
                                 : "byte-level, which needs a ByteLevel decoder") +
                  " (field decoder)");
    if (!j.contains("model")) throw Error(origin + ": field 'model' is missing");
    m->read_model(j.at("model"), origin);
    m->read_added(j.value("added_tokens", nlohmann::json::array()), origin);
  } catch (const nlohmann::json::exception& e) {
    throw Error(origin + ": missing or mistyped field (" + json_error_brief(e) + ")");
  }
  for (const auto& [name, id] : {std::pair{"bos_id", specials.bos}, {"eos_id", specials.eos}, {"pad_id", specials.pad}})
    if (id < -1 || id >= model_vocab)
      throw Error(origin + ": the special id " + std::string(name) + " " + std::to_string(id) +
                  " is outside the vocabulary [0, " + std::to_string(model_vocab) + ")");
  if (specials.eos < 0) throw Error(origin + ": the tokenizer has no EOS token (eos_token)");
  if (specials.add_bos && specials.bos < 0) throw Error(origin + ": add_bos is set but there is no BOS token");
  return std::unique_ptr<HfBpeTokenizer>(new HfBpeTokenizer(std::move(m)));
}

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_dir(const std::string& dir, const nlohmann::json& t,
                                                         const std::string& meta_path) {
  const std::string model = (fs::path(dir) / t.at("model").get<std::string>()).string();
  const std::string text = read_whole_file(model, "tokenizer file");
  if (sha256_hex(text.data(), text.size()) != t.at("model_sha256").get<std::string>())
    throw Error("'" + model + "' does not match the sha256 recorded in '" + meta_path +
                "' (field tokenizer.model_sha256)");
  std::string chat_template;
  if (t.contains("chat_template"))
    chat_template =
        read_whole_file((fs::path(dir) / t.at("chat_template").get<std::string>()).string(), "chat template");
  HfSpecialIds ids{t.at("bos_id").get<int64_t>(), t.at("eos_id").get<int64_t>(), t.at("pad_id").get<int64_t>(),
                   t.at("add_bos").get<bool>()};
  return from_text(text, "'" + model + "'", t.at("vocab_size").get<int64_t>(), ids, std::move(chat_template));
}

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_file(const std::string& path) {
  const std::string origin = "'" + path + "'";
  const auto j = parse_json(read_whole_file(path, "tokenizer file"), origin);
  const auto config_path = fs::path(path).parent_path() / "tokenizer_config.json";
  nlohmann::json config;
  if (fs::is_regular_file(config_path))
    config = parse_json(read_whole_file(config_path.string(), "tokenizer config"), "'" + config_path.string() + "'");
  int64_t vocab = 0;
  try {
    for (const auto& [token, id] : j.at("model").at("vocab").items()) vocab = std::max(vocab, id.get<int64_t>() + 1);
    for (const auto& t : j.value("added_tokens", nlohmann::json::array()))
      vocab = std::max(vocab, t.at("id").get<int64_t>() + 1);
  } catch (const nlohmann::json::exception& e) {
    throw Error(origin + ": missing or mistyped field (" + json_error_brief(e) + ")");
  }
  return from_hf(j, config, vocab, fs::path(path).parent_path().string());
}

std::vector<int64_t> HfBpeTokenizer::encode_piece(const std::string& piece) const {
  const Model& m = *model_;
  if (piece.size() > kCachedPieceBytes) return m.bpe(piece);
  {
    std::lock_guard<std::mutex> lock(m.cache_mutex);
    if (const auto it = m.cache.find(piece); it != m.cache.end()) return it->second;
  }
  auto ids = m.bpe(piece);
  std::lock_guard<std::mutex> lock(m.cache_mutex);
  if (m.cache.size() >= kCacheEntries) m.cache.clear();
  m.cache.emplace(piece, ids);
  return ids;
}

std::vector<int64_t> HfBpeTokenizer::encode(std::string_view text) const {
  std::vector<bool> unused;
  return encode_marking_prefixes(text, unused);
}

std::vector<int64_t> HfBpeTokenizer::encode_marking_prefixes(std::string_view raw, std::vector<bool>& prefixed) const {
  const Model& m = *model_;
  const std::string text = is_valid_utf8(raw) ? std::string(raw) : utf8_lossy(raw);
  std::vector<int64_t> ids;
  prefixed.clear();
  const auto push = [&](int64_t id, bool prefix) {
    ids.push_back(id);
    prefixed.push_back(prefix);
  };
  for (const auto& outer : m.split_added(text, false)) {
    if (outer.id >= 0) {
      push(outer.id, false);
      continue;
    }
    const std::string normalized = m.nfc ? fbt::nfc(outer.text) : std::string(outer.text);
    for (const auto& inner : m.split_added(normalized, true)) {
      if (inner.id >= 0) {
        push(inner.id, false);
        continue;
      }
      // HF's Metaspace "first": the segment that starts the text (offsets_original().0 == 0).
      const bool at_start = outer.text.data() == text.data() && inner.text.data() == normalized.data();
      bool prefix = m.pre.prepends(inner.text, at_start);
      for (const std::string& piece : m.pre.split(inner.text, at_start))
        for (int64_t id : encode_piece(piece)) push(id, std::exchange(prefix, false));
    }
  }
  return ids;
}

std::string HfBpeTokenizer::decode(const std::vector<int64_t>& ids) const { return decode_impl(ids, true); }

std::string HfBpeTokenizer::decode_continuation(const std::vector<int64_t>& ids) const {
  return decode_impl(ids, false);
}

std::string HfBpeTokenizer::decode_impl(const std::vector<int64_t>& ids, bool strip) const {
  const Model& m = *model_;
  std::string bytes, fallback;  // fallback: a run of byte pieces (ByteFallback), and its token count
  size_t fallback_tokens = 0;
  const auto flush = [&] {
    if (is_valid_utf8(fallback))
      bytes += fallback;
    else
      for (size_t i = 0; i < fallback_tokens; ++i) bytes += "\xEF\xBF\xBD";  // HF: one U+FFFD per token
    fallback.clear();
    fallback_tokens = 0;
  };
  for (int64_t id : ids) {
    if (id < 0 || id >= m.vocab)
      throw Error("HF tokenizer decode: token id " + std::to_string(id) + " is outside the vocab [0, " +
                  std::to_string(m.vocab) + ")");
    if (id == m.specials.bos || id == m.specials.eos || id == m.specials.pad) continue;
    if (m.byte_piece[static_cast<size_t>(id)]) {
      fallback += m.id_bytes[static_cast<size_t>(id)];
      ++fallback_tokens;
      continue;
    }
    flush();
    bytes += m.id_bytes[static_cast<size_t>(id)];
  }
  flush();
  if (m.byte_level) return utf8_lossy(bytes);
  // Strip: up to strip_start leading and strip_stop trailing copies of the strip character.
  const auto& d = m.piece_decoder;
  std::string_view out = bytes;
  for (size_t i = 0; strip && i < d.strip_start && !d.strip.empty() && out.substr(0, d.strip.size()) == d.strip; ++i)
    out.remove_prefix(d.strip.size());
  for (size_t i = 0; strip && i < d.strip_stop && !d.strip.empty() && out.size() >= d.strip.size() &&
                     out.substr(out.size() - d.strip.size()) == d.strip;
       ++i)
    out.remove_suffix(d.strip.size());
  return std::string(out);
}

int64_t HfBpeTokenizer::vocab_size() const { return model_->vocab; }
int64_t HfBpeTokenizer::bos_id() const { return model_->specials.bos; }
int64_t HfBpeTokenizer::eos_id() const { return model_->specials.eos; }
int64_t HfBpeTokenizer::pad_id() const {
  return model_->specials.pad >= 0 ? model_->specials.pad : model_->specials.eos;
}
const std::string& HfBpeTokenizer::chat_template() const { return model_->chat_template; }

std::vector<int64_t> HfBpeTokenizer::document_prefix() const {
  if (model_->specials.add_bos) return {model_->specials.bos};
  return {};
}

int64_t HfBpeTokenizer::token_id(const std::string& content) const {
  const auto it = model_->by_content.find(content);
  return it == model_->by_content.end() ? -1 : it->second;
}

const std::string& HfBpeTokenizer::bytes_of(int64_t id) const {
  if (id < 0 || id >= model_->vocab)
    throw Error("HF tokenizer: token id " + std::to_string(id) + " is outside the vocab [0, " +
                std::to_string(model_->vocab) + ")");
  return model_->id_bytes[static_cast<size_t>(id)];
}

std::string HfBpeTokenizer::normalize(std::string_view text) const {
  return model_->nfc ? fbt::nfc(text) : std::string(text);
}

nlohmann::json HfBpeTokenizer::meta() const {
  const Model& m = *model_;
  nlohmann::json j = {{"type", type()},           {"vocab_size", m.vocab},    {"bos_id", m.specials.bos},
                      {"eos_id", m.specials.eos}, {"pad_id", m.specials.pad}, {"add_bos", m.specials.add_bos},
                      {"model", kModelFile},      {"model_sha256", m.sha256}};
  if (!m.chat_template.empty()) j["chat_template"] = kTemplateFile;
  return j;
}

std::vector<std::pair<std::string, std::string>> HfBpeTokenizer::files() const {
  std::vector<std::pair<std::string, std::string>> out = {{kModelFile, model_->text}};
  if (!model_->chat_template.empty()) out.emplace_back(kTemplateFile, model_->chat_template);
  return out;
}

// ---- special ids and the tokenizer directory

HfSpecialIds hf_special_ids(const nlohmann::json& tokenizer, const nlohmann::json& config,
                            const std::string& tokenizer_origin, const std::string& config_origin) {
  HfSpecialIds ids;
  try {
    const auto id_of = [&](const char* key) -> int64_t {
      if (!config.is_object() || !config.contains(key) || config.at(key).is_null()) return -1;
      const std::string content = special_content(config.at(key));
      const int64_t id = find_token(tokenizer, content);
      if (id < 0)
        throw Error(config_origin + ": field " + key + " is \"" + content + "\", which is not a token of " +
                    tokenizer_origin);
      return id;
    };
    ids.bos = id_of("bos_token");
    ids.eos = id_of("eos_token");
    ids.pad = id_of("pad_token");
    const int64_t prefix =
        post_processor_bos(tokenizer.value("post_processor", nlohmann::json()), tokenizer_origin, "post_processor");
    const auto add = config.is_object() ? config.value("add_bos_token", nlohmann::json()) : nlohmann::json();
    ids.add_bos = add.is_boolean() ? add.get<bool>() : prefix >= 0;
    if (ids.add_bos && prefix >= 0) ids.bos = prefix;
  } catch (const nlohmann::json::exception& e) {
    throw Error(tokenizer_origin + ": missing or mistyped field (" + json_error_brief(e) + ")");
  }
  if (ids.eos < 0) throw Error(config_origin + ": field eos_token is missing: the tokenizer needs an EOS token");
  return ids;
}

std::unique_ptr<HfBpeTokenizer> HfBpeTokenizer::from_hf(const nlohmann::json& hf_tokenizer,
                                                        const nlohmann::json& hf_tokenizer_config, int64_t model_vocab,
                                                        const std::string& source) {
  const std::string tokenizer_origin = "'" + (fs::path(source) / kModelFile).string() + "'";
  const std::string config_origin = "'" + (fs::path(source) / "tokenizer_config.json").string() + "'";
  const auto ids = hf_special_ids(hf_tokenizer, hf_tokenizer_config, tokenizer_origin, config_origin);
  const auto chat =
      hf_tokenizer_config.is_object() ? hf_tokenizer_config.value("chat_template", nlohmann::json()) : nlohmann::json();
  return from_text(hf_tokenizer.dump(), tokenizer_origin, model_vocab, ids,
                   chat.is_string() ? chat.get<std::string>() : "");
}

nlohmann::json write_hf_tokenizer_dir(const std::string& dir, const nlohmann::json& hf_tokenizer,
                                      const nlohmann::json& hf_tokenizer_config, int64_t model_vocab) {
  const auto tok = HfBpeTokenizer::from_hf(hf_tokenizer, hf_tokenizer_config, model_vocab, dir);
  fs::create_directories(dir);
  for (const auto& [name, bytes] : tok->files()) write_file_atomic((fs::path(dir) / name).string(), bytes);
  const nlohmann::json meta = tok->meta();
  const nlohmann::json file = {{"format", "fbt-dataset"}, {"format_version", 1}, {"tokenizer", meta}};  // as prepare's
  write_file_atomic((fs::path(dir) / "meta.json").string(), file.dump(2) + "\n");
  return meta;
}

}  // namespace fbt
