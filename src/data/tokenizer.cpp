// Byte-level and sentencepiece-BPE tokenizers: model-file reader, BPE encode/decode, training via
// spm_train, and loading a prepared data dir's tokenizer.
#include "fbt/data/tokenizer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <queue>
#include <random>
#include <sstream>
#include <unordered_map>

#include "fbt/data/hf_tokenizer.h"
#include "fbt/data/shards.h"
#include "fbt/util/error.h"
#include "fbt/util/read_file.h"
#include "fbt/util/hash.h"

extern char** environ;

namespace fbt {
namespace {
namespace fs = std::filesystem;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";    // U+2581, sentencepiece's escaped ' '
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// sentencepiece ModelProto.SentencePiece.Type
enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

/// Minimal protobuf wire-format reader (varint, 32/64-bit, length-delimited fields).
class ProtoReader {
 public:
  ProtoReader(std::string_view data, const std::string& origin) : data_(data), origin_(origin) {}
  bool done() const { return pos_ >= data_.size(); }

  /// Reads the next field header; returns its number and sets `wire` to its wire type.
  uint32_t next(int* wire) {
    const uint64_t key = varint();
    *wire = static_cast<int>(key & 7);
    return static_cast<uint32_t>(key >> 3);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) fail("truncated varint");
      const auto c = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<uint64_t>(c & 0x7F) << shift;
      if (c < 0x80) return v;
    }
    fail("varint too long");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > data_.size() - pos_) fail("truncated length-delimited field");
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  float fixed32() {
    if (data_.size() - pos_ < 4) fail("truncated fixed32");
    float f;
    std::memcpy(&f, data_.data() + pos_, 4);
    pos_ += 4;
    return f;
  }
  void skip(int wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1:
        if (data_.size() - pos_ < 8) fail("truncated fixed64");
        pos_ += 8;
        break;
      case 2: bytes(); break;
      case 5: fixed32(); break;
      default: fail("unsupported wire type " + std::to_string(wire));
    }
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(origin_ + " is not a sentencepiece model: " + why);
  }

 private:
  std::string_view data_;
  std::string origin_;
  size_t pos_ = 0;
};

/// The documents' non-empty lines, each cut into pieces of at most max_bytes at UTF-8 character
/// boundaries, then (if more than max_lines) a seeded random sample of max_lines of them.
std::vector<std::string> training_lines(const std::vector<std::string>& documents, const BpeTrainOptions& o,
                                        BpeTrainReport& report) {
  std::vector<std::string> lines;
  for (const std::string& doc : documents) {
    size_t pos = 0;
    while (pos < doc.size()) {
      size_t end = doc.find('\n', pos);
      if (end == std::string::npos) end = doc.size();
      report.lines += pos < end;
      report.long_lines += end - pos > static_cast<size_t>(o.max_sentence_bytes);
      while (pos < end) {
        size_t cut = std::min(end, pos + static_cast<size_t>(o.max_sentence_bytes));
        while (cut < end && cut > pos + 1 && (static_cast<unsigned char>(doc[cut]) & 0xC0) == 0x80) --cut;
        lines.emplace_back(doc, pos, cut - pos);
        pos = cut;
      }
      pos = end + 1;
    }
  }
  report.pieces = static_cast<int64_t>(lines.size());
  if (static_cast<int64_t>(lines.size()) > o.max_sentences) {
    std::mt19937_64 rng(o.seed);
    for (size_t i = lines.size() - 1; i > 0; --i) std::swap(lines[i], lines[rng() % (i + 1)]);
    lines.resize(static_cast<size_t>(o.max_sentences));
  }
  report.sampled = static_cast<int64_t>(lines.size());
  return lines;
}

/// Runs `argv` (PATH lookup) in directory `cwd` with stdout and stderr to `log`; returns its exit
/// status, or throws fbt::Error if it cannot be started.
int run_program(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw Error("cannot run " + argv[0] + ": " + std::strerror(rc) +
                " (it comes with the Debian package \"sentencepiece\"; see scripts/setup.sh)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string tail(const std::string& text, size_t n) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

}  // namespace

// ---- Tokenizer ----

nlohmann::json Tokenizer::meta() const {
  return {
      {"type", type()}, {"vocab_size", vocab_size()}, {"bos_id", bos_id()}, {"eos_id", eos_id()}, {"pad_id", pad_id()}};
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& data_dir) {
  const nlohmann::json meta = read_dataset_meta(data_dir);
  const std::string meta_path = (fs::path(data_dir) / "meta.json").string();
  try {
    const nlohmann::json& t = meta.at("tokenizer");
    const std::string type = t.at("type").get<std::string>();
    std::unique_ptr<Tokenizer> tok;
    if (type == "byte") {
      tok = std::make_unique<ByteTokenizer>();
    } else if (type == "bpe") {
      const std::string model = (fs::path(data_dir) / t.at("model").get<std::string>()).string();
      if (sha256_hex_file(model) != t.at("model_sha256").get<std::string>())
        throw Error("'" + model + "' does not match the sha256 recorded in '" + meta_path +
                    "' (field tokenizer.model_sha256)");
      tok = BpeTokenizer::from_file(model);
    } else if (type == "hf_bpe") {
      tok = HfBpeTokenizer::from_dir(data_dir, t, meta_path);
    } else {
      throw Error("'" + meta_path + "': field tokenizer.type is \"" + type +
                  "\", expected \"bpe\", \"byte\" or \"hf_bpe\"");
    }
    const nlohmann::json actual = tok->meta();
    for (const auto& [field, value] : actual.items()) {
      if (field != "model" && field != "model_sha256" && t.at(field) != value)
        throw Error("'" + meta_path + "': field tokenizer." + field + " is " + t[field].dump() +
                    " but the tokenizer has " + value.dump());
    }
    return tok;
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + meta_path + "': missing or mistyped field in \"tokenizer\": " + e.what());
  }
}

// ---- ByteTokenizer ----

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= kVocab)
      throw Error("byte tokenizer: token id " + std::to_string(id) + " is outside the vocab [0, 259)");
    if (id < 256) out.push_back(static_cast<char>(id));
  }
  return out;
}

// ---- BpeTokenizer: the model ----

struct BpeTokenizer::Model {
  struct Piece {
    std::string text;
    float score = 0;
    int type = kNormal;
  };
  std::vector<Piece> pieces;
  // Like sentencepiece: NORMAL and USER_DEFINED pieces can be merged into; CONTROL, UNKNOWN and
  // BYTE pieces are reserved. Keys view into `pieces`.
  std::unordered_map<std::string_view, int> mergeable, reserved;
  std::vector<std::string_view> user_defined;  // matched whole, longest first
  std::vector<int> byte_piece;                 // byte value -> id (byte_fallback only)
  int unk = -1, bos = -1, eos = -1, pad = -1;
  bool byte_fallback = false;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  std::string unk_surface = " \xE2\x81\x87 ";

  int piece_to_id(std::string_view piece) const {
    if (auto it = reserved.find(piece); it != reserved.end()) return it->second;
    if (auto it = mergeable.find(piece); it != mergeable.end()) return it->second;
    return unk;
  }
  /// Length of the longest user-defined symbol `s` starts with, or 0.
  size_t match_user_defined(std::string_view s) const {
    for (std::string_view u : user_defined)
      if (s.substr(0, u.size()) == u) return u.size();
    return 0;
  }
  std::string normalize(std::string_view input) const;
  std::vector<std::string_view> bpe(std::string_view normalized) const;
};

/// sentencepiece's Normalizer::Normalize for a rule-less (identity) spec: user-defined symbols
/// pass whole, malformed UTF-8 bytes become U+FFFD one by one, then the whitespace options.
std::string BpeTokenizer::Model::normalize(std::string_view in) const {
  auto next = [&](std::string_view s) -> std::pair<std::string_view, size_t> {  // (output, consumed)
    if (const size_t n = match_user_defined(s)) return {s.substr(0, n), n};
    const size_t n = utf8_char_len(s);
    return n == 0 ? std::pair{kReplacement, size_t{1}} : std::pair{s.substr(0, n), n};
  };
  std::string out;
  if (remove_extra_whitespaces)
    while (!in.empty() && next(in).first == " ") in.remove_prefix(1);
  if (in.empty()) return out;
  const std::string_view space = escape_whitespaces ? kSpaceMark : " ";
  if (add_dummy_prefix) out += space;
  bool prev_space = remove_extra_whitespaces;
  while (!in.empty()) {
    auto [piece, consumed] = next(in);
    while (prev_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    if (!piece.empty()) {
      for (char c : piece) {
        if (c == ' ' && escape_whitespaces)
          out += kSpaceMark;
        else
          out += c;
      }
      prev_space = piece.back() == ' ';
    }
    in.remove_prefix(consumed);
    if (!remove_extra_whitespaces) prev_space = false;
  }
  if (remove_extra_whitespaces)
    while (out.size() >= space.size() && std::string_view(out).substr(out.size() - space.size()) == space)
      out.resize(out.size() - space.size());
  return out;
}

/// sentencepiece's bpe::Model::Encode: start from characters (user-defined symbols frozen whole),
/// repeatedly merge the adjacent pair whose concatenation is the highest-scoring mergeable piece
/// (ties: leftmost). Returns the final symbols as views into `normalized`.
std::vector<std::string_view> BpeTokenizer::Model::bpe(std::string_view normalized) const {
  struct Symbol {
    int prev, next;
    bool frozen;
    std::string_view piece;
  };
  struct Pair {
    int left, right;
    float score;
    size_t size;
    bool operator<(const Pair& o) const {  // priority_queue top: highest score, then leftmost
      return score < o.score || (score == o.score && left > o.left);
    }
  };
  std::vector<Symbol> symbols;
  for (std::string_view rest = normalized; !rest.empty();) {
    size_t n = match_user_defined(rest);
    const bool frozen = n > 0;
    if (!frozen) {
      static constexpr char kLen[] = "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4";  // sentencepiece OneCharLen
      n = std::min<size_t>(rest.size(), kLen[static_cast<unsigned char>(rest[0]) >> 4]);
    }
    const int i = static_cast<int>(symbols.size());
    symbols.push_back({i - 1, rest.size() == n ? -1 : i + 1, frozen, rest.substr(0, n)});
    rest.remove_prefix(n);
  }
  std::priority_queue<Pair> agenda;
  auto add_pair = [&](int left, int right) {
    if (left < 0 || right < 0 || symbols[left].frozen || symbols[right].frozen) return;
    const std::string_view joined(symbols[left].piece.data(), symbols[left].piece.size() + symbols[right].piece.size());
    const auto it = mergeable.find(joined);
    if (it == mergeable.end()) return;
    agenda.push({left, right, pieces[it->second].score, joined.size()});
  };
  for (size_t i = 1; i < symbols.size(); ++i) add_pair(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol& l = symbols[top.left];
    Symbol& r = symbols[top.right];
    if (l.piece.empty() || r.piece.empty() || l.piece.size() + r.piece.size() != top.size) continue;  // stale
    l.piece = std::string_view(l.piece.data(), top.size);
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    r.piece = {};
    add_pair(l.prev, top.left);
    add_pair(top.left, l.next);
  }
  std::vector<std::string_view> out;
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) out.push_back(symbols[i].piece);
  return out;
}

// ---- BpeTokenizer ----

BpeTokenizer::BpeTokenizer(std::unique_ptr<const Model> model, std::string proto)
    : model_(std::move(model)), proto_(std::move(proto)) {}

BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_serialized(std::string proto, const std::string& origin) {
  auto m = std::make_unique<Model>();
  int model_type = 1;  // proto default: UNIGRAM
  bool suffix_whitespace = false, has_charsmap = false;
  std::string normalizer = "(unnamed)";
  std::string special[4] = {"<unk>", "<s>", "</s>", "<pad>"};  // TrainerSpec fields 45..48
  ProtoReader top(proto, origin);
  while (!top.done()) {
    int wire;
    const uint32_t field = top.next(&wire);
    if (field == 1 && wire == 2) {  // repeated SentencePiece pieces
      ProtoReader r(top.bytes(), origin);
      Model::Piece p;
      while (!r.done()) {
        const uint32_t f = r.next(&wire);
        if (f == 1 && wire == 2)
          p.text = std::string(r.bytes());
        else if (f == 2 && wire == 5)
          p.score = r.fixed32();
        else if (f == 3 && wire == 0)
          p.type = static_cast<int>(r.varint());
        else
          r.skip(wire);
      }
      m->pieces.push_back(std::move(p));
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      ProtoReader r(top.bytes(), origin);
      while (!r.done()) {
        const uint32_t f = r.next(&wire);
        if (f == 3 && wire == 0)
          model_type = static_cast<int>(r.varint());
        else if (f == 24 && wire == 0)
          suffix_whitespace = r.varint() != 0;
        else if (f == 35 && wire == 0)
          m->byte_fallback = r.varint() != 0;
        else if (f == 44 && wire == 2)
          m->unk_surface = std::string(r.bytes());
        else if (f >= 45 && f <= 48 && wire == 2)
          special[f - 45] = std::string(r.bytes());
        else
          r.skip(wire);
      }
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      ProtoReader r(top.bytes(), origin);
      while (!r.done()) {
        const uint32_t f = r.next(&wire);
        if (f == 1 && wire == 2)
          normalizer = std::string(r.bytes());
        else if (f == 2 && wire == 2)
          has_charsmap = !r.bytes().empty();
        else if (f == 3 && wire == 0)
          m->add_dummy_prefix = r.varint() != 0;
        else if (f == 4 && wire == 0)
          m->remove_extra_whitespaces = r.varint() != 0;
        else if (f == 5 && wire == 0)
          m->escape_whitespaces = r.varint() != 0;
        else
          r.skip(wire);
      }
    } else {
      top.skip(wire);
    }
  }
  if (m->pieces.empty()) top.fail("it has no pieces");
  if (model_type != 2)
    throw Error(origin + " is a sentencepiece model of type " + std::to_string(model_type) +
                "; only BPE (type 2) models are supported");
  if (has_charsmap)
    throw Error(origin + " uses the \"" + normalizer +
                "\" normalization; only identity-normalized BPE models are supported");
  if (suffix_whitespace) throw Error(origin + " uses treat_whitespace_as_suffix, which is not supported");

  m->byte_piece.assign(256, -1);
  for (size_t i = 0; i < m->pieces.size(); ++i) {
    const Model::Piece& p = m->pieces[i];
    const int id = static_cast<int>(i);
    if (p.text.empty()) top.fail("piece " + std::to_string(id) + " is empty");
    if (p.type == kUnused) throw Error(origin + " has UNUSED pieces, which are not supported");
    if (p.type < kNormal || p.type > kByte) top.fail("piece " + std::to_string(id) + " has unknown type");
    const bool mergeable = p.type == kNormal || p.type == kUserDefined;
    if (!(mergeable ? m->mergeable : m->reserved).emplace(p.text, id).second)
      top.fail("piece \"" + p.text + "\" is defined twice");
    if (p.type == kUserDefined) m->user_defined.push_back(p.text);
    if (p.type == kUnknown) m->unk = id;
    if (p.type == kByte) {
      unsigned value = 0;
      if (!m->byte_fallback || p.text.size() != 6 || std::sscanf(p.text.c_str(), "<0x%2X>", &value) != 1)
        top.fail("unexpected byte piece \"" + p.text + "\"");
      m->byte_piece[value] = id;
    }
  }
  std::sort(m->user_defined.begin(), m->user_defined.end(),
            [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
  if (m->byte_fallback && std::count(m->byte_piece.begin(), m->byte_piece.end(), -1) > 0)
    top.fail("byte_fallback is set but not all 256 byte pieces exist");
  auto control_id = [&](const std::string& piece) {
    const auto it = m->reserved.find(piece);
    return it != m->reserved.end() && m->pieces[it->second].type == kControl ? it->second : -1;
  };
  m->bos = control_id(special[1]);
  m->eos = control_id(special[2]);
  m->pad = control_id(special[3]);
  if (m->unk < 0 || m->bos < 0 || m->eos < 0 || m->pad < 0)
    throw Error(origin + " must define UNK, BOS, EOS and PAD pieces (has unk " + std::to_string(m->unk) + ", bos " +
                std::to_string(m->bos) + ", eos " + std::to_string(m->eos) + ", pad " + std::to_string(m->pad) + ")");
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(m), std::move(proto)));
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_file(const std::string& path) {
  return from_serialized(read_whole_file(path, "tokenizer model"), "tokenizer model '" + path + "'");
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::train(const std::vector<std::string>& documents, const BpeTrainOptions& o,
                                                  BpeTrainReport* report) {
  if (o.vocab_size < kMinBpeVocab || o.vocab_size > kMaxBpeVocab)
    throw Error("--vocab-size " + std::to_string(o.vocab_size) +
                " for a BPE tokenizer must be in [262, 2^24] (4 specials + 256 byte pieces + \"\\n\" + merges)");
  BpeTrainReport own;
  BpeTrainReport& r = report ? *report : own;
  const std::vector<std::string> lines = training_lines(documents, o, r);
  if (lines.empty()) throw Error("cannot train a BPE tokenizer: the corpus has no non-empty lines");

  static std::atomic<int> runs{0};
  const fs::path dir =
      fs::temp_directory_path() / ("fbt_spm_train_" + std::to_string(::getpid()) + "_" + std::to_string(runs++));
  fs::create_directories(dir);
  struct RemoveOnExit {
    fs::path path;
    ~RemoveOnExit() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } cleanup{dir};
  const std::string input = (dir / "sample.txt").string(), log = (dir / "log.txt").string();
  {
    std::ofstream f(input, std::ios::binary);
    for (const std::string& line : lines) f << line << '\n';
    f.close();
    if (!f) throw Error("cannot write the BPE training sample '" + input + "'");
  }
  // Relative paths: spm_train records them in the model, which must not depend on the temp dir.
  const std::vector<std::string> argv = {
      "spm_train",
      "--input=sample.txt",
      "--model_prefix=m",
      "--model_type=bpe",
      "--vocab_size=" + std::to_string(o.vocab_size),
      "--hard_vocab_limit=false",  // a small corpus gets a smaller vocab instead of an error
      "--byte_fallback=true",
      "--character_coverage=0.9995",
      "--normalization_rule_name=identity",
      "--add_dummy_prefix=false",
      "--remove_extra_whitespaces=false",
      "--allow_whitespace_only_pieces=true",
      "--split_digits=true",
      "--user_defined_symbols=\n",
      "--unk_id=0",
      "--bos_id=1",
      "--eos_id=2",
      "--pad_id=3",
      "--input_sentence_size=0",  // sampling is done above, with our seed
      "--max_sentence_length=" + std::to_string(o.max_sentence_bytes),
      "--num_threads=" + std::to_string(o.num_threads),
      "--minloglevel=1",
  };
  const int status = run_program(argv, dir.string(), log);
  r.spm_log = read_whole_file(log, "spm_train log");
  if (status != 0) throw Error("spm_train failed with status " + std::to_string(status) + ": " + tail(r.spm_log, 2000));
  const std::string model = (dir / "m.model").string();
  return from_serialized(read_whole_file(model, "trained model"), "the trained BPE model");
}

void BpeTokenizer::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(proto_.data(), static_cast<std::streamsize>(proto_.size()));
  out.close();
  if (!out) throw Error("cannot write tokenizer model '" + path + "'");
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  const Model& m = *model_;
  const std::string normalized = m.normalize(text);
  std::vector<int64_t> ids;
  ids.reserve(normalized.size() / 2);
  bool prev_unk = false;
  for (std::string_view piece : m.bpe(normalized)) {
    const int id = m.piece_to_id(piece);
    const bool unk = id == m.unk;
    if (unk && m.byte_fallback) {
      for (char c : piece) ids.push_back(m.byte_piece[static_cast<unsigned char>(c)]);
    } else if (!(unk && prev_unk)) {  // without byte fallback a run of unknowns is one UNK
      ids.push_back(id);
    }
    prev_unk = unk;
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  const Model& m = *model_;
  std::string out, bytes;
  auto flush_bytes = [&] {  // a run of byte pieces, as UTF-8; malformed bytes -> U+FFFD each
    for (std::string_view rest = bytes; !rest.empty();) {
      const size_t n = utf8_char_len(rest);
      if (n == 0) {
        out += kReplacement;
        rest.remove_prefix(1);
      } else {
        out += rest.substr(0, n);
        rest.remove_prefix(n);
      }
    }
    bytes.clear();
  };
  // As sentencepiece's Decode: the first visible piece loses its leading space mark when the
  // model adds a dummy prefix or strips whitespace.
  bool is_bos_ws = true, bos_ws_seen = false;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw Error("BPE decode: token id " + std::to_string(id) + " is outside the vocab [0, " +
                  std::to_string(vocab_size()) + ")");
    const Model::Piece& p = m.pieces[static_cast<size_t>(id)];
    if (p.type == kByte) {
      unsigned value = 0;
      std::sscanf(p.text.c_str(), "<0x%2X>", &value);
      bytes.push_back(static_cast<char>(value));
      continue;
    }
    flush_bytes();
    if (bos_ws_seen || !out.empty()) is_bos_ws = false;
    bos_ws_seen = false;
    if (p.type == kControl) continue;
    if (p.type == kUnknown) {
      out += m.unk_surface;
      continue;
    }
    std::string_view piece = p.text;
    if (is_bos_ws && (m.add_dummy_prefix || m.remove_extra_whitespaces) &&
        piece.substr(0, kSpaceMark.size()) == kSpaceMark) {
      piece.remove_prefix(kSpaceMark.size());
      bos_ws_seen = !m.remove_extra_whitespaces;
    }
    for (size_t pos = 0; pos < piece.size();) {
      if (piece.substr(pos, kSpaceMark.size()) == kSpaceMark) {
        out += ' ';
        pos += kSpaceMark.size();
      } else {
        out += piece[pos++];
      }
    }
  }
  flush_bytes();
  return out;
}

std::vector<std::string> BpeTokenizer::text_changing_settings() const {
  std::vector<std::string> out;
  if (model_->add_dummy_prefix) out.push_back("add_dummy_prefix=true");
  if (model_->remove_extra_whitespaces) out.push_back("remove_extra_whitespaces=true");
  if (!model_->byte_fallback) out.push_back("byte_fallback=false");
  return out;
}

int64_t BpeTokenizer::vocab_size() const { return static_cast<int64_t>(model_->pieces.size()); }
int64_t BpeTokenizer::bos_id() const { return model_->bos; }
int64_t BpeTokenizer::eos_id() const { return model_->eos; }
int64_t BpeTokenizer::pad_id() const { return model_->pad; }
int64_t BpeTokenizer::unk_id() const { return model_->unk; }

nlohmann::json BpeTokenizer::meta() const {
  nlohmann::json m = Tokenizer::meta();
  m["unk_id"] = unk_id();
  m["model"] = "tokenizer.model";
  m["model_sha256"] = sha256_hex(proto_.data(), proto_.size());
  return m;
}

}  // namespace fbt
