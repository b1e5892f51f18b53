// `fbt prepare`: read a corpus, split it, build the tokenizer, write shards and meta.json.
#include "fbt/data/prepare.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "fbt/data/hf_tokenizer.h"
#include "fbt/data/jsonl.h"
#include "fbt/data/sft_data.h"
#include "fbt/data/shards.h"
#include "fbt/data/tokenizer.h"
#include "fbt/util/error.h"
#include "fbt/util/read_file.h"
#include "fbt/util/hash.h"

namespace fbt {
namespace fs = std::filesystem;
namespace {

constexpr const char* kOutputs[] = {"meta.json",    "train.bin",       "val.bin",        "train.mask.bin",
                                    "val.mask.bin", "tokenizer.model", "tokenizer.json", "chat_template.jinja"};
constexpr const char* kTokenizerFiles[] = {"tokenizer.model", "tokenizer.json", "chat_template.jinja"};

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos; }

/// Calls f(line, line_number) for each '\n'-separated line of `text` (no trailing empty line).
template <class F>
void for_each_line(const std::string& text, F&& f) {
  size_t pos = 0;
  for (int64_t number = 1; pos < text.size(); ++number) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    f(std::string_view(text).substr(pos, end - pos), pos, number);
    pos = end + 1;
  }
}

/// Documents of one file, appended to `docs`; returns how many.
int64_t read_documents(const fs::path& path, const std::string& text, const std::string& text_field,
                       const std::string& doc_split, std::vector<std::string>& docs) {
  const size_t before = docs.size();
  if (path.extension() == ".jsonl") {
    for_each_jsonl_record(path.string(), text, [&](const nlohmann::json& record, const std::string& where) {
      if (!record.is_object() || !record.contains(text_field) || !record[text_field].is_string())
        throw Error(where + ": record has no string field \"" + text_field + "\" (set --text-field)");
      std::string doc = record[text_field].get<std::string>();
      if (!doc.empty()) docs.push_back(std::move(doc));
    });
  } else if (doc_split == "blank") {
    size_t start = 0, end = 0;  // current block: text[start, end)
    bool open = false;
    for_each_line(text, [&](std::string_view line, size_t pos, int64_t) {
      if (is_blank(line)) {
        if (open) docs.emplace_back(text, start, end - start);
        open = false;
        return;
      }
      if (!open) start = pos;
      open = true;
      end = pos + line.size();
    });
    if (open) docs.emplace_back(text, start, end - start);
  } else if (!text.empty()) {
    docs.push_back(text);
  }
  return static_cast<int64_t>(docs.size() - before);
}

/// One input argument's files: itself, or a directory's regular files (recursive, sorted,
/// dot-names skipped).
std::vector<fs::path> input_files(const std::string& input) {
  const fs::path p(input);
  std::error_code ec;
  if (!fs::exists(p, ec)) throw Error("--input '" + input + "' does not exist");
  if (!fs::is_directory(p)) return {p};
  std::vector<fs::path> files;
  auto it = fs::recursive_directory_iterator(p, fs::directory_options::follow_directory_symlink);
  for (; it != fs::recursive_directory_iterator(); ++it) {
    if (it->path().filename().string().rfind('.', 0) == 0) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

/// Deletes the temp files it holds, and the output dir if it made it and it is left empty,
/// unless release()d.
struct TempFiles {
  std::vector<fs::path> paths;
  fs::path created_dir;
  ~TempFiles() {
    std::error_code ec;
    for (const auto& p : paths) fs::remove(p, ec);
    if (!created_dir.empty()) fs::remove(created_dir, ec);  // fails (harmlessly) unless empty
  }
  fs::path add(const fs::path& dir, const std::string& name) {
    paths.push_back(dir / ("." + name + ".tmp"));
    return paths.back();
  }
  void release() {
    paths.clear();
    created_dir.clear();
  }
};

void validate(const PrepareOptions& o) {
  if (o.inputs.empty()) throw Error("--input: give at least one corpus file or directory");
  if (o.out_dir.empty()) throw Error("--out: an output directory is required");
  if (o.tokenizer != "bpe" && o.tokenizer != "byte")
    throw Error("--tokenizer must be \"bpe\" or \"byte\" (got \"" + o.tokenizer + "\")");
  if (o.doc_split != "file" && o.doc_split != "blank")
    throw Error("--doc-split must be \"file\" or \"blank\" (got \"" + o.doc_split + "\")");
  if (!(o.val_fraction > 0.0 && o.val_fraction < 1.0))
    throw Error("--val-fraction must be in (0, 1) (got " + std::to_string(o.val_fraction) + ")");
  if (o.tokenizer == "byte" && !o.tokenizer_model.empty()) throw Error("--tokenizer-model needs --tokenizer bpe");
  if (!o.conversations.empty()) {
    check_conversation_format(o.conversations);
    if (o.tokenizer == "bpe" && o.tokenizer_model.empty())
      throw Error(
          "--conversations renders chats with the model's tokenizer: give --tokenizer-model (an imported "
          "run's RUNDIR/tokenizer, or the data dir a model was trained on) or --tokenizer byte");
  }
}

/// True if out_dir already holds this dataset (same options and sources) with intact files and
/// !force. Throws fbt::Error if it holds anything else of ours and !force.
bool up_to_date(const fs::path& out, const nlohmann::json& options, const nlohmann::json& sources, bool force,
                std::ostream& log) {
  if (!fs::exists(out)) return false;
  if (!fs::is_directory(out)) throw Error("--out '" + out.string() + "' exists and is not a directory");
  if (force) return false;
  const std::string refuse = "; use --force to overwrite it";
  if (!fs::exists(out / "meta.json")) {
    for (const char* name : kOutputs)
      if (fs::exists(out / name))
        throw Error("--out '" + out.string() + "' holds " + name +
                    " but no meta.json (an interrupted or foreign dataset)" + refuse);
    return false;
  }
  nlohmann::json meta;
  try {
    meta = read_dataset_meta(out.string());
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + refuse);
  }
  std::vector<std::string> differ;
  if (meta.value("options", nlohmann::json()) != options) differ.push_back("options");
  if (meta.value("sources", nlohmann::json()) != sources) differ.push_back("sources");
  if (!differ.empty())
    throw Error("--out '" + out.string() + "' already holds a different prepared dataset (its " + differ[0] +
                (differ.size() > 1 ? " and " + differ[1] : "") + " differ)" + refuse);
  try {  // same dataset: reuse it if the files are intact
    for (const char* split : {"train", "val"})
      if (open_split(out.string(), split).size() != meta["splits"][split]["tokens"].get<int64_t>()) return false;
    Tokenizer::load(out.string());
  } catch (const std::exception& e) {
    log << "existing dataset in " << out.string() << " is damaged (" << e.what() << "); rebuilding\n";
    return false;
  }
  return true;
}

struct SplitStats {
  int64_t tokens = 0, bytes = 0, documents = 0;
  int64_t lossy = 0, lossy_invalid_utf8 = 0;  // documents that do not round-trip; of them, not valid UTF-8
};

/// Encodes `docs` (each followed by EOS) into the shard at `path`.
SplitStats write_split(const std::vector<std::string>& docs, const Tokenizer& tok, const fs::path& path) {
  SplitStats s;
  ShardWriter writer(path.string(), tok.vocab_size());
  for (const std::string& doc : docs) {
    std::vector<int64_t> ids = tok.encode(doc);
    const std::string decoded = tok.decode(ids);
    s.bytes += static_cast<int64_t>(decoded.size());
    if (decoded != doc) {
      ++s.lossy;
      s.lossy_invalid_utf8 += !is_valid_utf8(doc);
    }
    ids.push_back(tok.eos_id());
    writer.append(ids);
    ++s.documents;
  }
  writer.close();
  s.tokens = writer.count();
  return s;
}

/// Reports what BPE training changed in the corpus' lines (long lines cut, a sample taken) and
/// spm_train's warnings, which would otherwise be lost with its temporary directory.
void log_bpe_training(const BpeTrainReport& r, const BpeTrainOptions& o, std::ostream& log) {
  log << "BPE training lines: " << r.lines << " non-empty line(s)";
  if (r.long_lines > 0)
    log << "; " << r.long_lines << " longer than " << o.max_sentence_bytes << " bytes, cut into pieces (" << r.pieces
        << " training lines)";
  if (r.sampled < r.pieces) log << "; a seeded sample of " << r.sampled << " of the " << r.pieces << " used";
  log << "\n";
  std::istringstream lines(r.spm_log);
  int shown = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (++shown > 20) {
      log << "spm_train: ... (more lines not shown)\n";
      break;
    }
    log << "spm_train: " << line << "\n";
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// The file that identifies --tokenizer-model `path` (its sha256 is recorded): the file itself,
/// or a directory's meta.json (an fbt run/tokenizer or data directory) or tokenizer.json.
fs::path tokenizer_model_file(const std::string& path) {
  const fs::path p(path);
  if (!fs::is_directory(p)) return p;
  return fs::exists(p / "meta.json") ? p / "meta.json" : p / "tokenizer.json";
}

/// --tokenizer-model: a sentencepiece model file, an HF tokenizer.json (with the
/// tokenizer_config.json beside it), or a directory holding an fbt tokenizer (meta.json: a run's
/// tokenizer/ or a data dir, so an imported model's padded vocab is kept) or a tokenizer.json.
std::unique_ptr<Tokenizer> load_tokenizer_model(const std::string& path) {
  const fs::path p(path);
  if (fs::is_directory(p)) {
    if (fs::exists(p / "meta.json")) return Tokenizer::load(path);
    if (!fs::exists(p / "tokenizer.json"))
      throw Error("--tokenizer-model " + path +
                  ": the directory holds neither meta.json (an fbt tokenizer) nor tokenizer.json");
    return HfBpeTokenizer::from_file((p / "tokenizer.json").string());
  }
  if (p.extension() == ".json") return HfBpeTokenizer::from_file(path);
  return BpeTokenizer::from_file(path);
}

/// Warns on `log` about documents that do not round-trip: invalid UTF-8, or valid UTF-8 that the
/// --tokenizer-model's own settings change.
void warn_lossy_documents(const SplitStats& train, const SplitStats& val, const Tokenizer& tok, const PrepareOptions& o,
                          std::ostream& log) {
  const int64_t lossy = train.lossy + val.lossy, invalid = train.lossy_invalid_utf8 + val.lossy_invalid_utf8;
  if (invalid > 0)
    log << "warning: " << invalid << " document(s) hold invalid UTF-8 and do not round-trip exactly (each "
        << "malformed byte becomes U+FFFD)\n";
  if (lossy > invalid) {  // valid UTF-8 changed: the tokenizer model's own settings
    std::string settings;
    if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok))
      for (const auto& s : bpe->text_changing_settings()) settings += (settings.empty() ? "" : ", ") + s;
    log << "warning: " << lossy - invalid << " document(s) of valid UTF-8 do not round-trip exactly: "
        << (settings.empty() ? std::string("the tokenizer does not reproduce them")
                             : "--tokenizer-model " + o.tokenizer_model + " changes text (" + settings +
                                   ": a leading space is dropped, runs of spaces are collapsed and trimmed, "
                                   "or unknown characters become <unk>)")
        << "; a model trained by fbt prepare (no --tokenizer-model) round-trips every valid UTF-8 document\n";
  }
}

/// The tokenizer of a dataset: the byte tokenizer, --tokenizer-model, or BPE trained on the train split.
std::unique_ptr<Tokenizer> build_tokenizer(const PrepareOptions& o, const TrainValSplit& split, std::ostream& log) {
  if (o.tokenizer == "byte") return std::make_unique<ByteTokenizer>();
  if (!o.tokenizer_model.empty()) return load_tokenizer_model(o.tokenizer_model);
  const auto t = std::chrono::steady_clock::now();
  BpeTrainOptions bo;
  bo.vocab_size = o.vocab_size;
  bo.seed = o.seed;
  BpeTrainReport report;
  auto tok = BpeTokenizer::train(split.train, bo, &report);
  log << "trained BPE tokenizer: vocab " << tok->vocab_size() << " (asked " << o.vocab_size << ") in "
      << seconds_since(t) << " s\n";
  log_bpe_training(report, bo, log);
  return tok;
}

/// A conversation split (sft_data.h): the rendered conversations into `path` and their mask into
/// a temp file of `temps` beside it; `block` gets the split's conversation counts.
SplitStats write_conversation_split(const PrepareOptions& o, const Tokenizer& tok, const std::vector<std::string>& docs,
                                    const std::string& split, const fs::path& path, TempFiles& temps,
                                    nlohmann::json& block) {
  const std::string origin = o.tokenizer_model.empty() ? "--tokenizer byte" : "--tokenizer-model " + o.tokenizer_model;
  const auto chat = ChatTemplate::for_tokenizer(tok, o.chat_template, origin);
  const auto c =
      write_conversations(docs, chat, tok.vocab_size(), path, temps.add(path.parent_path(), split + ".mask.bin"));
  block = {{"conversations", c.conversations}, {"tokens", c.tokens}, {"scored_tokens", c.scored}};
  return {c.tokens, c.bytes, c.conversations, 0, 0};
}

}  // namespace

Corpus read_corpus(const std::vector<std::string>& inputs, const std::string& text_field, const std::string& doc_split,
                   const std::string& conversations) {
  Corpus corpus;
  std::set<fs::path> seen;
  for (const std::string& input : inputs) {
    int64_t docs_from_input = 0;
    for (const fs::path& file : input_files(input)) {
      const fs::path abs = fs::weakly_canonical(fs::absolute(file));
      if (!seen.insert(abs).second) throw Error("--input: file '" + abs.string() + "' is given twice");
      const std::string text = read_whole_file(file.string(), "input file");
      SourceFile src;
      src.path = abs.string();
      src.sha256 = sha256_hex(text.data(), text.size());
      src.bytes = static_cast<int64_t>(text.size());
      if (conversations.empty()) {
        src.documents = read_documents(file, text, text_field, doc_split, corpus.documents);
      } else {
        auto c = read_conversations(file, text, conversations);
        src.documents = static_cast<int64_t>(c.size());
        corpus.documents.insert(corpus.documents.end(), std::make_move_iterator(c.begin()),
                                std::make_move_iterator(c.end()));
      }
      docs_from_input += src.documents;
      corpus.sources.push_back(std::move(src));
    }
    if (docs_from_input == 0) throw Error("--input '" + input + "' is empty (no text in it)");
  }
  return corpus;
}

TrainValSplit split_train_val(std::vector<std::string> documents, double val_fraction, uint64_t seed) {
  TrainValSplit out;
  const size_t n = documents.size();
  if (n == 1) {
    const std::string& doc = documents[0];
    if (doc.size() < 2)
      throw Error("corpus too small: a single document of " + std::to_string(doc.size()) +
                  " byte(s) cannot be split into train and val");
    const auto target = static_cast<size_t>(static_cast<double>(doc.size()) * (1.0 - val_fraction));
    size_t cut = doc.find('\n', target == 0 ? 0 : target - 1);  // first line end at/after target
    if (cut != std::string::npos) ++cut;
    if (cut == std::string::npos || cut >= doc.size()) {  // else the last line end before it
      const size_t before = target == 0 ? std::string::npos : doc.rfind('\n', target - 1);
      cut = before == std::string::npos ? 0 : before + 1;
    }
    if (cut == 0 || cut >= doc.size()) {  // no usable newline: nearest UTF-8 boundary
      cut = std::clamp<size_t>(target, 1, doc.size() - 1);
      while (cut < doc.size() - 1 && (static_cast<unsigned char>(doc[cut]) & 0xC0) == 0x80) ++cut;
    }
    out.train.push_back(doc.substr(0, cut));
    out.val.push_back(doc.substr(cut));
    return out;
  }
  if (n == 0) throw Error("corpus too small: no documents");
  const auto n_val =
      std::clamp<size_t>(static_cast<size_t>(std::llround(val_fraction * static_cast<double>(n))), 1, n - 1);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (size_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
  std::vector<bool> is_val(n, false);
  for (size_t i = 0; i < n_val; ++i) is_val[order[i]] = true;
  for (size_t i = 0; i < n; ++i) (is_val[i] ? out.val : out.train).push_back(std::move(documents[i]));
  return out;
}

nlohmann::json prepare_dataset(const PrepareOptions& o, std::ostream& log) {
  validate(o);
  const auto t0 = std::chrono::steady_clock::now();
  Corpus corpus = read_corpus(o.inputs, o.text_field, o.doc_split, o.conversations);
  if (!o.conversations.empty() && corpus.documents.size() < 2)
    throw Error("--input: " + std::to_string(corpus.documents.size()) +
                " conversation(s); train and val need at least 2");
  int64_t corpus_bytes = 0;
  for (const auto& s : corpus.sources) corpus_bytes += s.bytes;
  log << "read " << corpus.documents.size() << " documents (" << corpus_bytes << " bytes) from "
      << corpus.sources.size() << " file(s)\n";

  nlohmann::json sources = nlohmann::json::array();
  for (const auto& s : corpus.sources)
    sources.push_back({{"path", s.path}, {"sha256", s.sha256}, {"bytes", s.bytes}, {"documents", s.documents}});
  nlohmann::json tokenizer_model = nullptr;
  if (!o.tokenizer_model.empty()) {
    const std::string abs = fs::weakly_canonical(fs::absolute(o.tokenizer_model)).string();
    tokenizer_model = {{"path", abs}, {"sha256", sha256_hex_file(tokenizer_model_file(o.tokenizer_model).string())}};
  }
  const bool train_bpe = o.tokenizer == "bpe" && o.tokenizer_model.empty();
  nlohmann::json options = {{"tokenizer", o.tokenizer},
                            {"vocab_size", train_bpe ? nlohmann::json(o.vocab_size) : nlohmann::json(nullptr)},
                            {"tokenizer_model", tokenizer_model},
                            {"text_field", o.text_field},
                            {"doc_split", o.doc_split},
                            {"val_fraction", o.val_fraction},
                            {"seed", o.seed}};
  if (!o.conversations.empty())
    options.update({{"conversations", o.conversations}, {"chat_template", o.chat_template}});
  const fs::path out(o.out_dir);
  if (up_to_date(out, options, sources, o.force, log)) {
    log << out.string() << " already holds this dataset; nothing to do\n";
    return read_dataset_meta(out.string());
  }

  TrainValSplit split = split_train_val(std::move(corpus.documents), o.val_fraction, o.seed);
  log << "split: " << split.train.size() << " train / " << split.val.size() << " val documents\n";

  const auto tok = build_tokenizer(o, split, log);

  TempFiles temps;
  if (fs::create_directories(out)) temps.created_dir = out;
  const fs::path train_tmp = temps.add(out, "train.bin"), val_tmp = temps.add(out, "val.bin");
  const fs::path meta_tmp = temps.add(out, "meta.json");
  nlohmann::json conversations;  // the conversation dataset's block of meta.json
  const SplitStats train = o.conversations.empty() ? write_split(split.train, *tok, train_tmp)
                                                   : write_conversation_split(o, *tok, split.train, "train", train_tmp,
                                                                              temps, conversations["train"]);
  const SplitStats val = o.conversations.empty() ? write_split(split.val, *tok, val_tmp)
                                                 : write_conversation_split(o, *tok, split.val, "val", val_tmp, temps,
                                                                            conversations["val"]);
  for (const auto& [name, s] : {std::pair{"train", train}, std::pair{"val", val}})
    if (s.tokens < 2)
      throw Error("corpus too small: the " + std::string(name) + " split has " + std::to_string(s.tokens) +
                  " token(s), need at least 2");
  std::vector<std::pair<fs::path, std::string>> tokenizer_tmps;  // temp file, final name
  for (const auto& [name, bytes] : tok->files()) {
    tokenizer_tmps.emplace_back(temps.add(out, name), name);
    std::ofstream f(tokenizer_tmps.back().first, std::ios::binary);
    f << bytes;
    f.close();
    if (!f) throw Error("cannot write '" + tokenizer_tmps.back().first.string() + "'");
  }

  nlohmann::json splits;
  for (const auto& [name, s, path] : {std::tuple{"train", train, train_tmp}, std::tuple{"val", val, val_tmp}}) {
    splits[name] = {{"file", std::string(name) + ".bin"},
                    {"tokens", s.tokens},
                    {"bytes", s.bytes},
                    {"documents", s.documents},
                    {"sha256", sha256_hex_file(path.string())},
                    {"sampled_sha256", sha256_hex_file_sampled(path.string())}};
    log << name << ": " << s.documents << " documents, " << s.tokens << " tokens, " << s.bytes << " bytes ("
        << static_cast<double>(s.bytes) / static_cast<double>(s.tokens) << " bytes/token)\n";
  }
  const int64_t lossy = train.lossy + val.lossy;
  warn_lossy_documents(train, val, *tok, o, log);
  nlohmann::json meta = {{"format", "fbt-dataset"}, {"format_version", 1}, {"tokenizer", tok->meta()},
                         {"splits", splits},        {"sources", sources},  {"options", options},
                         {"lossy_documents", lossy}};
  if (!o.conversations.empty()) {
    const auto chat = ChatTemplate::for_tokenizer(*tok, o.chat_template, "");
    conversations.update(
        {{"format", o.conversations}, {"chat_template", chat.name()}, {"end_of_turn_id", chat.end_of_turn_id()}});
    meta["conversations"] = conversations;
    log << "conversations: " << conversations["train"]["scored_tokens"] << " / "
        << conversations["val"]["scored_tokens"] << " scored (assistant) tokens in train / val, chat template "
        << chat.name() << "\n";
  }
  {
    std::ofstream f(meta_tmp);
    f << meta.dump(2) << "\n";
    f.close();
    if (!f) throw Error("cannot write '" + meta_tmp.string() + "'");
  }

  // Commit: meta.json goes last, so a dir without it is recognisably incomplete.
  fs::remove(out / "meta.json");
  fs::rename(train_tmp, out / "train.bin");
  fs::rename(val_tmp, out / "val.bin");
  for (const char* split : {"train", "val"}) {
    fs::remove(out / (std::string(split) + ".mask.bin"));
    if (!o.conversations.empty())
      fs::rename(out / ("." + std::string(split) + ".mask.bin.tmp"), out / (std::string(split) + ".mask.bin"));
  }
  for (const char* name : kTokenizerFiles) fs::remove(out / name);
  for (const auto& [tmp, name] : tokenizer_tmps) fs::rename(tmp, out / name);
  fs::rename(meta_tmp, out / "meta.json");
  temps.release();
  log << "wrote " << out.string() << " in " << seconds_since(t0) << " s\n";
  return meta;
}

}  // namespace fbt
