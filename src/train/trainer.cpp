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
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>

#include "fbt/util/build_info.h"
#include "fbt/io/checkpoint.h"
#include "fbt/data/shards.h"
#include "fbt/util/error.h"
#include "fbt/eval/loss.h"
#include "fbt/dist/gradient_sync.h"
#include "fbt/util/memory_stats.h"
#include "fbt/train/optimizer.h"
#include "fbt/train/passes.h"
#include "fbt/model/precision.h"
#include "fbt/io/run_dir.h"
#include "fbt/data/tokenizer.h"
#include "fbt/train/train_config.h"

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

}  // namespace

TrainResult run_training(const TrainOptions& opt, std::ostream& rank0_log) {
  const auto run_start = std::chrono::steady_clock::now();
  const fs::path out(opt.out_dir), data(opt.data_dir);
  if (opt.out_dir.empty()) throw Error("--out is required");
  if (opt.resume && opt.force) throw Error("--resume and --force exclude each other");
  if (opt.dist.normuon != "replicate" && opt.dist.normuon != "shard")
    throw Error("--normuon-orthogonalize " + opt.dist.normuon + ": expected replicate or shard");

  // ---- data parallelism: rendezvous first, so a rank that fails below ends the others' waits
  const auto env = distributed_env_from_environment();
  const bool rank0 = env.rank == 0;
  std::ostream null_log(nullptr);  // ranks > 0 print nothing
  std::ostream& log = rank0 ? rank0_log : null_log;
  torch::Device device(opt.device);
  if (env.active() && device.is_cuda() && !device.has_index()) device = torch::Device(torch::kCUDA, env.local_rank);
  std::unique_ptr<Communicator> comm;
  if (env.active()) comm = std::make_unique<Communicator>(env, opt.dist, device);

  // ---- configuration: preset/file + --set, or the stored one on --resume
  RunConfig rc;
  nlohmann::json stored;  // RUNDIR/run.json on --resume
  if (opt.resume) {
    const auto run_json = out / "run.json";
    if (!fs::is_regular_file(run_json) || !fs::is_regular_file(out / "latest"))
      throw Error("--resume: " + opt.out_dir + " holds no run to resume (needs run.json and latest)");
    std::ifstream f(run_json);
    stored = nlohmann::json::parse(f);
    rc.model = ModelConfig::from_json(stored.at("config").at("model"), run_json.string() + ": model");
    fields_from_json(stored.at("config").at("train"), run_json.string() + ": train", rc.train);
    if (!opt.sets.empty() || !opt.config.empty())
      throw Error("--resume continues the stored config (run.json); --config and --set are not allowed");
  } else {
    rc = RunConfig::load(opt.config.empty() ? "small" : opt.config);
    for (const auto& s : opt.sets) rc.set(s);
  }
  if (opt.steps > 0) rc.train.steps = opt.steps;
  rc.train.validate();

  // ---- data: vocabulary and document separator come from the dataset
  const auto meta = read_dataset_meta(opt.data_dir);
  const auto& tok = meta.at("tokenizer");
  const int64_t vocab = tok.at("vocab_size").get<int64_t>();
  if (rc.model.vocab_size != vocab) {
    if (opt.resume) throw Error("--data " + opt.data_dir + ": vocabulary " + std::to_string(vocab) +
                                " differs from the run's " + std::to_string(rc.model.vocab_size));
    log << "note: model.vocab_size set to " << vocab << " from " << (data / "meta.json").string() << "\n";
    rc.model.vocab_size = vocab;
  }
  rc.model.doc_separator_id = tok.at("eos_id").get<int64_t>();
  rc.model.validate();
  const int64_t T = rc.train.seq_len > 0 ? rc.train.seq_len : rc.model.context;
  if (T > rc.model.context)
    throw Error("train.seq_len " + std::to_string(T) + " exceeds model.context " + std::to_string(rc.model.context));
  const int64_t accum = rc.train.accumulation(T);  // micro-batches per step, all ranks together
  if (accum % env.world_size != 0)
    throw Error("WORLD_SIZE " + std::to_string(env.world_size) + " does not divide the " + std::to_string(accum) +
                " micro-batches of a step (train.batch_tokens / (train.batch_size x seq_len)); " +
                (opt.resume ? std::string("resume with the run's number of processes")
                            : "set train.batch_tokens to a multiple of WORLD_SIZE x batch_size x seq_len = " +
                                  std::to_string(env.world_size * rc.train.batch_size * T)));
  const int64_t local_accum = accum / env.world_size;  // this rank's share, micro-batches [rank·local, ...)
  auto train_shard = open_split(opt.data_dir, "train");
  auto val_shard = open_split(opt.data_dir, "val");

  // ---- run directory (rank 0 alone writes it)
  if (rank0) prepare_run_dir(opt, tok);

  const nlohmann::json record{{"config", rc.to_json()},
                              {"data", fs::absolute(data).string()},
                              {"git_sha", git_sha()},
                              {"torch_version", torch_version()},
                              {"device", opt.device},
                              {"threads", torch::get_num_threads()},
                              {"world_size", env.world_size},
                              {"parameters", rc.model.parameter_count()}};
  if (!opt.resume && rank0) write_file_atomic((out / "run.json").string(), record.dump(2) + "\n");
  log << "fbt train  git " << git_sha() << "  libtorch " << torch_version() << "  device " << opt.device
      << "  threads " << torch::get_num_threads() << "\n"
      << rc.to_json().dump(2) << "\n"
      << "parameters: " << rc.model.parameter_count() << "  tokens/step: " << accum * rc.train.batch_size * T
      << " (" << accum << " micro-batch" << (accum > 1 ? "es" : "") << " of " << rc.train.batch_size << " x " << T << ")"
      << "  expected passes/step: " << rc.train.pass_schedule.expected_passes() << "\n";
  if (rc.train.warmup_steps >= rc.train.steps ||
      (rc.train.warmup_steps > 0 && rc.train.in_cooldown(rc.train.warmup_steps - 1)))
    log << "note: the warmup of train.warmup_steps = " << rc.train.warmup_steps
        << (rc.train.warmup_steps >= rc.train.steps ? " outlasts the run" : " runs into the cooldown")
        << ", so the peak lr is never reached (lower it for short runs)\n";
  if (comm)
    log << "data parallel: " << env.world_size << " processes (c10d " << comm->backend_name() << ", MASTER "
        << env.master_addr << ":" << env.master_port << "), " << local_accum << " micro-batch"
        << (local_accum > 1 ? "es" : "") << " per rank per step, NorMuon orthogonalisation: " << opt.dist.normuon
        << ", timeout " << opt.dist.timeout_s << " s\n";

  // ---- model, optimiser, RNGs, loader
  const auto& tc = rc.train;
  torch::manual_seed(tc.seed);
  FBT model(rc.model);
  model->to(device);
  model->train();
  TrainingOptimizer optimizer(model, tc);
  log << optimizer.describe()
      << "precision: " << (uses_bf16_autocast(tc.precision, device) ? "bf16 autocast" : "fp32")
      << " (weights, optimiser state and loss fp32)\n";
  BatchLoader loader(train_shard, tc.batch_size, T, tc.seed);
  std::mt19937_64 pass_rng(tc.seed ^ 0x9E3779B97F4A7C15ULL);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(tc.seed + 1 + env.rank);  // jitter, mixin
  RunState st;

  if (opt.resume) {
    std::ifstream lf(out / "latest");
    std::string name;
    lf >> name;
    const auto dir = out / name;
    load_weights((dir / "model.safetensors").string(), model);
    const auto opt_file = (dir / "optimizer.safetensors").string();
    optimizer.load_state(load_tensors(opt_file).tensors, opt_file);
    std::ifstream tf(dir / "trainer.json");
    const auto tj = nlohmann::json::parse(tf);
    const int64_t saved_world = tj.value("world_size", int64_t(1));
    if (saved_world != env.world_size)
      throw Error("--resume: " + dir.string() + " was written by a run of " + std::to_string(saved_world) +
                  " process(es) but WORLD_SIZE is " + std::to_string(env.world_size) +
                  "; resume with the same number of processes");
    st.step = tj.at("step");
    st.tokens = tj.at("tokens");
    st.token_equivalent = tj.at("token_equivalent");
    st.consecutive_bad = tj.at("consecutive_bad");
    st.wall_s_before = tj.value("wall_s", 0.0);
    for (const auto& [k, v] : tj.at("pass_counts").items()) st.pass_counts[std::stoll(k)] = v;
    std::istringstream(tj.at("pass_rng").get<std::string>()) >> pass_rng;
    generator.set_state(hex_decode(env.active() ? tj.at("torch_generators").at(env.rank) : tj.at("torch_generator")));
    loader.set_state(tj.at("loader"));
    if (tc.steps <= st.step)
      throw Error("--steps " + std::to_string(tc.steps) + ": the run in " + opt.out_dir + " is already at step " +
                  std::to_string(st.step) + "; give a larger total to continue it");
    log << "resumed from " << dir.string() << " at step " << st.step << "\n";
    // A new --steps total changes the schedules (warmup/cooldown, pass phases are fractions of
    // it): say so, and record it in run.json so the run stays described by its record.
    const int64_t stored_steps = stored.at("config").at("train").at("steps");
    if (tc.steps != stored_steps) {
      log << "note: train.steps changed from " << stored_steps << " to " << tc.steps
          << "; the lr and pass schedules now span " << tc.steps << " steps (run.json updated)\n";
      if (rank0) {
        stored["config"]["train"]["steps"] = tc.steps;
        stored["resumes"].push_back({{"at_step", st.step}, {"steps_before", stored_steps}, {"steps_after", tc.steps},
                                     {"git_sha", git_sha()}});
        write_file_atomic((out / "run.json").string(), stored.dump(2) + "\n");
      }
    }
  }

  // run.json = the record plus, after every checkpoint, the run's progress (steps, tokens,
  // token-equivalent compute, wall time, last validation), so a finished or cut run describes itself.
  nlohmann::json run_record = opt.resume ? stored : record;
  TrainResult result;
  auto wall_s = [&] {
    return st.wall_s_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  };
  // Every rank holds the same weights, optimiser state and loader state; only the jitter/mixin
  // generators differ, so rank 0 collects theirs and writes the checkpoint alone.
  auto save_checkpoint = [&] {
    const auto own_generator = hex_encode(generator.get_state());
    const auto generators = comm ? comm->gather_strings("generators/" + std::to_string(st.step), own_generator)
                                 : std::vector<std::string>{own_generator};
    if (!rank0) return;
    const auto name = step_dir_name(st.step);
    const auto tmp = out / (name + ".tmp"), final_dir = out / name;
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    save_model((tmp / "model.safetensors").string(), model, tok, st.step);
    save_tensors((tmp / "optimizer.safetensors").string(), optimizer.state(), {{"step", st.step}});
    std::ostringstream rng;
    rng << pass_rng;
    nlohmann::json counts = nlohmann::json::object();
    for (const auto& [k, v] : st.pass_counts) counts[std::to_string(k)] = v;
    nlohmann::json tj{{"step", st.step}, {"tokens", st.tokens}, {"token_equivalent", st.token_equivalent},
                            {"consecutive_bad", st.consecutive_bad}, {"pass_counts", counts},
                            {"pass_rng", rng.str()}, {"torch_generator", own_generator},
                            {"loader", loader.state()}, {"world_size", env.world_size}, {"wall_s", wall_s()}};
    if (comm) tj["torch_generators"] = generators;
    write_file_atomic((tmp / "trainer.json").string(), tj.dump(2) + "\n");
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
    write_latest(opt.out_dir, name);
    run_record["progress"] = {{"step", st.step},
                              {"steps", tc.steps},
                              {"tokens", st.tokens},
                              {"token_equivalent", st.token_equivalent},
                              {"token_equivalent_ratio", double(st.token_equivalent) / double(std::max<int64_t>(1, st.tokens))},
                              {"pass_fractions", pass_fractions(st.pass_counts)},
                              {"wall_s", wall_s()}};
    if (result.validated)
      run_record["progress"]["val"] = {{"standard", result.val_standard}, {"fused1", result.val_fused1}};
    write_file_atomic((out / "run.json").string(), run_record.dump(2) + "\n");
  };

  // ---- the loop
  std::ofstream metrics;  // stays closed on ranks > 0: their writes are dropped
  if (rank0) metrics.open(out / "metrics.jsonl", std::ios::app);
  const bool tty = isatty(STDOUT_FILENO) && &log == &std::cout;
  StopSignals signals;
  auto params = model->parameters();
  std::unique_ptr<GradientSync> sync;
  if (comm) {
    comm->broadcast(params, 0);  // identical seeds already agree; this makes it a guarantee
    // Activation checkpointing accumulates a parameter once per pass: no hook-launched buckets.
    sync = std::make_unique<GradientSync>(*comm, params, int64_t(opt.dist.bucket_mb * (1 << 20)),
                                          /*overlap=*/!tc.activation_checkpointing);
    if (opt.dist.normuon == "shard")
      optimizer.set_orthogonalizer([&comm](const std::vector<torch::Tensor>& U, int64_t ns_steps) {
        return orthogonalize_sharded(*comm, U, ns_steps);
      });
    log << "gradient all-reduce: " << sync->bucket_count() << " bucket(s) of <= " << opt.dist.bucket_mb << " MiB"
        << (tc.activation_checkpointing ? ", after backward (activation checkpointing)" : ", overlapping backward")
        << "\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first_step = st.step;
  const auto tokenizer = Tokenizer::load(opt.data_dir);
  auto validate = [&] {
    LossEvalOptions eo;
    eo.max_tokens = tc.eval_tokens;
    eo.passes = 1;
    eo.batch = tc.batch_size;
    const auto r = evaluate_loss(model, val_shard, *tokenizer, eo);  // [passes=0, passes=1]
    result.val_standard = r[0].nats_per_token;
    result.val_fused1 = r[1].nats_per_token;
    result.validated = true;
    metrics << nlohmann::json{{"step", st.step},
                              {"val", {{"standard", {{"loss", r[0].nats_per_token}, {"bpb", r[0].bits_per_byte}}},
                                       {"fused1", {{"loss", r[1].nats_per_token}, {"bpb", r[1].bits_per_byte}}}}}}.dump()
            << "\n" << std::flush;
    log << (tty ? "\n" : "") << "step " << st.step << "  val standard " << std::fixed << std::setprecision(4)
        << r[0].nats_per_token << "  fused(1) " << r[1].nats_per_token << " nats/token  (" << r[0].bits_per_byte
        << " / " << r[1].bits_per_byte << " bits/byte)\n" << std::defaultfloat;
  };

  while (st.step < tc.steps) {
    const auto step_start = std::chrono::steady_clock::now();
    const int64_t K = tc.pass_schedule.draw(st.step, tc.steps, pass_rng);
    const double lr_factor = tc.lr_factor(st.step);
    const bool cooldown = tc.in_cooldown(st.step);
    const double wd_factor = cooldown && tc.adamc ? lr_factor : 1.0;  // AdamC

    PassOptions po = training_pass_options(tc, K, cooldown);
    po.generator = generator;
    // Gradient accumulation: the same K for every micro-batch; each contributes loss / accum.
    // Micro-batch m of the step belongs to rank m / local_accum; the others' are skipped.
    // Losses are summed on the device and read once per step (one host sync, not 1 + 2K per
    // micro-batch): [total, z-loss, pass 1..K], each already divided by accum. A non-finite
    // loss still runs backward; the step is then skipped and its gradients dropped below.
    torch::Tensor sums = torch::zeros({2 + K}, torch::dtype(torch::kDouble).device(device));
    for (int64_t m = 0; m < accum; ++m) {
      if (m / local_accum != env.rank) {
        loader.skip();
        continue;
      }
      if (sync && m == (env.rank + 1) * local_accum - 1) sync->arm();  // the last: buckets go out in backward
      auto [x, y] = loader.next();
      PassOutput out_pass;
      {
        AutocastScope amp(tc.precision, device);
        out_pass = forward_passes(model, x.to(device), y.to(device), po);
      }
      (out_pass.loss / double(accum)).backward();
      auto z = po.z_loss > 0 ? torch::stack(out_pass.z_losses).mean() : torch::zeros_like(out_pass.loss);
      std::vector<torch::Tensor> parts{out_pass.loss, z};
      parts.insert(parts.end(), out_pass.losses.begin(), out_pass.losses.end());
      sums += torch::stack(parts).detach().to(torch::kDouble) / double(accum);
    }
    const auto host = sums.cpu();
    const double* h = host.data_ptr<double>();
    double loss = h[0], z_loss = h[1];
    std::vector<double> per_pass(h + 2, h + 2 + K);
    int stop = g_stop_signal;
    double comm_s = 0;
    if (comm) {  // sum gradients, losses and the stop flag (every rank stops after the same step)
      comm_s = sync->finish();
      const auto comm_start = std::chrono::steady_clock::now();
      std::vector<double> stats{loss, z_loss, double(stop)};
      stats.insert(stats.end(), per_pass.begin(), per_pass.end());
      stats = comm->allreduce_sum(stats);
      loss = stats[0];
      z_loss = stats[1];
      stop = stats[2] > 0 ? (g_stop_signal ? g_stop_signal.load() : SIGTERM) : 0;
      std::copy(stats.begin() + 3, stats.end(), per_pass.begin());
      comm_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - comm_start).count();
    }
    double grad_norm = std::nan("");
    bool ok = std::isfinite(loss);
    if (ok) {
      grad_norm = torch::nn::utils::clip_grad_norm_(params, tc.grad_clip > 0 ? tc.grad_clip : INFINITY);
      ok = std::isfinite(grad_norm);
      if (ok) optimizer.step(lr_factor, wd_factor);
    }
    // Drop gradients (set to none): parameters unused by a step (the fusion when K = 1) then
    // get no AdamW update, the same whether or not earlier steps in this process used them,
    // which keeps a resumed run identical to an uninterrupted one.
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    ++st.step;
    result.losses.push_back(ok ? loss : std::nan(""));
    nlohmann::json line{{"step", st.step}, {"passes", K}, {"lr_scale", lr_factor}, {"lr", tc.lr * lr_factor},
                        {"wd_scale", wd_factor}, {"cooldown", cooldown}};
    if (tc.optimizer == OptimizerKind::NorMuon) line["normuon_lr"] = tc.normuon_lr * lr_factor;
    if (!ok) {
      ++st.consecutive_bad;
      line["skipped"] = "non-finite " + std::string(std::isfinite(loss) ? "gradient" : "loss");
      metrics << line.dump() << "\n" << std::flush;
      log << "step " << st.step << ": non-finite " << (std::isfinite(loss) ? "gradient" : "loss")
          << ", update skipped (" << st.consecutive_bad << " in a row)\n";
      if (st.consecutive_bad >= tc.max_bad_steps) {
        save_checkpoint();
        throw Error("stopping: " + std::to_string(st.consecutive_bad) +
                    " consecutive non-finite steps (train.max_bad_steps); lower train.lr or check the data");
      }
    } else {
      st.consecutive_bad = 0;
      const int64_t n = accum * tc.batch_size * T;
      st.tokens += n;
      st.token_equivalent += n * K;
      ++st.pass_counts[K];
      const auto now = std::chrono::steady_clock::now();
      const double step_s = std::chrono::duration<double>(now - step_start).count();
      const double elapsed = std::chrono::duration<double>(now - t0).count();
      line.update({{"tokens", st.tokens}, {"token_equivalent", st.token_equivalent},
                   {"token_equivalent_ratio", double(st.token_equivalent) / double(st.tokens)},
                   {"pass_fractions", pass_fractions(st.pass_counts)}, {"losses", per_pass}, {"loss", loss},
                   {"grad_norm", grad_norm}, {"tokens_per_s", n / step_s}, {"elapsed_s", elapsed}});
      if (po.z_loss > 0) line["z_loss"] = z_loss;
      if (comm) line["comm_s"] = comm_s;  // gradient/loss all-reduce time not hidden by backward
      metrics << line.dump() << "\n" << std::flush;
      const double eta = elapsed / double(st.step - first_step) * double(tc.steps - st.step);
      std::ostringstream loss_text;  // total = L1 + λ·mean(L2..LK): also show pass 1 alone when K > 1
      loss_text << std::fixed << std::setprecision(4) << loss;
      if (K > 1) loss_text << " (pass 1: " << per_pass[0] << ")";
      if (tty) {
        const int width = 30, filled = int(width * st.step / tc.steps);
        log << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << st.step << "/"
            << tc.steps << "  loss " << loss_text.str() << "  K=" << K << "  " << std::fixed
            << std::setprecision(0) << n / step_s << " tok/s  ETA " << format_duration(eta) << "   "
            << std::defaultfloat << std::flush;
      } else if (st.step % tc.log_every == 0 || st.step == tc.steps) {
        log << "step " << st.step << "/" << tc.steps << "  loss " << loss_text.str() << "  K=" << K << "  lr x"
            << std::fixed << std::setprecision(3) << lr_factor
            << "  grad_norm " << std::setprecision(3) << grad_norm << "  " << std::setprecision(0) << n / step_s
            << " tok/s  elapsed " << format_duration(elapsed) << "  ETA " << format_duration(eta) << "\n"
            << std::defaultfloat << std::flush;
      }
    }
    const bool last = st.step == tc.steps;
    if (((tc.eval_every > 0 && st.step % tc.eval_every == 0) || last) && rank0) validate();
    if ((tc.checkpoint_every > 0 && st.step % tc.checkpoint_every == 0) || last || stop) save_checkpoint();
    if (stop && !last) {
      log << (tty ? "\n" : "") << "interrupted: checkpoint written at step " << st.step << " ("
          << (out / step_dir_name(st.step)).string() << "); continue with --resume\n";
      result.stop_signal = stop;
      break;
    }
  }
  if (tty) log << "\n";
  if (comm) comm->barrier();  // leave together: rank 0 may still be validating or writing
  result.last_step = st.step;
  std::ostringstream fractions;
  const auto realised = pass_fractions(st.pass_counts);
  for (const auto& [k, f] : realised.items())
    fractions << "K=" << k << " " << std::fixed << std::setprecision(3) << f.get<double>() << "  ";
  log << "done: " << st.step << " steps, " << st.tokens << " tokens, token-equivalent compute "
      << st.token_equivalent << " (" << std::fixed << std::setprecision(3)
      << double(st.token_equivalent) / std::max<int64_t>(1, st.tokens) << "x; the paper's 75/22/3% schedule: 1.28x)\n"
      << "realised pass fractions: " << fractions.str() << "(paper: K=1 0.75  K=2 0.22  K=3 0.03)\n"
      << "peak RSS: " << std::setprecision(2) << double(peak_memory_bytes(torch::kCPU)) / 1e9 << " GB\n" << std::defaultfloat;
  return result;
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
