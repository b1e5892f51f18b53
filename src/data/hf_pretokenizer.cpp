// NFC (ICU), lossy UTF-8 repair, PCRE2 regexes and HF's Split / Digits / ByteLevel pre-tokenizers.
#include "fbt/data/hf_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>

#include "fbt/util/error.h"
#include "fbt/util/utf8.h"

namespace fbt {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// HF tokenizers' pre_tokenizers/byte_level.rs: GPT-2's pattern.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string icu_error(const char* what, UErrorCode status) {
  return std::string("NFC normalization: ") + what + " failed (" + u_errorName(status) + ")";
}

/// Length of the maximal prefix of a well-formed UTF-8 sequence at the start of `s` (Unicode's
/// "maximal subpart", as Rust's from_utf8_lossy), and whether it is a whole character.
std::pair<size_t, bool> utf8_subpart(std::string_view s) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = b(0);
  if (lead < 0x80) return {1, true};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the valid range of the second byte (Unicode Table 3-7)
  if (lead >= 0xC2 && lead <= 0xDF)
    need = 2;
  else if (lead >= 0xE0 && lead <= 0xEF)
    need = 3, lo = lead == 0xE0 ? 0xA0 : 0x80, hi = lead == 0xED ? 0x9F : 0xBF;
  else if (lead >= 0xF0 && lead <= 0xF4)
    need = 4, lo = lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xF4 ? 0x8F : 0xBF;
  else
    return {1, false};
  size_t n = 1;
  for (; n < need && n < s.size(); ++n) {
    const unsigned char c = b(n);
    if (n == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) break;
  }
  return {n, n == need};
}

}  // namespace

std::string utf8_lossy(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const auto [n, whole] = utf8_subpart(text);
    if (whole)
      out += text.substr(0, n);
    else
      out += kReplacement;
    text.remove_prefix(n);
  }
  return out;
}

std::string nfc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* norm = unorm2_getNFCInstance(&status);
  if (U_FAILURE(status)) throw Error(icu_error("unorm2_getNFCInstance", status));
  int32_t len = 0;
  std::u16string utf16(text.size() + 1, u'\0');  // UTF-16 units never outnumber UTF-8 bytes
  u_strFromUTF8(reinterpret_cast<UChar*>(utf16.data()), static_cast<int32_t>(utf16.size()), &len, text.data(),
                static_cast<int32_t>(text.size()), &status);
  if (U_FAILURE(status)) throw Error(icu_error("u_strFromUTF8", status));
  utf16.resize(static_cast<size_t>(len));
  if (unorm2_isNormalized(norm, reinterpret_cast<const UChar*>(utf16.data()), len, &status) && U_SUCCESS(status))
    return std::string(text);
  std::u16string normalized(utf16.size() * 3 + 16, u'\0');  // NFC expands by at most 3x
  const int32_t n =
      unorm2_normalize(norm, reinterpret_cast<const UChar*>(utf16.data()), len,
                       reinterpret_cast<UChar*>(normalized.data()), static_cast<int32_t>(normalized.size()), &status);
  if (U_FAILURE(status)) throw Error(icu_error("unorm2_normalize", status));
  std::string out(static_cast<size_t>(n) * 3 + 1, '\0');
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &len, reinterpret_cast<const UChar*>(normalized.data()), n,
              &status);
  if (U_FAILURE(status)) throw Error(icu_error("u_strToUTF8", status));
  out.resize(static_cast<size_t>(len));
  return out;
}

// ---- Regex

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, bool literal, const std::string& origin) : code_(std::make_unique<Code>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // LITERAL refuses UCP
  code_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (!code_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw Error(origin + ": the regex \"" + pattern + "\" does not compile (PCRE2: " +
                reinterpret_cast<const char*>(message) + " at offset " + std::to_string(offset) + ")");
  }
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // interpreted if JIT is unavailable
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), pcre2_match_data_free);
  std::vector<std::pair<size_t, size_t>> out;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (size_t pos = 0; pos < text.size();) {
    const int rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw Error("regex match failed (PCRE2 error " + std::to_string(rc) + ")");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    if (ov[1] > ov[0]) {
      out.emplace_back(ov[0], ov[1]);
      pos = ov[1];
    } else {  // an empty match: step over one character
      pos = ov[0] + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  return out;
}

// ---- HfPreTokenizer

HfPreTokenizer HfPreTokenizer::from_json(const nlohmann::json& p, const std::string& origin) {
  HfPreTokenizer out;
  if (p.is_object() && p.value("type", "") == "Metaspace") {
    auto m = std::make_shared<Metaspace>();
    const auto& replacement =
        p.contains("replacement") ? p.at("replacement") : nlohmann::json("\xE2\x96\x81");  // HF's default, U+2581
    if (!replacement.is_string() || replacement.get<std::string>().empty() ||
        !is_valid_utf8(replacement.get<std::string>()))
      throw Error(origin + ": field pre_tokenizer.replacement must be a non-empty string");
    m->replacement = replacement.get<std::string>();
    // tokenizers < 0.19 wrote add_prefix_space instead of prepend_scheme.
    const std::string scheme = p.contains("prepend_scheme") && p.at("prepend_scheme").is_string()
                                   ? p.at("prepend_scheme").get<std::string>()
                               : p.value("add_prefix_space", true) ? "always"
                                                                   : "never";
    if (scheme == "always")
      m->prepend = Metaspace::Prepend::Always;
    else if (scheme == "first")
      m->prepend = Metaspace::Prepend::First;
    else if (scheme == "never")
      m->prepend = Metaspace::Prepend::Never;
    else
      throw Error(origin + ": field pre_tokenizer.prepend_scheme is \"" + scheme +
                  "\" (expected always, first or never)");
    const auto& split = p.contains("split") ? p.at("split") : nlohmann::json(true);
    if (!split.is_boolean()) throw Error(origin + ": field pre_tokenizer.split is not a boolean");
    if (split.get<bool>())
      m->split = std::make_shared<Regex>(m->replacement, true, origin + ": field pre_tokenizer.replacement");
    out.metaspace_ = std::move(m);
    return out;
  }
  if (p.is_object() && p.value("type", "") == "Sequence") {
    const auto& list = p.contains("pretokenizers") ? p.at("pretokenizers") : nlohmann::json();
    if (!list.is_array() || list.empty())
      throw Error(origin + ": field pre_tokenizer.pretokenizers is missing or empty");
    for (size_t i = 0; i < list.size(); ++i)
      out.add(list[i], origin, "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]", i + 1 == list.size());
  } else {
    out.add(p, origin, "pre_tokenizer", true);
  }
  return out;
}

void HfPreTokenizer::add(const nlohmann::json& p, const std::string& origin, const std::string& field, bool last) {
  const std::string type =
      p.is_object() && p.contains("type") && p.at("type").is_string() ? p.at("type").get<std::string>() : "";
  auto flag = [&](const char* key, bool fallback) {
    if (!p.contains(key)) return fallback;
    if (!p.at(key).is_boolean()) throw Error(origin + ": field " + field + "." + key + " is not a boolean");
    return p.at(key).get<bool>();
  };
  if (type == "ByteLevel") {
    if (!last)
      throw Error(origin + ": field " + field +
                  " is a ByteLevel pre-tokenizer before another one; only a "
                  "ByteLevel last is supported");
    if (flag("add_prefix_space", true)) steps_.push_back({nullptr, Behavior::Isolated, false});
    if (flag("use_regex", true))
      steps_.push_back({std::make_shared<Regex>(kGpt2Pattern, false, origin), Behavior::Isolated, false});
    return;
  }
  if (last)
    throw Error(origin + ": field " + field + " is " + (type.empty() ? "not a pre-tokenizer" : "\"" + type + "\"") +
                "; a byte-level BPE needs a ByteLevel pre-tokenizer last");
  if (type == "Digits") {
    const bool individual = flag("individual_digits", false);
    steps_.push_back({std::make_shared<Regex>(R"(\p{N})", false, origin),
                      individual ? Behavior::Isolated : Behavior::Contiguous, false});
    return;
  }
  if (type != "Split")
    throw Error(origin + ": field " + field + ".type is \"" + type +
                "\", which is not supported (supported: Split, Digits, ByteLevel, Sequence)");
  const auto& pattern = p.contains("pattern") ? p.at("pattern") : nlohmann::json();
  const bool literal = pattern.is_object() && pattern.contains("String") && pattern.at("String").is_string();
  if (!literal && !(pattern.is_object() && pattern.contains("Regex") && pattern.at("Regex").is_string()))
    throw Error(origin + ": field " + field + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
  static const std::vector<std::pair<std::string, Behavior>> behaviors = {
      {"Removed", Behavior::Removed},
      {"Isolated", Behavior::Isolated},
      {"MergedWithPrevious", Behavior::MergedWithPrevious},
      {"MergedWithNext", Behavior::MergedWithNext},
      {"Contiguous", Behavior::Contiguous}};
  const std::string behavior = p.value("behavior", "");
  const auto it = std::find_if(behaviors.begin(), behaviors.end(), [&](const auto& b) { return b.first == behavior; });
  if (it == behaviors.end())
    throw Error(origin + ": field " + field + ".behavior is \"" + behavior +
                "\" (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
  const std::string text = pattern.at(literal ? "String" : "Regex").get<std::string>();
  steps_.push_back({std::make_shared<Regex>(text, literal, origin + ": field " + field + ".pattern"), it->second,
                    flag("invert", false)});
}

/// HF's NormalizedString::split: the pieces of `piece` around the step's matches (is_match
/// flipped by invert), combined as the behavior says.
std::vector<std::string> HfPreTokenizer::apply(const Step& step, std::string_view piece) {
  if (!step.regex) return {piece.substr(0, 1) == " " ? std::string(piece) : " " + std::string(piece)};
  struct Span {
    size_t begin, end;
    bool match;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : step.regex->find_all(piece)) {
    if (prev != b) spans.push_back({prev, b, step.invert});
    spans.push_back({b, e, !step.invert});
    prev = e;
  }
  if (prev != piece.size()) spans.push_back({prev, piece.size(), step.invert});
  std::vector<Span> kept;
  bool previous_match = false;
  const bool reverse = step.behavior == Behavior::MergedWithNext;
  if (reverse) std::reverse(spans.begin(), spans.end());
  for (const Span& s : spans) {
    bool merge = false;
    switch (step.behavior) {
      case Behavior::Removed:
        if (s.match) continue;
        break;
      case Behavior::Isolated: break;
      case Behavior::Contiguous: merge = s.match == previous_match; break;
      case Behavior::MergedWithPrevious:
      case Behavior::MergedWithNext: merge = s.match && !previous_match; break;
    }
    if (merge && !kept.empty())
      (reverse ? kept.back().begin : kept.back().end) = reverse ? s.begin : s.end;
    else
      kept.push_back(s);
    previous_match = s.match;
  }
  if (reverse) std::reverse(kept.begin(), kept.end());
  std::vector<std::string> out;
  for (const Span& s : kept)
    if (s.end > s.begin) out.emplace_back(piece.substr(s.begin, s.end - s.begin));
  return out;
}

bool HfPreTokenizer::prepends(std::string_view text, bool at_start) const {
  if (!metaspace_ || text.empty()) return false;
  const auto& m = *metaspace_;
  if (m.prepend == Metaspace::Prepend::Never || (m.prepend == Metaspace::Prepend::First && !at_start)) return false;
  return text[0] != ' ' && text.substr(0, m.replacement.size()) != m.replacement;
}

std::vector<std::string> HfPreTokenizer::split(std::string_view text, bool at_start) const {
  std::vector<std::string> pieces;
  if (metaspace_) {
    if (text.empty()) return pieces;
    std::string replaced = prepends(text, at_start) ? metaspace_->replacement : "";
    for (char c : text) c == ' ' ? replaced += metaspace_->replacement : replaced += c;
    if (!metaspace_->split) return {replaced};
    return apply({metaspace_->split, Behavior::MergedWithNext, false}, replaced);
  }
  if (!text.empty()) pieces.emplace_back(text);
  for (const Step& step : steps_) {
    std::vector<std::string> next;
    for (const std::string& piece : pieces)
      for (std::string& p : apply(step, piece)) next.push_back(std::move(p));
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace fbt
