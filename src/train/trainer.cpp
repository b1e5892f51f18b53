// The training loop of `fbt train`: K-pass steps, metrics, validation, checkpoints, resume.
#include "fbt/train/trainer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "fbt/data/sft_data.h"
#include "fbt/data/shards.h"
#include "fbt/data/tokenizer.h"
#include "fbt/dist/gradient_sync.h"
#include "fbt/train/held_out_loss.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/run_dir.h"
#include "fbt/model/precision.h"
#include "fbt/train/normuon.h"
#include "fbt/train/optimizer.h"
#include "fbt/model/passes.h"
#include "fbt/train/slowdown_watch.h"
#include "fbt/train/train_config.h"
#include "fbt/train/training_checkpoint.h"
#include "fbt/util/atomic_file.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"
#include "fbt/util/json_fields.h"
#include "fbt/util/memory_stats.h"

namespace fbt {
namespace fs = std::filesystem;
namespace {

std::atomic<int> g_stop_signal{0};  // the SIGINT/SIGTERM received, 0 for none
extern "C" void request_stop(int signal) { g_stop_signal = signal; }

/// Installs SIGINT/SIGTERM handlers for the lifetime of a run and restores the old ones.
struct StopSignals {
  using Handler = void (*)(int);
  Handler old_int, old_term;
  StopSignals() {
    g_stop_signal = 0;
    old_int = std::signal(SIGINT, request_stop);
    old_term = std::signal(SIGTERM, request_stop);
  }
  ~StopSignals() {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  }
};

std::string format_duration(double seconds) {
  const int64_t s = std::llround(std::max(0.0, seconds));
  std::ostringstream o;
  if (s >= 3600) o << s / 3600 << "h";
  if (s >= 60) o << (s % 3600) / 60 << "m";
  o << s % 60 << "s";
  return o.str();
}

/// Realised fraction of steps per K, {"1": f1, "2": f2, ...}.
nlohmann::json pass_fractions(const std::map<int64_t, int64_t>& counts) {
  int64_t total = 0;
  for (const auto& [k, v] : counts) total += v;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [k, v] : counts) out[std::to_string(k)] = double(v) / double(std::max<int64_t>(1, total));
  return out;
}

/// What one optimiser step produced (summed over micro-batches and ranks).
struct StepOutcome {
  int64_t passes = 1;  // K
  double lr_factor = 1, wd_factor = 1;
  bool cooldown = false, z_loss_on = false;
  double loss = 0, z_loss = 0;   // total = L1 + λ·mean(L2..LK); z-loss (cooldown only)
  std::vector<double> per_pass;  // CE of pass 1..K
  double grad_norm = std::nan("");
  double comm_s = 0;   // all-reduce time not hidden by backward
  double step_s = 0;   // wall-clock seconds of the step
  double cpu_s = 0;    // CPU seconds of the whole process (all threads) during the step
  bool ok = false;     // finite loss and gradient: the update was applied
  int stop = 0;        // SIGINT/SIGTERM seen by any rank, else 0
  int64_t tokens = 0;  // input tokens of the step (padding excluded), all ranks
  int64_t scored = 0;  // scored targets of the step, all ranks: the loss is their mean
};

/// Whether RUNDIR holds a run that wrote at least one checkpoint (a step directory or `latest`).
bool has_checkpoints(const fs::path& out) {
  return fs::exists(out / "latest") || !step_dirs_newest_first(out.string()).empty();
}

/// Throws fbt::Error naming --out unless `dir` is a directory fbt can write in or can create
/// (its nearest existing ancestor is a writable directory). Touches nothing.
void check_out_dir(const fs::path& dir) {
  std::error_code ec;
  fs::path existing = fs::absolute(dir, ec);
  while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
  if (!fs::is_directory(existing, ec))
    throw Error("--out " + dir.string() + ": " + existing.string() + " exists and is not a directory");
  if (::access(existing.c_str(), W_OK) != 0)
    throw Error("--out " + dir.string() + ": cannot write in " + existing.string() + ": " + std::strerror(errno));
}

/// Throws fbt::Error unless the dataset's tokenizer (meta.json "tokenizer" of --data) is the
/// one the run was trained with (RUNDIR/tokenizer/meta.json): same type, vocabulary, special
/// ids and sentencepiece model. Checked before anything in the run directory is touched.
void check_run_tokenizer(const TrainOptions& opt, const nlohmann::json& data_tokenizer) {
  const auto run_meta_dir = (fs::path(opt.out_dir) / "tokenizer").string();
  const auto run_tokenizer = read_dataset_meta(run_meta_dir).at("tokenizer");
  for (const auto& [key, value] : run_tokenizer.items())
    if (!data_tokenizer.contains(key) || data_tokenizer[key] != value)
      throw Error("--data " + opt.data_dir + ": its tokenizer differs from the run's (" + run_meta_dir +
                  "/meta.json): field '" + key + "' is " + data_tokenizer.value(key, nlohmann::json()).dump() +
                  " but the run has " + value.dump() + "; resume with the dataset the run was trained on");
}

/// Throws fbt::Error unless the dataset's tokenizer (meta.json "tokenizer" of --data) is the one
/// the --init-from checkpoint records: same type, vocabulary and tokenizer model file.
void check_init_tokenizer(const TrainOptions& opt, const nlohmann::json& data_tokenizer, const CheckpointInfo& info,
                          const std::string& model_file) {
  if (!info.tokenizer.is_object()) return;  // a checkpoint without a tokenizer record: vocab checked later
  for (const char* key : {"type", "vocab_size", "model_sha256"})
    if (info.tokenizer.contains(key) && data_tokenizer.value(key, nlohmann::json()) != info.tokenizer.at(key))
      throw Error("--data " + opt.data_dir + ": its tokenizer's '" + key + "' is " +
                  data_tokenizer.value(key, nlohmann::json()).dump() + " but --init-from " + model_file + " has " +
                  info.tokenizer.at(key).dump() +
                  "; prepare the data with the checkpoint's tokenizer (fbt prepare --tokenizer-model "
                  "RUNDIR/tokenizer/...)");
}

/// Makes the run directory ready once the run can start: clears it with --force (or when it
/// holds only the record of a run killed before its first checkpoint), copies the dataset's
/// tokenizer into RUNDIR/tokenizer (a fresh run; --resume keeps the run's own).
void prepare_run_dir(const TrainOptions& opt, const nlohmann::json& tok, std::ostream& log) {
  const fs::path out(opt.out_dir), data(opt.data_dir);
  const bool stub = !opt.resume && fs::exists(out / "run.json") && !has_checkpoints(out);
  if (stub)
    log << "note: " << opt.out_dir << " holds a run that stopped before its first checkpoint; starting it afresh\n";
  if ((opt.force || stub) && fs::exists(out)) {
    for (const auto& entry : fs::directory_iterator(out)) {
      const auto name = entry.path().filename().string();
      if (name.rfind("step-", 0) == 0 || name == "latest" || name == "metrics.jsonl" || name == "run.json" ||
          name == "tokenizer")
        fs::remove_all(entry.path());
    }
  }
  if (opt.resume) return;
  fs::create_directories(out / "tokenizer");
  fs::copy_file(data / "meta.json", out / "tokenizer" / "meta.json", fs::copy_options::overwrite_existing);
  for (const char* field : {"model", "chat_template"})  // the files meta.json names (Tokenizer::files)
    if (tok.contains(field))
      fs::copy_file(data / tok.at(field).get<std::string>(), out / "tokenizer" / tok.at(field).get<std::string>(),
                    fs::copy_options::overwrite_existing);
}

/// One `fbt train` run, in the order it happens: setup (rendezvous, configuration, data, checks
/// of the run directory, model and optimiser, resume; only then the run directory and its
/// record are written, so a run that cannot start leaves nothing behind), then per step
/// `train_step`, `record_step`, `validate` and `save_checkpoint`, then `print_summary`.
class TrainingRun {
 public:
  TrainingRun(const TrainOptions& opt, std::ostream& rank0_log);
  TrainResult run();

 private:
  void load_config();
  void open_data();
  void check_run_dir() const;
  void log_header();
  void build_model();
  void resume_from_checkpoint();
  void write_run_record();
  void start_gradient_sync();
  StepOutcome train_step();
  void record_step(const StepOutcome& s);
  void validate();
  void report_validation(double standard, double fused1, double standard_bpb, double fused1_bpb);
  void save_checkpoint();
  void check_weights_finite() const;
  std::string latest_note() const;
  void print_summary();
  double wall_s() const {
    return wall_s_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  }

  const TrainOptions& opt_;
  const std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();
  const fs::path out_, data_;
  DistributedEnv env_;
  bool rank0_ = true;
  std::ostream null_log_{nullptr};  // ranks > 0 print nothing
  std::ostream& log_;
  torch::Device device_;
  std::unique_ptr<Communicator> comm_;
  RunConfig rc_;
  nlohmann::json stored_;  // RUNDIR/run.json on --resume
  std::string init_file_;  // the --init-from model file ("" without a warm start)
  CheckpointInfo init_info_;
  nlohmann::json tok_;                           // the dataset's tokenizer description (meta.json)
  int64_t T_ = 0, accum_ = 1, local_accum_ = 1;  // sequence length; micro-batches per step, all / this rank
  std::optional<TokenShard> train_shard_, val_shard_;
  nlohmann::json run_record_;  // run.json: the record plus, after every checkpoint, the progress
  FBT model_{nullptr};
  std::unique_ptr<TrainingOptimizer> optimizer_;
  std::unique_ptr<TrainBatches> loader_;
  std::optional<SftData> sft_train_, sft_val_;  // a conversation dataset (SFT), else unset
  std::mt19937_64 pass_rng_;
  at::Generator generator_;      // jitter, mixin (per rank)
  TrainerState st_;              // counters (the RNG, generator and loader fields are filled when saving)
  double wall_s_before_ = 0;     // wall-clock seconds of the processes before this resume
  int64_t stored_steps_ = 0;     // train.steps of run.json on --resume (a new --steps total updates it)
  std::string last_checkpoint_;  // the step directory `latest` names, "" before the first
  TrainResult result_;
  std::ofstream metrics_;  // stays closed on ranks > 0: their writes are dropped
  bool tty_ = false;
  SlowdownWatch slowdown_;  // the busy-machine note of the progress line
  std::vector<torch::Tensor> params_;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::chrono::steady_clock::time_point t0_;
  int64_t first_step_ = 0;
};

// ---- setup: data parallelism first (rendezvous), so a rank that fails below ends the others' waits
TrainingRun::TrainingRun(const TrainOptions& opt, std::ostream& rank0_log)
    : opt_(opt),
      out_(opt.out_dir),
      data_(opt.data_dir),
      env_(distributed_env_from_environment()),
      rank0_(env_.rank == 0),
      log_(rank0_ ? rank0_log : null_log_),
      device_(opt.device) {
  if (opt.out_dir.empty()) throw Error("--out is required");
  if (opt.resume && opt.force) throw Error("--resume and --force exclude each other");
  if (opt.resume && !opt.init_from.empty())
    throw Error("--init-from starts a new run from a checkpoint and --resume continues the run in --out; give one");
  if (opt.dist.normuon != "replicate" && opt.dist.normuon != "shard")
    throw Error("--normuon-orthogonalize " + opt.dist.normuon + ": expected replicate or shard");
  if (env_.active() && device_.is_cuda() && !device_.has_index())
    device_ = torch::Device(torch::kCUDA, env_.local_rank);
  if (env_.active()) comm_ = std::make_unique<Communicator>(env_, opt.dist, device_);
  load_config();
  open_data();
  if (rank0_) check_run_dir();
  log_header();
  build_model();
  if (opt_.resume) resume_from_checkpoint();
  if (rank0_) {
    prepare_run_dir(opt_, tok_, log_);
    write_run_record();
  }
  start_gradient_sync();
}

// ---- configuration: preset/file + --set, or the stored one on --resume
void TrainingRun::load_config() {
  if (opt_.resume) {
    const auto run_json = out_ / "run.json";
    if (!fs::is_regular_file(run_json))
      throw Error("--resume: " + opt_.out_dir + " holds no run to resume (no run.json)");
    try {
      std::ifstream f(run_json);
      stored_ = nlohmann::json::parse(f);
      rc_.model = ModelConfig::from_json(stored_.at("config").at("model"), run_json.string() + ": model");
      fields_from_json(stored_.at("config").at("train"), run_json.string() + ": train", rc_.train);
    } catch (const nlohmann::json::exception& e) {  // truncated, not JSON, or without the config
      throw Error("--resume: " + run_json.string() + ": " + json_error_brief(e));
    }
    if (!opt_.sets.empty() || !opt_.config.empty())
      throw Error("--resume continues the stored config (run.json); --config and --set are not allowed");
  } else if (!opt_.init_from.empty()) {  // warm start: the checkpoint's model, warm-start settings
    if (!opt_.config.empty())
      throw Error(
          "--init-from takes the model config from the checkpoint and TrainConfig::warm_start's training "
          "settings; --config is not allowed with it (change settings with --set)");
    init_file_ = resolve_checkpoint(opt_.init_from);
    init_info_ = read_checkpoint_info(init_file_);
    rc_.model = init_info_.config;
    rc_.train = is_conversation_dataset(read_dataset_meta(opt_.data_dir)) ? TrainConfig::sft(rc_.model.context)
                                                                          : TrainConfig::warm_start(rc_.model.context);
    for (const auto& s : opt_.sets) rc_.set(s);
  } else {
    rc_ = RunConfig::load(opt_.config.empty() ? "small" : opt_.config);
    for (const auto& s : opt_.sets) rc_.set(s);
  }
  if (opt_.steps > 0) rc_.train.steps = opt_.steps;
  rc_.train.validate();
  if (opt_.resume)
    stored_steps_ = required_field<int64_t>(stored_.at("config").at("train"), "steps",
                                            (out_ / "run.json").string() + ": config.train");
}

// ---- data: vocabulary and document separator come from the dataset
void TrainingRun::open_data() {
  const auto meta = read_dataset_meta(opt_.data_dir);
  tok_ = meta.at("tokenizer");
  if (opt_.resume) check_run_tokenizer(opt_, tok_);
  if (!init_file_.empty()) check_init_tokenizer(opt_, tok_, init_info_, init_file_);
  tokenizer_ = Tokenizer::load(opt_.data_dir);
  const int64_t vocab = tok_.at("vocab_size").get<int64_t>();
  if (rc_.model.vocab_size != vocab) {
    if (opt_.resume || !init_file_.empty())
      throw Error("--data " + opt_.data_dir + ": vocabulary " + std::to_string(vocab) + " differs from the " +
                  (opt_.resume ? "run's " : "--init-from checkpoint's ") + std::to_string(rc_.model.vocab_size));
    log_ << "note: model.vocab_size set to " << vocab << " from " << (data_ / "meta.json").string() << "\n";
    rc_.model.vocab_size = vocab;
  }
  rc_.model.doc_separator_id = tok_.at("eos_id").get<int64_t>();
  rc_.model.validate();
  T_ = rc_.train.seq_len > 0 ? rc_.train.seq_len : rc_.model.context;
  if (T_ > rc_.model.context)
    throw Error("train.seq_len " + std::to_string(T_) + " exceeds model.context " + std::to_string(rc_.model.context));
  if (device_.is_cpu())  // an overcommitted CPU allocation gets the process killed, not an error
    check_training_memory(rc_, T_, int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)));
  // Without train.batch_tokens every rank takes one micro-batch: the global batch is WORLD_SIZE x
  // batch_size sequences. With it, the ranks share its micro-batches.
  accum_ = rc_.train.accumulation(T_, env_.world_size);
  if (accum_ % env_.world_size != 0)
    throw Error("WORLD_SIZE " + std::to_string(env_.world_size) + " does not divide the " + std::to_string(accum_) +
                " micro-batches of a step (train.batch_tokens / (train.batch_size x seq_len)); " +
                (opt_.resume ? std::string("resume with the run's number of processes")
                             : "set train.batch_tokens to a multiple of WORLD_SIZE x batch_size x seq_len = " +
                                   std::to_string(env_.world_size * rc_.train.batch_size * T_)));
  local_accum_ = accum_ / env_.world_size;  // this rank's share, micro-batches [rank·local, ...)
  if (opt_.resume) {                        // the same global batch as the run's first launch (run.json records it)
    const int64_t tokens = accum_ * rc_.train.batch_size * T_;
    const auto run_json = (out_ / "run.json").string();
    const auto stored_world =
        stored_.contains("world_size") ? required_field<int64_t>(stored_, "world_size", run_json) : 1;
    const auto stored_tokens =
        stored_.contains("global_batch")
            ? required_field<int64_t>(stored_.at("global_batch"), "tokens", run_json + ": global_batch")
            : rc_.train.accumulation(T_, stored_world) * rc_.train.batch_size * T_;
    if (tokens != stored_tokens)
      throw Error("--resume: the run in " + opt_.out_dir + " was trained with a global batch of " +
                  std::to_string(stored_tokens) + " tokens per step by " + std::to_string(stored_world) +
                  " process(es), but WORLD_SIZE " + std::to_string(env_.world_size) + " gives " +
                  std::to_string(tokens) + "; resume with the run's number of processes");
  }
  train_shard_ = open_split(opt_.data_dir, "train", opt_.verify_data);
  val_shard_ = open_split(opt_.data_dir, "val", opt_.verify_data);
  if (is_conversation_dataset(meta)) {  // SFT: whole conversations of up to T_ + 1 tokens per row
    sft_train_ = SftData::open(opt_.data_dir, "train");
    sft_val_ = SftData::open(opt_.data_dir, "val");
    return;
  }
  for (const auto* shard : {&*train_shard_, &*val_shard_})  // before step 1, not at the first validation
    if (shard->size() < T_ + 1)
      throw Error("--data " + opt_.data_dir + ": " + shard->path() + " holds " + std::to_string(shard->size()) +
                  " tokens, fewer than one window of seq_len + 1 = " + std::to_string(T_ + 1) +
                  "; lower train.seq_len (or model.context), or prepare more text or a larger --val-fraction");
  if (rc_.train.eval_tokens < T_)
    throw Error("train.eval_tokens " + std::to_string(rc_.train.eval_tokens) +
                " is less than one validation window of seq_len = " + std::to_string(T_) + " tokens");
}

// ---- the run directory: checked before anything is built or written (rank 0)
void TrainingRun::check_run_dir() const {
  check_out_dir(out_);
  if (!opt_.resume && !opt_.force && fs::exists(out_ / "run.json") && has_checkpoints(out_))
    throw Error("--out " + opt_.out_dir +
                " already holds a run (run.json); use --resume to continue it or --force to replace it");
}

// ---- the log's header: provenance, resolved config, batch, notes on the schedule
void TrainingRun::log_header() {
  const auto& tc = rc_.train;
  log_ << "fbt train  git " << git_sha() << "  libtorch " << torch_version() << "  device " << opt_.device
       << "  threads " << torch::get_num_threads() << "\n"
       << rc_.to_json().dump(2) << "\n"
       << "parameters: " << rc_.model.parameter_count() << "  global batch: " << accum_ * tc.batch_size
       << " sequences x " << T_ << " = " << accum_ * tc.batch_size * T_ << " tokens/step (" << accum_ << " micro-batch"
       << (accum_ > 1 ? "es" : "") << " of " << tc.batch_size << " x " << T_
       << (env_.world_size > 1
               ? ", " + std::to_string(local_accum_) + " per rank on " + std::to_string(env_.world_size) + " processes"
               : std::string())
       << (tc.batch_tokens == 0 && env_.world_size > 1
               ? "; train.batch_tokens unset: one micro-batch of train.batch_size per process"
               : "")
       << ")  expected passes/step: " << tc.pass_schedule.expected_passes() << "\n";
  if (sft_train_)
    log_ << "conversations (SFT): " << sft_train_->size() << " train / " << sft_val_->size()
         << " val; a row is one conversation, at most " << T_ + 1 << " tokens (" << sft_train_->longer_than(T_ + 1)
         << " train conversations are cut to that), padded; the loss is the mean over the step's assistant tokens\n";
  if (tc.warmup_steps >= tc.steps || (tc.warmup_steps > 0 && tc.in_cooldown(tc.warmup_steps - 1)))
    log_ << "note: the warmup of train.warmup_steps = " << tc.warmup_steps
         << (tc.warmup_steps >= tc.steps ? " outlasts the run" : " runs into the cooldown")
         << ", so the peak lr is never reached (lower it for short runs)\n";
  if (comm_)
    log_ << "data parallel: " << env_.world_size << " processes (c10d " << comm_->backend_name() << ", MASTER "
         << env_.master_addr << ":" << env_.master_port << "), " << local_accum_ << " micro-batch"
         << (local_accum_ > 1 ? "es" : "") << " per rank per step, NorMuon orthogonalisation: " << opt_.dist.normuon
         << ", timeout " << opt_.dist.timeout_s << " s\n";
}

// ---- run record (rank 0 alone writes it, once the run can start): run.json, or on --resume
// the stored one, updated when a new --steps total changes the schedules
void TrainingRun::write_run_record() {
  if (!opt_.resume) {
    run_record_ = {{"config", rc_.to_json()},
                   {"data", fs::absolute(data_).string()},
                   {"git_sha", git_sha()},
                   {"torch_version", torch_version()},
                   {"device", opt_.device},
                   {"threads", torch::get_num_threads()},
                   {"world_size", env_.world_size},
                   {"global_batch",
                    {{"sequences", accum_ * rc_.train.batch_size},
                     {"tokens", accum_ * rc_.train.batch_size * T_},
                     {"micro_batches", accum_},
                     {"micro_batches_per_rank", local_accum_}}},
                   {"parameters", rc_.model.parameter_count()}};
    if (!init_file_.empty())
      run_record_["init_from"] = {{"checkpoint", fs::absolute(init_file_).lexically_normal().string()},
                                  {"step", init_info_.step},
                                  {"git_sha", init_info_.git_sha},
                                  {"model_config", init_info_.config.to_json()}};
    write_file_atomic((out_ / "run.json").string(), run_record_.dump(2) + "\n");
    return;
  }
  run_record_ = stored_;
  if (rc_.train.steps == stored_steps_) return;
  run_record_["config"]["train"]["steps"] = rc_.train.steps;
  run_record_["resumes"].push_back({{"at_step", st_.step},
                                    {"steps_before", stored_steps_},
                                    {"steps_after", rc_.train.steps},
                                    {"git_sha", git_sha()}});
  write_file_atomic((out_ / "run.json").string(), run_record_.dump(2) + "\n");
}

// ---- model, optimiser, RNGs, loader
void TrainingRun::build_model() {
  const auto& tc = rc_.train;
  torch::manual_seed(tc.seed);
  model_ = FBT(rc_.model);
  if (!init_file_.empty()) {  // warm start: every weight from the checkpoint, the optimiser fresh
    assign_tensors(load_tensors(init_file_), model_, init_file_);
    log_ << "initialised from " << init_file_ << " (step " << init_info_.step
         << "): its weights (fusion included), a fresh optimiser state\n";
    if (rc_.model.fusion == Fusion::Residual && init_info_.config.fusion != Fusion::Residual) {
      // --set model.fusion=residual over another fusion: the checkpoint's W_U means
      // something else there; W_U = 0 makes every mode start as the checkpoint's standard mode.
      torch::NoGradGuard no_grad;
      model_->named_parameters()["fusion.w_u.weight"].zero_();
      log_ << "model.fusion residual over the checkpoint's " << enum_to_string(init_info_.config.fusion)
           << " fusion: W_U set to 0 (every decoding mode starts as the checkpoint's standard mode)\n";
    }
  }
  model_->to(device_);
  model_->train();
  optimizer_ = std::make_unique<TrainingOptimizer>(model_, tc);
  log_ << optimizer_->describe()
       << "precision: " << (uses_bf16_autocast(tc.precision, device_) ? "bf16 autocast" : "fp32")
       << " (weights, optimiser state and loss fp32)\n";
  if (sft_train_)
    loader_ = std::make_unique<SftLoader>(*sft_train_, tc.batch_size, T_, tokenizer_->pad_id(), tc.seed);
  else
    loader_ = std::make_unique<BatchLoader>(*train_shard_, tc.batch_size, T_, tc.seed);
  pass_rng_.seed(tc.seed ^ 0x9E3779B97F4A7C15ULL);
  generator_ = at::make_generator<at::CPUGeneratorImpl>(tc.seed + 1 + env_.rank);
}

// ---- resume: weights, optimiser, counters, RNGs and loader from the newest intact checkpoint
void TrainingRun::resume_from_checkpoint() {
  const auto& tc = rc_.train;
  const auto c = read_resume_checkpoint(opt_.out_dir, rank0_ ? std::cerr : null_log_);
  const fs::path dir(c.dir);
  const auto trainer_json = (dir / "trainer.json").string();
  if (c.trainer.world_size != env_.world_size)
    throw Error("--resume: " + dir.string() + " was written by a run of " + std::to_string(c.trainer.world_size) +
                " process(es) but WORLD_SIZE is " + std::to_string(env_.world_size) +
                "; resume with the same number of processes");
  assign_weights(c.model, c.info, model_, (dir / "model.safetensors").string());
  optimizer_->load_state(c.optimizer.tensors, (dir / "optimizer.safetensors").string());
  st_ = c.trainer;
  wall_s_before_ = c.trainer.wall_s;
  std::istringstream(c.trainer.pass_rng) >> pass_rng_;
  try {
    generator_.set_state(generator_state_from_hex(c.trainer.torch_generators.at(env_.rank), trainer_json));
    loader_->set_state(c.trainer.loader);
  } catch (const c10::Error& e) {
    throw Error(trainer_json +
                ": generator state does not fit this build's CPU generator: " + e.what_without_backtrace());
  } catch (const Error& e) {
    throw Error(trainer_json + ": " + e.what());
  }
  last_checkpoint_ = dir.filename().string();
  if (tc.steps <= st_.step)
    throw Error("--steps " + std::to_string(tc.steps) + ": the run in " + opt_.out_dir + " is already at step " +
                std::to_string(st_.step) + "; give a larger total to continue it");
  log_ << "resumed from " << dir.string() << " at step " << st_.step << "\n";
  // A new --steps total changes the schedules (warmup/cooldown, pass phases are fractions of
  // it): say so; write_run_record records it in run.json so the run stays described by its record.
  if (tc.steps != stored_steps_)
    log_ << "note: train.steps changed from " << stored_steps_ << " to " << tc.steps
         << "; the lr and pass schedules now span " << tc.steps << " steps (run.json updated)\n";
}

// ---- gradient all-reduce (data parallel) and the loop's bookkeeping
void TrainingRun::start_gradient_sync() {
  const auto& tc = rc_.train;
  if (rank0_) {
    const auto metrics = (out_ / "metrics.jsonl").string();
    if (opt_.resume)
      if (const auto dropped = truncate_metrics(metrics, st_.step))
        log_ << "note: dropped " << dropped << " line(s) of " << metrics << " after step " << st_.step
             << " (the steps this resume repeats)\n";
    metrics_.open(metrics, std::ios::app);
  }
  tty_ = isatty(STDOUT_FILENO) && &log_ == &std::cout;
  params_ = model_->parameters();
  if (comm_) {
    comm_->broadcast(params_, 0);  // identical seeds already agree; this makes it a guarantee
    // Activation checkpointing accumulates a parameter once per pass: no hook-launched buckets.
    sync_ = std::make_unique<GradientSync>(*comm_, params_, int64_t(opt_.dist.bucket_mb * (1 << 20)),
                                           /*overlap=*/!tc.activation_checkpointing);
    if (opt_.dist.normuon == "shard")
      optimizer_->set_orthogonalizer([this](const std::vector<torch::Tensor>& U, int64_t ns_steps) {
        return orthogonalize_sharded(*comm_, U, ns_steps);
      });
    log_ << "gradient all-reduce: " << sync_->bucket_count() << " bucket(s) of <= " << opt_.dist.bucket_mb << " MiB"
         << (tc.activation_checkpointing ? ", after backward (activation checkpointing)" : ", overlapping backward")
         << "\n";
  }
}

// ---- the step: K-pass forward and backward over this rank's micro-batches, sync, update
StepOutcome TrainingRun::train_step() {
  const auto& tc = rc_.train;
  const auto step_start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  StepOutcome s;
  s.passes = tc.pass_schedule.draw(st_.step, tc.steps, pass_rng_);
  s.lr_factor = tc.lr_factor(st_.step);
  s.cooldown = tc.in_cooldown(st_.step);
  s.wd_factor = s.cooldown && tc.adamc ? s.lr_factor : 1.0;  // AdamC
  const int64_t K = s.passes;

  PassOptions po = training_pass_options(tc, K, s.cooldown);
  po.generator = generator_;
  s.z_loss_on = po.z_loss > 0;
  // Gradient accumulation: the same K for every micro-batch. The step's loss is the mean over all
  // its scored targets, so micro-batch m (a mean over its n_m) contributes loss_m / (N / n_m), N =
  // Σ n_m over the step: for windows, loss / accum exactly. Micro-batch m belongs to rank m /
  // local_accum; the others' are skipped but counted. Losses are summed on the device and read
  // once per step (one host sync): [total, z-loss, pass 1..K], each already weighted. A
  // non-finite loss still runs backward; the step is then skipped and its gradients dropped below.
  std::vector<MicroBatch> mine;
  for (int64_t m = 0; m < accum_; ++m) {
    const bool own = m / local_accum_ == env_.rank;
    const MicroBatch mb = own ? loader_->next_batch() : loader_->skip_batch();
    s.tokens += mb.tokens;
    s.scored += mb.scored;
    if (own) mine.push_back(mb);
  }
  torch::Tensor sums = torch::zeros({2 + K}, torch::dtype(torch::kDouble).device(device_));
  for (size_t i = 0; i < mine.size(); ++i) {
    if (sync_ && i + 1 == mine.size()) sync_->arm();  // the last: buckets go out in backward
    if (mine[i].scored == 0) {                        // conversations cut before their answers: nothing to learn
      if (sync_ && i + 1 == mine.size()) {            // but the gradient buckets go out in this backward
        PassOptions logits_only = po;
        logits_only.keep_logits = true;
        AutocastScope amp(tc.precision, device_);
        (forward_passes(model_, mine[i].inputs.to(device_), {}, logits_only).logits.back().sum() * 0.0).backward();
      }
      continue;
    }
    const double share = double(s.scored) / double(mine[i].scored);
    PassOutput out_pass;
    {
      AutocastScope amp(tc.precision, device_);
      out_pass = forward_passes(model_, mine[i].inputs.to(device_), mine[i].targets.to(device_), po);
    }
    (out_pass.loss / share).backward();
    auto z = po.z_loss > 0 ? torch::stack(out_pass.z_losses).mean() : torch::zeros_like(out_pass.loss);
    std::vector<torch::Tensor> parts{out_pass.loss, z};
    parts.insert(parts.end(), out_pass.losses.begin(), out_pass.losses.end());
    sums += torch::stack(parts).detach().to(torch::kDouble) / share;
  }
  const auto host = sums.cpu();
  const double* h = host.data_ptr<double>();
  s.loss = h[0];
  s.z_loss = h[1];
  s.per_pass.assign(h + 2, h + 2 + K);
  s.stop = g_stop_signal;
  if (comm_) {  // sum gradients, losses and the stop flag (every rank stops after the same step)
    s.comm_s = sync_->finish();
    const auto comm_start = std::chrono::steady_clock::now();
    std::vector<double> stats{s.loss, s.z_loss, double(s.stop)};
    stats.insert(stats.end(), s.per_pass.begin(), s.per_pass.end());
    stats = comm_->allreduce_sum(stats);
    s.loss = stats[0];
    s.z_loss = stats[1];
    s.stop = stats[2] > 0 ? (g_stop_signal ? g_stop_signal.load() : SIGTERM) : 0;
    std::copy(stats.begin() + 3, stats.end(), s.per_pass.begin());
    s.comm_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - comm_start).count();
  }
  s.ok = std::isfinite(s.loss);
  if (s.ok) {
    s.grad_norm = torch::nn::utils::clip_grad_norm_(params_, tc.grad_clip > 0 ? tc.grad_clip : INFINITY);
    s.ok = std::isfinite(s.grad_norm);
    if (s.ok) optimizer_->step(s.lr_factor, s.wd_factor);
  }
  // Drop gradients (set to none): parameters unused by a step (the fusion when K = 1) then
  // get no AdamW update, the same whether or not earlier steps in this process used them,
  // which keeps a resumed run identical to an uninterrupted one.
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
  ++st_.step;
  s.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  s.cpu_s = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  return s;
}

// ---- the step's record: counters, metrics.jsonl line, progress line; stops after max_bad_steps
void TrainingRun::record_step(const StepOutcome& s) {
  const auto& tc = rc_.train;
  const int64_t K = s.passes;
  result_.losses.push_back(s.ok ? s.loss : std::nan(""));
  nlohmann::json line{{"step", st_.step},        {"passes", K},
                      {"lr_scale", s.lr_factor}, {"lr", tc.lr * s.lr_factor},
                      {"wd_scale", s.wd_factor}, {"cooldown", s.cooldown}};
  if (tc.optimizer == OptimizerKind::NorMuon) line["normuon_lr"] = tc.normuon_lr * s.lr_factor;
  if (!s.ok) {
    ++st_.consecutive_bad;
    const std::string what = std::isfinite(s.loss) ? "gradient" : "loss";
    line["skipped"] = "non-finite " + what;
    metrics_ << line.dump() << "\n" << std::flush;
    log_ << "step " << st_.step << ": non-finite " << what << ", update skipped (" << st_.consecutive_bad
         << " in a row)\n";
    if (st_.consecutive_bad >= tc.max_bad_steps)  // no checkpoint of the state that led to them
      throw Error("stopping: " + std::to_string(st_.consecutive_bad) +
                  " consecutive non-finite steps (train.max_bad_steps); " + latest_note() +
                  "; lower train.lr or check the data");
    return;
  }
  st_.consecutive_bad = 0;
  const int64_t n = s.tokens;
  st_.tokens += n;
  st_.token_equivalent += n * K;
  ++st_.pass_counts[K];
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  line.update({{"tokens", st_.tokens},
               {"token_equivalent", st_.token_equivalent},
               {"token_equivalent_ratio", double(st_.token_equivalent) / double(st_.tokens)},
               {"pass_fractions", pass_fractions(st_.pass_counts)},
               {"losses", s.per_pass},
               {"loss", s.loss},
               {"grad_norm", s.grad_norm},
               {"tokens_per_s", n / s.step_s},
               {"elapsed_s", elapsed}});
  if (s.z_loss_on) line["z_loss"] = s.z_loss;
  if (comm_) line["comm_s"] = s.comm_s;  // gradient/loss all-reduce time not hidden by backward
  metrics_ << line.dump() << "\n" << std::flush;
  const double eta = elapsed / double(st_.step - first_step_) * double(tc.steps - st_.step);
  // Nats per token of pass 1 (the standard forward, the number a validation loss is compared
  // with); when K > 1 or with z-loss also the objective the step minimised, L1 + λ·mean(L2..LK)
  // (+ z-loss) (SPEC §5).
  std::ostringstream loss_text;
  loss_text << std::fixed << std::setprecision(4) << s.per_pass[0];
  if (K > 1 || s.z_loss_on) loss_text << " (" << (K > 1 ? "pass 1; " : "") << "objective " << s.loss << ")";
  const int threads = at::get_num_threads();
  const std::string slow = slowdown_.update(double(n * K) / s.step_s, s.cpu_s / (s.step_s * threads), threads);
  const std::string slow_note = slow.empty() ? "" : "  [" + slow + "]";
  if (tty_) {  // one line rewritten in place; ESC[K clears what a longer line left
    const int width = 30, filled = int(width * st_.step / tc.steps);
    log_ << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << st_.step << "/" << tc.steps
         << "  loss " << loss_text.str() << "  K=" << K << "  " << std::fixed << std::setprecision(0) << n / s.step_s
         << " tok/s  ETA " << format_duration(eta) << slow_note << "\033[K" << std::defaultfloat << std::flush;
  } else if (st_.step % tc.log_every == 0 || st_.step == tc.steps) {
    log_ << "step " << st_.step << "/" << tc.steps << "  loss " << loss_text.str() << "  K=" << K << "  lr x"
         << std::fixed << std::setprecision(3) << s.lr_factor << "  grad_norm " << std::setprecision(3) << s.grad_norm
         << "  " << std::setprecision(0) << n / s.step_s << " tok/s  elapsed " << format_duration(elapsed) << "  ETA "
         << format_duration(eta) << slow_note << "\n"
         << std::defaultfloat << std::flush;
  }
}

// ---- validation: standard and fused(1) loss on the val split (rank 0)
void TrainingRun::validate() {
  if (sft_val_) {
    const auto nats = evaluate_conversation_loss(model_, *sft_val_, rc_.train.batch_size, T_, tokenizer_->pad_id(), 1,
                                                 rc_.train.eval_tokens);
    report_validation(nats[0], nats[1], std::nan(""), std::nan(""));
    return;
  }
  LossEvalOptions eo;
  eo.max_tokens = rc_.train.eval_tokens;
  eo.passes = 1;
  eo.batch = rc_.train.batch_size;
  const auto r = evaluate_loss(model_, *val_shard_, *tokenizer_, eo);  // [passes=0, passes=1]
  report_validation(r[0].nats_per_token, r[1].nats_per_token, r[0].bits_per_byte, r[1].bits_per_byte);
}

// ---- a validation's record: metrics.jsonl line and log line (bits per byte NaN: not measured)
void TrainingRun::report_validation(double standard, double fused1, double standard_bpb, double fused1_bpb) {
  result_.val_standard = standard;
  result_.val_fused1 = fused1;
  result_.validated = true;
  const bool bpb = !std::isnan(standard_bpb);
  auto mode = [&](double loss, double bits) {
    return bpb ? nlohmann::json{{"loss", loss}, {"bpb", bits}} : nlohmann::json{{"loss", loss}};
  };
  metrics_ << nlohmann::json{{"step", st_.step},
                             {"val",
                              {{"standard", mode(standard, standard_bpb)}, {"fused1", mode(fused1, fused1_bpb)}}}}
                  .dump()
           << "\n"
           << std::flush;
  log_ << (tty_ ? "\n" : "") << "step " << st_.step << "  val standard " << std::fixed << std::setprecision(4)
       << standard << "  fused(1) " << fused1 << (sft_val_ ? " nats/assistant token" : " nats/token");
  if (bpb) log_ << "  (" << standard_bpb << " / " << fused1_bpb << " bits/byte)";
  log_ << "\n" << std::defaultfloat;
}

// ---- checkpointing: every rank holds the same weights, optimiser state and loader state; only
// the jitter/mixin generators differ, so rank 0 collects theirs and writes the checkpoint alone.
// The step directory is written as step-N.tmp and renamed; `latest` moves only then.
void TrainingRun::save_checkpoint() {
  check_weights_finite();
  const auto own_generator = generator_state_to_hex(generator_.get_state());
  const auto generators = comm_ ? comm_->gather_strings("generators/" + std::to_string(st_.step), own_generator)
                                : std::vector<std::string>{own_generator};
  if (!rank0_) return;
  const auto name = step_dir_name(st_.step);
  const auto tmp = out_ / (name + ".tmp"), final_dir = out_ / name;
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  save_model((tmp / "model.safetensors").string(), model_, tok_, st_.step);
  save_tensors((tmp / "optimizer.safetensors").string(), optimizer_->state(), {{"step", st_.step}});
  TrainerState t = st_;
  std::ostringstream rng;
  rng << pass_rng_;
  t.pass_rng = rng.str();
  t.torch_generators = generators;
  t.loader = loader_->state();
  t.world_size = env_.world_size;
  t.wall_s = wall_s();
  write_file_atomic((tmp / "trainer.json").string(), t.to_json().dump(2) + "\n");
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  write_latest(opt_.out_dir, name);
  last_checkpoint_ = name;
  run_record_["progress"] = {
      {"step", st_.step},
      {"steps", rc_.train.steps},
      {"tokens", st_.tokens},
      {"token_equivalent", st_.token_equivalent},
      {"token_equivalent_ratio", double(st_.token_equivalent) / double(std::max<int64_t>(1, st_.tokens))},
      {"pass_fractions", pass_fractions(st_.pass_counts)},
      {"wall_s", wall_s()}};
  if (result_.validated)
    run_record_["progress"]["val"] = {{"standard", result_.val_standard}, {"fused1", result_.val_fused1}};
  write_file_atomic((out_ / "run.json").string(), run_record_.dump(2) + "\n");
}

/// Throws fbt::Error naming the first parameter with a NaN or infinity: such weights are never
/// checkpointed (every rank holds the same weights, so every rank throws).
void TrainingRun::check_weights_finite() const {
  torch::NoGradGuard no_grad;
  for (const auto& p : model_->named_parameters())
    if (!torch::isfinite(p.value()).all().item<bool>())
      throw Error("step " + std::to_string(st_.step) + ": parameter " + p.key() +
                  " holds non-finite values; not checkpointing it (" + latest_note() + "); lower train.lr");
}

/// "latest names step-N (the newest checkpoint)" or "no checkpoint was written", for errors.
std::string TrainingRun::latest_note() const {
  return last_checkpoint_.empty() ? "no checkpoint was written"
                                  : (out_ / "latest").string() + " still names " + last_checkpoint_;
}

// ---- the run's summary: tokens, token-equivalent compute, realised pass fractions, peak memory
void TrainingRun::print_summary() {
  std::ostringstream fractions;
  const auto realised = pass_fractions(st_.pass_counts);
  for (const auto& [k, f] : realised.items())
    fractions << "K=" << k << " " << std::fixed << std::setprecision(3) << f.get<double>() << "  ";
  log_ << "done: " << st_.step << " steps, " << st_.tokens << " tokens, token-equivalent compute "
       << st_.token_equivalent << " (" << std::fixed << std::setprecision(3)
       << double(st_.token_equivalent) / std::max<int64_t>(1, st_.tokens)
       << "x; the paper's 75/22/3% schedule: 1.28x)\n"
       << "realised pass fractions: " << fractions.str() << "(paper: K=1 0.75  K=2 0.22  K=3 0.03)\n"
       << "peak RSS: " << std::setprecision(2) << double(peak_memory_bytes(torch::kCPU)) / 1e9 << " GB\n"
       << std::defaultfloat;
}

// ---- the loop
TrainResult TrainingRun::run() {
  const auto& tc = rc_.train;
  StopSignals signals;
  t0_ = std::chrono::steady_clock::now();
  first_step_ = st_.step;
  while (st_.step < tc.steps) {
    const auto s = train_step();
    record_step(s);
    const bool last = st_.step == tc.steps;
    if (((tc.eval_every > 0 && st_.step % tc.eval_every == 0) || last) && rank0_) validate();
    if ((tc.checkpoint_every > 0 && st_.step % tc.checkpoint_every == 0) || last || s.stop) {
      // A state reached through non-finite steps never becomes `latest` (train.max_bad_steps).
      if (st_.consecutive_bad > 0 && last)
        throw Error("the run ended after " + std::to_string(st_.consecutive_bad) +
                    " consecutive non-finite step(s), so its final state is not checkpointed; " + latest_note() +
                    "; lower train.lr or check the data");
      if (st_.consecutive_bad > 0)
        log_ << "note: step " << st_.step << " follows " << st_.consecutive_bad
             << " non-finite step(s): not checkpointed; " << latest_note() << "\n";
      else
        save_checkpoint();
    }
    if (s.stop && !last) {
      log_ << (tty_ ? "\n" : "") << "interrupted: "
           << (last_checkpoint_ == step_dir_name(st_.step)
                   ? "checkpoint written at step " + std::to_string(st_.step) + " (" +
                         (out_ / last_checkpoint_).string() + ")"
                   : "at step " + std::to_string(st_.step) + ", " + latest_note())
           << "; continue with --resume\n";
      result_.stop_signal = s.stop;
      break;
    }
  }
  if (tty_) log_ << "\n";
  if (comm_) comm_->barrier();  // leave together: rank 0 may still be validating or writing
  result_.last_step = st_.step;
  print_summary();
  return result_;
}

}  // namespace

TrainResult run_training(const TrainOptions& opt, std::ostream& rank0_log) { return TrainingRun(opt, rank0_log).run(); }

PassOptions training_pass_options(const TrainConfig& tc, int64_t passes, bool cooldown) {
  PassOptions po;
  po.passes = passes;
  po.jitter = tc.jitter;
  po.mixin_prob = tc.mixin_prob;
  po.mixin_per_sequence = tc.mixin_draw == MixinDraw::PerSequence;
  po.detach = tc.detach;
  po.checkpoint = tc.activation_checkpointing;
  po.later_weight = tc.later_weight;
  po.z_loss = cooldown ? tc.z_loss : 0.0;
  return po;
}

}  // namespace fbt
