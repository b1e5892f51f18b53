// The training loop of `fbt train`: K-pass steps, metrics, validation, checkpoints, resume.
#include "fbt/train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
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

#include "fbt/data/shards.h"
#include "fbt/data/tokenizer.h"
#include "fbt/dist/gradient_sync.h"
#include "fbt/eval/loss.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/run_dir.h"
#include "fbt/model/precision.h"
#include "fbt/train/optimizer.h"
#include "fbt/train/passes.h"
#include "fbt/train/train_config.h"
#include "fbt/util/build_info.h"
#include "fbt/util/error.h"
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

std::string hex_encode(const torch::Tensor& bytes) {  // uint8 [N] -> hex
  auto t = bytes.contiguous();
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const auto b = t.data_ptr<uint8_t>()[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

torch::Tensor hex_decode(const std::string& s) {
  auto t = torch::empty({int64_t(s.size() / 2)}, torch::kUInt8);
  for (size_t i = 0; i < s.size() / 2; ++i) t.data_ptr<uint8_t>()[i] = std::stoi(s.substr(2 * i, 2), nullptr, 16);
  return t;
}

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

struct RunState {
  int64_t step = 0;            // steps completed
  int64_t tokens = 0;          // training tokens seen
  int64_t token_equivalent = 0;  // Σ tokens × passes
  int64_t consecutive_bad = 0;
  std::map<int64_t, int64_t> pass_counts;
  double wall_s_before = 0;  // wall-clock seconds of the processes before this resume
};

/// What one optimiser step produced (summed over micro-batches and ranks).
struct StepOutcome {
  int64_t passes = 1;            // K
  double lr_factor = 1, wd_factor = 1;
  bool cooldown = false, z_loss_on = false;
  double loss = 0, z_loss = 0;   // total = L1 + λ·mean(L2..LK); z-loss (cooldown only)
  std::vector<double> per_pass;  // CE of pass 1..K
  double grad_norm = std::nan("");
  double comm_s = 0;             // all-reduce time not hidden by backward
  double step_s = 0;             // wall-clock seconds of the step
  bool ok = false;               // finite loss and gradient: the update was applied
  int stop = 0;                  // SIGINT/SIGTERM seen by any rank, else 0
};

/// Checks and prepares the run directory: refuses a different run without --resume/--force,
/// clears it with --force, copies the dataset's tokenizer into RUNDIR/tokenizer.
void prepare_run_dir(const TrainOptions& opt, const nlohmann::json& tok) {
  const fs::path out(opt.out_dir), data(opt.data_dir);
  if (!opt.resume && fs::exists(out / "run.json") && !opt.force)
    throw Error("--out " + opt.out_dir + " already holds a run (run.json); use --resume to continue it or --force to replace it");
  if (opt.force && fs::exists(out)) {
    for (const auto& entry : fs::directory_iterator(out)) {
      const auto name = entry.path().filename().string();
      if (name.rfind("step-", 0) == 0 || name == "latest" || name == "metrics.jsonl" || name == "run.json" || name == "tokenizer")
        fs::remove_all(entry.path());
    }
  }
  fs::create_directories(out / "tokenizer");
  fs::copy_file(data / "meta.json", out / "tokenizer" / "meta.json", fs::copy_options::overwrite_existing);
  if (tok.contains("model"))
    fs::copy_file(data / tok.at("model").get<std::string>(), out / "tokenizer" / tok.at("model").get<std::string>(),
                  fs::copy_options::overwrite_existing);
}

/// One `fbt train` run, in the order it happens: setup (rendezvous, configuration, data, run
/// record, model and optimiser, resume, gradient sync), then per step `train_step`,
/// `record_step`, `validate` and `save_checkpoint`, then `print_summary`.
class TrainingRun {
 public:
  TrainingRun(const TrainOptions& opt, std::ostream& rank0_log);
  TrainResult run();

 private:
  void load_config();
  void open_data();
  void write_run_record();
  void build_model();
  void resume_from_latest();
  void start_gradient_sync();
  StepOutcome train_step();
  void record_step(const StepOutcome& s);
  void validate();
  void save_checkpoint();
  void print_summary();
  double wall_s() const {
    return st_.wall_s_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
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
  nlohmann::json tok_;     // the dataset's tokenizer description (meta.json)
  int64_t T_ = 0, accum_ = 1, local_accum_ = 1;  // sequence length; micro-batches per step, all / this rank
  std::optional<TokenShard> train_shard_, val_shard_;
  nlohmann::json run_record_;  // run.json: the record plus, after every checkpoint, the progress
  FBT model_{nullptr};
  std::unique_ptr<TrainingOptimizer> optimizer_;
  std::unique_ptr<BatchLoader> loader_;
  std::mt19937_64 pass_rng_;
  at::Generator generator_;  // jitter, mixin (per rank)
  RunState st_;
  TrainResult result_;
  std::ofstream metrics_;  // stays closed on ranks > 0: their writes are dropped
  bool tty_ = false;
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
  if (opt.dist.normuon != "replicate" && opt.dist.normuon != "shard")
    throw Error("--normuon-orthogonalize " + opt.dist.normuon + ": expected replicate or shard");
  if (env_.active() && device_.is_cuda() && !device_.has_index()) device_ = torch::Device(torch::kCUDA, env_.local_rank);
  if (env_.active()) comm_ = std::make_unique<Communicator>(env_, opt.dist, device_);
  load_config();
  open_data();
  if (rank0_) prepare_run_dir(opt_, tok_);
  write_run_record();
  build_model();
  if (opt_.resume) resume_from_latest();
  start_gradient_sync();
}

// ---- configuration: preset/file + --set, or the stored one on --resume
void TrainingRun::load_config() {
  if (opt_.resume) {
    const auto run_json = out_ / "run.json";
    if (!fs::is_regular_file(run_json) || !fs::is_regular_file(out_ / "latest"))
      throw Error("--resume: " + opt_.out_dir + " holds no run to resume (needs run.json and latest)");
    try {
      std::ifstream f(run_json);
      stored_ = nlohmann::json::parse(f);
      rc_.model = ModelConfig::from_json(stored_.at("config").at("model"), run_json.string() + ": model");
      fields_from_json(stored_.at("config").at("train"), run_json.string() + ": train", rc_.train);
    } catch (const nlohmann::json::exception& e) {  // truncated, not JSON, or without the config
      throw Error("--resume: " + run_json.string() + ": " + e.what());
    }
    if (!opt_.sets.empty() || !opt_.config.empty())
      throw Error("--resume continues the stored config (run.json); --config and --set are not allowed");
  } else {
    rc_ = RunConfig::load(opt_.config.empty() ? "small" : opt_.config);
    for (const auto& s : opt_.sets) rc_.set(s);
  }
  if (opt_.steps > 0) rc_.train.steps = opt_.steps;
  rc_.train.validate();
}

// ---- data: vocabulary and document separator come from the dataset
void TrainingRun::open_data() {
  const auto meta = read_dataset_meta(opt_.data_dir);
  tok_ = meta.at("tokenizer");
  const int64_t vocab = tok_.at("vocab_size").get<int64_t>();
  if (rc_.model.vocab_size != vocab) {
    if (opt_.resume) throw Error("--data " + opt_.data_dir + ": vocabulary " + std::to_string(vocab) +
                                 " differs from the run's " + std::to_string(rc_.model.vocab_size));
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
  if (opt_.resume) {  // the same global batch as the run's first launch (run.json records it)
    const int64_t tokens = accum_ * rc_.train.batch_size * T_;
    const auto stored_world = stored_.value("world_size", int64_t{1});
    const auto stored_tokens = stored_.contains("global_batch")
                                   ? stored_.at("global_batch").value("tokens", int64_t{-1})
                                   : rc_.train.accumulation(T_, stored_world) * rc_.train.batch_size * T_;
    if (tokens != stored_tokens)
      throw Error("--resume: the run in " + opt_.out_dir + " was trained with a global batch of " +
                  std::to_string(stored_tokens) + " tokens per step by " + std::to_string(stored_world) +
                  " process(es), but WORLD_SIZE " + std::to_string(env_.world_size) + " gives " +
                  std::to_string(tokens) + "; resume with the run's number of processes");
  }
  train_shard_ = open_split(opt_.data_dir, "train");
  val_shard_ = open_split(opt_.data_dir, "val");
}

// ---- run record (rank 0 alone writes it) and the log's header
void TrainingRun::write_run_record() {
  const nlohmann::json record{{"config", rc_.to_json()},
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
  if (!opt_.resume && rank0_) write_file_atomic((out_ / "run.json").string(), record.dump(2) + "\n");
  run_record_ = opt_.resume ? stored_ : record;
  const auto& tc = rc_.train;
  log_ << "fbt train  git " << git_sha() << "  libtorch " << torch_version() << "  device " << opt_.device
       << "  threads " << torch::get_num_threads() << "\n"
       << rc_.to_json().dump(2) << "\n"
       << "parameters: " << rc_.model.parameter_count() << "  global batch: " << accum_ * tc.batch_size
       << " sequences x " << T_ << " = " << accum_ * tc.batch_size * T_ << " tokens/step (" << accum_
       << " micro-batch" << (accum_ > 1 ? "es" : "") << " of " << tc.batch_size << " x " << T_
       << (env_.world_size > 1 ? ", " + std::to_string(local_accum_) + " per rank on " +
                                     std::to_string(env_.world_size) + " processes"
                               : std::string())
       << (tc.batch_tokens == 0 && env_.world_size > 1
               ? "; train.batch_tokens unset: one micro-batch of train.batch_size per process"
               : "")
       << ")  expected passes/step: " << tc.pass_schedule.expected_passes() << "\n";
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

// ---- model, optimiser, RNGs, loader
void TrainingRun::build_model() {
  const auto& tc = rc_.train;
  torch::manual_seed(tc.seed);
  model_ = FBT(rc_.model);
  model_->to(device_);
  model_->train();
  optimizer_ = std::make_unique<TrainingOptimizer>(model_, tc);
  log_ << optimizer_->describe()
       << "precision: " << (uses_bf16_autocast(tc.precision, device_) ? "bf16 autocast" : "fp32")
       << " (weights, optimiser state and loss fp32)\n";
  loader_ = std::make_unique<BatchLoader>(*train_shard_, tc.batch_size, T_, tc.seed);
  pass_rng_.seed(tc.seed ^ 0x9E3779B97F4A7C15ULL);
  generator_ = at::make_generator<at::CPUGeneratorImpl>(tc.seed + 1 + env_.rank);
}

// ---- resume: weights, optimiser, counters, RNGs and loader from RUNDIR/latest
void TrainingRun::resume_from_latest() {
  const auto& tc = rc_.train;
  std::ifstream lf(out_ / "latest");
  std::string name;
  lf >> name;
  const auto dir = out_ / name;
  load_weights((dir / "model.safetensors").string(), model_);
  const auto opt_file = (dir / "optimizer.safetensors").string();
  optimizer_->load_state(load_tensors(opt_file).tensors, opt_file);
  nlohmann::json tj;
  try {
    std::ifstream tf(dir / "trainer.json");
    tj = nlohmann::json::parse(tf);
  } catch (const nlohmann::json::exception& e) {
    throw Error("--resume: " + (dir / "trainer.json").string() + ": " + e.what());
  }
  const int64_t saved_world = tj.value("world_size", int64_t(1));
  if (saved_world != env_.world_size)
    throw Error("--resume: " + dir.string() + " was written by a run of " + std::to_string(saved_world) +
                " process(es) but WORLD_SIZE is " + std::to_string(env_.world_size) +
                "; resume with the same number of processes");
  st_.step = tj.at("step");
  st_.tokens = tj.at("tokens");
  st_.token_equivalent = tj.at("token_equivalent");
  st_.consecutive_bad = tj.at("consecutive_bad");
  st_.wall_s_before = tj.value("wall_s", 0.0);
  for (const auto& [k, v] : tj.at("pass_counts").items()) st_.pass_counts[std::stoll(k)] = v;
  std::istringstream(tj.at("pass_rng").get<std::string>()) >> pass_rng_;
  generator_.set_state(hex_decode(env_.active() ? tj.at("torch_generators").at(env_.rank) : tj.at("torch_generator")));
  loader_->set_state(tj.at("loader"));
  if (tc.steps <= st_.step)
    throw Error("--steps " + std::to_string(tc.steps) + ": the run in " + opt_.out_dir + " is already at step " +
                std::to_string(st_.step) + "; give a larger total to continue it");
  log_ << "resumed from " << dir.string() << " at step " << st_.step << "\n";
  // A new --steps total changes the schedules (warmup/cooldown, pass phases are fractions of
  // it): say so, and record it in run.json so the run stays described by its record.
  const int64_t stored_steps = stored_.at("config").at("train").at("steps");
  if (tc.steps != stored_steps) {
    log_ << "note: train.steps changed from " << stored_steps << " to " << tc.steps
         << "; the lr and pass schedules now span " << tc.steps << " steps (run.json updated)\n";
    if (rank0_) {
      stored_["config"]["train"]["steps"] = tc.steps;
      stored_["resumes"].push_back({{"at_step", st_.step}, {"steps_before", stored_steps}, {"steps_after", tc.steps},
                                    {"git_sha", git_sha()}});
      write_file_atomic((out_ / "run.json").string(), stored_.dump(2) + "\n");
      run_record_ = stored_;
    }
  }
}

// ---- gradient all-reduce (data parallel) and the loop's bookkeeping
void TrainingRun::start_gradient_sync() {
  const auto& tc = rc_.train;
  if (rank0_) metrics_.open(out_ / "metrics.jsonl", std::ios::app);
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
  tokenizer_ = Tokenizer::load(opt_.data_dir);
}

// ---- the step: K-pass forward and backward over this rank's micro-batches, sync, update
StepOutcome TrainingRun::train_step() {
  const auto& tc = rc_.train;
  const auto step_start = std::chrono::steady_clock::now();
  StepOutcome s;
  s.passes = tc.pass_schedule.draw(st_.step, tc.steps, pass_rng_);
  s.lr_factor = tc.lr_factor(st_.step);
  s.cooldown = tc.in_cooldown(st_.step);
  s.wd_factor = s.cooldown && tc.adamc ? s.lr_factor : 1.0;  // AdamC
  const int64_t K = s.passes;

  PassOptions po = training_pass_options(tc, K, s.cooldown);
  po.generator = generator_;
  s.z_loss_on = po.z_loss > 0;
  // Gradient accumulation: the same K for every micro-batch; each contributes loss / accum.
  // Micro-batch m of the step belongs to rank m / local_accum; the others' are skipped.
  // Losses are summed on the device and read once per step (one host sync, not 1 + 2K per
  // micro-batch): [total, z-loss, pass 1..K], each already divided by accum. A non-finite
  // loss still runs backward; the step is then skipped and its gradients dropped below.
  torch::Tensor sums = torch::zeros({2 + K}, torch::dtype(torch::kDouble).device(device_));
  for (int64_t m = 0; m < accum_; ++m) {
    if (m / local_accum_ != env_.rank) {
      loader_->skip();
      continue;
    }
    if (sync_ && m == (env_.rank + 1) * local_accum_ - 1) sync_->arm();  // the last: buckets go out in backward
    auto [x, y] = loader_->next();
    PassOutput out_pass;
    {
      AutocastScope amp(tc.precision, device_);
      out_pass = forward_passes(model_, x.to(device_), y.to(device_), po);
    }
    (out_pass.loss / double(accum_)).backward();
    auto z = po.z_loss > 0 ? torch::stack(out_pass.z_losses).mean() : torch::zeros_like(out_pass.loss);
    std::vector<torch::Tensor> parts{out_pass.loss, z};
    parts.insert(parts.end(), out_pass.losses.begin(), out_pass.losses.end());
    sums += torch::stack(parts).detach().to(torch::kDouble) / double(accum_);
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
  return s;
}

// ---- the step's record: counters, metrics.jsonl line, progress line; stops after max_bad_steps
void TrainingRun::record_step(const StepOutcome& s) {
  const auto& tc = rc_.train;
  const int64_t K = s.passes;
  result_.losses.push_back(s.ok ? s.loss : std::nan(""));
  nlohmann::json line{{"step", st_.step}, {"passes", K}, {"lr_scale", s.lr_factor}, {"lr", tc.lr * s.lr_factor},
                      {"wd_scale", s.wd_factor}, {"cooldown", s.cooldown}};
  if (tc.optimizer == OptimizerKind::NorMuon) line["normuon_lr"] = tc.normuon_lr * s.lr_factor;
  if (!s.ok) {
    ++st_.consecutive_bad;
    const std::string what = std::isfinite(s.loss) ? "gradient" : "loss";
    line["skipped"] = "non-finite " + what;
    metrics_ << line.dump() << "\n" << std::flush;
    log_ << "step " << st_.step << ": non-finite " << what << ", update skipped (" << st_.consecutive_bad
         << " in a row)\n";
    if (st_.consecutive_bad >= tc.max_bad_steps) {
      save_checkpoint();
      throw Error("stopping: " + std::to_string(st_.consecutive_bad) +
                  " consecutive non-finite steps (train.max_bad_steps); lower train.lr or check the data");
    }
    return;
  }
  st_.consecutive_bad = 0;
  const int64_t n = accum_ * tc.batch_size * T_;
  st_.tokens += n;
  st_.token_equivalent += n * K;
  ++st_.pass_counts[K];
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  line.update({{"tokens", st_.tokens}, {"token_equivalent", st_.token_equivalent},
               {"token_equivalent_ratio", double(st_.token_equivalent) / double(st_.tokens)},
               {"pass_fractions", pass_fractions(st_.pass_counts)}, {"losses", s.per_pass}, {"loss", s.loss},
               {"grad_norm", s.grad_norm}, {"tokens_per_s", n / s.step_s}, {"elapsed_s", elapsed}});
  if (s.z_loss_on) line["z_loss"] = s.z_loss;
  if (comm_) line["comm_s"] = s.comm_s;  // gradient/loss all-reduce time not hidden by backward
  metrics_ << line.dump() << "\n" << std::flush;
  const double eta = elapsed / double(st_.step - first_step_) * double(tc.steps - st_.step);
  std::ostringstream loss_text;  // total = L1 + λ·mean(L2..LK): also show pass 1 alone when K > 1
  loss_text << std::fixed << std::setprecision(4) << s.loss;
  if (K > 1) loss_text << " (pass 1: " << s.per_pass[0] << ")";
  if (tty_) {
    const int width = 30, filled = int(width * st_.step / tc.steps);
    log_ << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << st_.step << "/"
         << tc.steps << "  loss " << loss_text.str() << "  K=" << K << "  " << std::fixed << std::setprecision(0)
         << n / s.step_s << " tok/s  ETA " << format_duration(eta) << "   " << std::defaultfloat << std::flush;
  } else if (st_.step % tc.log_every == 0 || st_.step == tc.steps) {
    log_ << "step " << st_.step << "/" << tc.steps << "  loss " << loss_text.str() << "  K=" << K << "  lr x"
         << std::fixed << std::setprecision(3) << s.lr_factor << "  grad_norm " << std::setprecision(3) << s.grad_norm
         << "  " << std::setprecision(0) << n / s.step_s << " tok/s  elapsed " << format_duration(elapsed)
         << "  ETA " << format_duration(eta) << "\n"
         << std::defaultfloat << std::flush;
  }
}

// ---- validation: standard and fused(1) loss on the val split (rank 0)
void TrainingRun::validate() {
  LossEvalOptions eo;
  eo.max_tokens = rc_.train.eval_tokens;
  eo.passes = 1;
  eo.batch = rc_.train.batch_size;
  const auto r = evaluate_loss(model_, *val_shard_, *tokenizer_, eo);  // [passes=0, passes=1]
  result_.val_standard = r[0].nats_per_token;
  result_.val_fused1 = r[1].nats_per_token;
  result_.validated = true;
  metrics_ << nlohmann::json{{"step", st_.step},
                             {"val", {{"standard", {{"loss", r[0].nats_per_token}, {"bpb", r[0].bits_per_byte}}},
                                      {"fused1", {{"loss", r[1].nats_per_token}, {"bpb", r[1].bits_per_byte}}}}}}.dump()
           << "\n" << std::flush;
  log_ << (tty_ ? "\n" : "") << "step " << st_.step << "  val standard " << std::fixed << std::setprecision(4)
       << r[0].nats_per_token << "  fused(1) " << r[1].nats_per_token << " nats/token  (" << r[0].bits_per_byte
       << " / " << r[1].bits_per_byte << " bits/byte)\n" << std::defaultfloat;
}

// ---- checkpointing: every rank holds the same weights, optimiser state and loader state; only
// the jitter/mixin generators differ, so rank 0 collects theirs and writes the checkpoint alone.
void TrainingRun::save_checkpoint() {
  const auto own_generator = hex_encode(generator_.get_state());
  const auto generators = comm_ ? comm_->gather_strings("generators/" + std::to_string(st_.step), own_generator)
                                : std::vector<std::string>{own_generator};
  if (!rank0_) return;
  const auto name = step_dir_name(st_.step);
  const auto tmp = out_ / (name + ".tmp"), final_dir = out_ / name;
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  save_model((tmp / "model.safetensors").string(), model_, tok_, st_.step);
  save_tensors((tmp / "optimizer.safetensors").string(), optimizer_->state(), {{"step", st_.step}});
  std::ostringstream rng;
  rng << pass_rng_;
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& [k, v] : st_.pass_counts) counts[std::to_string(k)] = v;
  nlohmann::json tj{{"step", st_.step}, {"tokens", st_.tokens}, {"token_equivalent", st_.token_equivalent},
                    {"consecutive_bad", st_.consecutive_bad}, {"pass_counts", counts},
                    {"pass_rng", rng.str()}, {"torch_generator", own_generator},
                    {"loader", loader_->state()}, {"world_size", env_.world_size}, {"wall_s", wall_s()}};
  if (comm_) tj["torch_generators"] = generators;
  write_file_atomic((tmp / "trainer.json").string(), tj.dump(2) + "\n");
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  write_latest(opt_.out_dir, name);
  run_record_["progress"] = {{"step", st_.step},
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

// ---- the run's summary: tokens, token-equivalent compute, realised pass fractions, peak memory
void TrainingRun::print_summary() {
  std::ostringstream fractions;
  const auto realised = pass_fractions(st_.pass_counts);
  for (const auto& [k, f] : realised.items())
    fractions << "K=" << k << " " << std::fixed << std::setprecision(3) << f.get<double>() << "  ";
  log_ << "done: " << st_.step << " steps, " << st_.tokens << " tokens, token-equivalent compute "
       << st_.token_equivalent << " (" << std::fixed << std::setprecision(3)
       << double(st_.token_equivalent) / std::max<int64_t>(1, st_.tokens) << "x; the paper's 75/22/3% schedule: 1.28x)\n"
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
    if ((tc.checkpoint_every > 0 && st_.step % tc.checkpoint_every == 0) || last || s.stop) save_checkpoint();
    if (s.stop && !last) {
      log_ << (tty_ ? "\n" : "") << "interrupted: checkpoint written at step " << st_.step << " ("
           << (out_ / step_dir_name(st_.step)).string() << "); continue with --resume\n";
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

TrainResult run_training(const TrainOptions& opt, std::ostream& rank0_log) {
  return TrainingRun(opt, rank0_log).run();
}

PassOptions training_pass_options(const TrainConfig& tc, int64_t passes, bool cooldown) {
  PassOptions po;
  po.passes = passes;
  po.jitter = tc.jitter;
  po.mixin_prob = tc.mixin_prob;
  po.detach = tc.detach;
  po.checkpoint = tc.activation_checkpointing;
  po.later_weight = tc.later_weight;
  po.z_loss = cooldown ? tc.z_loss : 0.0;
  return po;
}

}  // namespace fbt
