// Hugging Face import (issue 17): tiny random Llama/Qwen2/Qwen3 models made by transformers
// (tests/fixtures/hf/make_fixtures.py) give transformers' own logits in fbt's standard mode and,
// with their imported tokenizers, its greedy continuations of a text prompt; the run directory
// round-trips, the fusion decodes on top, and bad inputs are named.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "cli_test_helpers.h"
#include "fbt/data/hf_tokenizer.h"
#include "fbt/infer/decode.h"
#include "fbt/infer/generate.h"
#include "fbt/io/checkpoint.h"
#include "fbt/io/hf_import.h"
#include "fbt/io/run_dir.h"
#include "fbt/io/safetensors.h"
#include "fbt/util/error.h"
#include "expect_error.h"
#include "temp_dir.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
namespace fs = std::filesystem;

const fs::path kHfImportDir = fs::path(FBT_SOURCE_DIR) / "tests" / "fixtures" / "hf";
const std::vector<std::string> kHfFixtures = {"llama_tied", "llama_untied", "llama3_rope", "qwen2", "qwen3"};

struct Expected {
  torch::Tensor tokens, logits;  // [1,T] int64, [1,T,V] fp32 (transformers, fp32, CPU)
  torch::Tensor prompt, greedy;  // [1,P], [1,G] int64: HF tokenizers' ids of `text`, transformers' argmax continuation
  std::string text;
};

Expected expected_of(const std::string& name) {
  Expected e;
  auto file = load_foreign_tensors((kHfImportDir / name / "expected_logits.safetensors").string());
  for (const auto& [key, t] : file.tensors)
    (key == "tokens" ? e.tokens : key == "logits" ? e.logits : key == "prompt" ? e.prompt : e.greedy) = t;
  e.text = file.metadata.at("prompt").get<std::string>();
  return e;
}

std::vector<int64_t> ids_of(const torch::Tensor& t) {
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
}

using testing::expect_error;

TEST(HfImport, StandardLogitsEqualTransformers) {
  for (const auto& name : kHfFixtures) {
    SCOPED_TRACE(name);
    auto imported = import_hf_model((kHfImportDir / name).string());
    const auto e = expected_of(name);
    torch::NoGradGuard no_grad;
    const auto logits = imported.model->forward(e.tokens);
    const double diff = testing::max_abs_diff(logits, e.logits);
    std::cout << "[ HfImport ] " << name << ": max |logit - transformers| = " << diff << "\n";
    EXPECT_LT(diff, 2e-5);  // measured about 1e-6; a wrong norm eps (1e-6 for 1e-5) gives 2e-3
  }
}

TEST(HfImport, ConfigsMapTheFamilySwitches) {
  auto config = [](const std::string& name) { return import_hf_model((kHfImportDir / name).string()).model->config(); };
  const auto tied = config("llama_tied"), untied = config("llama_untied"), rope = config("llama3_rope");
  const auto qwen2 = config("qwen2"), qwen3 = config("qwen3");
  EXPECT_EQ(tied.block, BlockKind::Llama);
  EXPECT_TRUE(tied.tie_embeddings);
  EXPECT_FALSE(untied.tie_embeddings);
  EXPECT_DOUBLE_EQ(tied.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(untied.rope_theta, 500000.0);
  EXPECT_EQ(rope.rope_scaling, RopeScaling::Llama3);
  EXPECT_EQ(rope.rope_original_context, 16);
  EXPECT_TRUE(qwen2.attention_bias && !qwen2.attention_out_bias && !qwen2.qk_norm);
  EXPECT_TRUE(qwen3.qk_norm && !qwen3.attention_bias);
  EXPECT_EQ(qwen3.head_dim(), 32);       // config.json head_dim, not hidden_size / heads = 16
  EXPECT_EQ(qwen2.doc_separator_id, 2);  // eos_token_id
  for (const auto& c : {tied, untied, rope, qwen2, qwen3}) {
    FBT model(c);
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    EXPECT_EQ(c.parameter_count(), n);
  }
}

// The standard prefill + cached decode of the Llama block equals its full forward (the KV cache
// with biases, QK-norm, head_dim != D/H and llama3 RoPE).
TEST(HfImport, CachedDecodeEqualsForward) {
  for (const auto& name : kHfFixtures) {
    SCOPED_TRACE(name);
    auto model = import_hf_model((kHfImportDir / name).string()).model;
    const auto e = expected_of(name);
    const int64_t T = e.tokens.size(1), P = 6;
    torch::NoGradGuard no_grad;
    KVCache cache(model->config(), 1, T, torch::dtype(torch::kFloat));
    const auto prompt = e.tokens.narrow(1, 0, P);
    auto last =
        prefill(model, prompt, torch::ones_like(prompt, torch::kBool), Decoding::make(DecodeMode::Standard, 1), cache);
    std::vector<torch::Tensor> logits{last};
    for (int64_t t = P; t < T; ++t)
      logits.push_back(decode_step(model, e.tokens.select(1, t), DecodeMode::Standard, cache));
    const auto stepped = torch::stack(logits, 1);  // [1, T-P+1, V]: positions P-1 .. T-1
    EXPECT_LT(testing::max_abs_diff(stepped, e.logits.narrow(1, P - 1, T - P + 1)), 1e-4);
  }
}

// The glu fusion on top of an imported stack: soft and fused decoding run, stay finite, and the
// fused inputs have the raw embeddings' scale (the input-norm rule of hf_import.h). (The default
// fusion, residual, is the base model in every mode: tests/model/test_fusion_residual.cpp.)
TEST(HfImport, SoftAndFusedDecodingRun) {
  HfImportOptions glu;
  glu.fusion = Fusion::Glu;
  for (const auto& name : kHfFixtures) {
    SCOPED_TRACE(name);
    auto model = import_hf_model((kHfImportDir / name).string(), glu).model;
    const auto e = expected_of(name);
    std::vector<int64_t> prompt(e.tokens.data_ptr<int64_t>(), e.tokens.data_ptr<int64_t>() + 8);
    for (auto mode : {DecodeMode::Standard, DecodeMode::Soft, DecodeMode::Fused}) {
      GenerationOptions o;
      o.decoding = Decoding::make(mode, 2);
      o.max_new_tokens = 6;
      o.sampling.temperature = 0;  // greedy
      const auto out = generate(model, {prompt, {prompt.begin(), prompt.begin() + 3}}, o);
      ASSERT_EQ(out.size(), 2u);
      EXPECT_EQ(out[0].size(), 6u) << Decoding::make(mode, 2).label();
      for (auto t : out[0]) EXPECT_TRUE(t >= 0 && t < model->config().vocab_size);
    }
    torch::NoGradGuard no_grad;
    const auto soft = sequential_logits(model, e.tokens);  // every position after 0 fused
    EXPECT_TRUE(torch::isfinite(soft).all().item<bool>());
    EXPECT_GT(testing::max_abs_diff(soft, e.logits), 1e-3);  // the feedback changes the logits
    const auto emb = model->embed(e.tokens), plain = model->plain_input(emb);
    EXPECT_TRUE(torch::equal(plain, emb));  // the Llama block reads the raw embedding
    const auto fused = model->fused_input(model->final_norm(emb), plain);
    const double ratio = (fused.pow(2).mean().sqrt() / emb.pow(2).mean().sqrt()).item<double>();
    EXPECT_GT(ratio, 0.5);
    EXPECT_LT(ratio, 2.0);
  }
}

// transformers 4's config.json (most Hub models): rope_theta and rope_scaling at the top level.
// The fields of meta-llama/Llama-3.2-1B's config.json, and a Qwen2 one with its sliding-window keys off.
TEST(HfImport, ReadsTransformers4Configs) {
  const auto llama = nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
    "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 128256})");
  HfImportOptions o;
  o.context = 4096;
  const auto c = hf_model_config(llama, "llama-3.2-1b", o);
  EXPECT_EQ(c.block, BlockKind::Llama);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling, RopeScaling::Llama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling_factor, 32.0);
  EXPECT_EQ(c.rope_original_context, 8192);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_EQ(c.head_dim_override, 0);  // 2048 / 32: the usual D/H
  EXPECT_EQ(c.context, 4096);
  EXPECT_EQ(c.doc_separator_id, 128001);
  EXPECT_TRUE(c.tie_embeddings && !c.attention_bias && !c.qk_norm);
  EXPECT_NEAR(double(c.parameter_count() - 2 * 2048 * 2048 - 2048) / 1e9, 1.236, 0.001);  // 1.24 B without the fusion

  const auto qwen2 = nlohmann::json::parse(R"({
    "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 32768,
    "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": true, "use_sliding_window": false, "vocab_size": 151936, "rope_scaling": null})");
  const auto q = hf_model_config(qwen2, "qwen2.5-0.5b", {});
  EXPECT_DOUBLE_EQ(q.rope_theta, 1e6);
  EXPECT_EQ(q.rope_scaling, RopeScaling::None);
  EXPECT_TRUE(q.attention_bias && !q.attention_out_bias);
  EXPECT_EQ(q.context, 32768);
  auto sliding = qwen2;
  sliding["use_sliding_window"] = true;
  expect_error([&] { hf_model_config(sliding, "qwen2.json", {}); }, {"qwen2.json", "use_sliding_window"});
  auto linear = llama;
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  expect_error([&] { hf_model_config(linear, "llama.json", {}); }, {"llama.json: rope_scaling", "linear", "llama3"});
}

TEST(HfImport, RunDirectoryLoadsBack) {
  testing::TempDir tmp;
  const auto run = (fs::path(tmp.path) / "run").string();
  auto imported = import_hf_model((kHfImportDir / "qwen2").string());
  write_imported_run(imported, run);
  CheckpointInfo info;
  auto loaded = load_model(resolve_checkpoint(run), &info);
  EXPECT_EQ(info.config, imported.model->config());
  EXPECT_EQ(info.step, 0);
  const auto meta = nlohmann::json::parse(testing::slurp(fs::path(run) / "tokenizer" / "meta.json"));
  EXPECT_EQ(info.tokenizer, meta.at("tokenizer"));  // what check_tokenizer_matches compares
  EXPECT_EQ(meta.at("tokenizer").at("type"), "hf_bpe");
  EXPECT_EQ(meta.at("tokenizer").at("vocab_size"), 384);  // the model's rows, not the tokenizer's 360 tokens
  EXPECT_EQ(meta.at("tokenizer").at("eos_id"), 2);        // <|im_end|>, tokenizer_config.json's eos_token
  EXPECT_EQ(meta.at("tokenizer").at("pad_id"), 0);        // <|endoftext|>
  EXPECT_EQ(meta.at("tokenizer").at("add_bos"), false);
  EXPECT_EQ(meta.at("tokenizer").at("chat_template"), "chat_template.jinja");
  auto tokenizer = Tokenizer::load((fs::path(run) / "tokenizer").string());
  EXPECT_EQ(dynamic_cast<const HfBpeTokenizer&>(*tokenizer).chat_template(),
            imported.hf_tokenizer_config.at("chat_template").get<std::string>());
  EXPECT_EQ(tokenizer->decode({359, 360, 383}), tokenizer->decode({359}));  // padding ids decode to ""
  const auto record = nlohmann::json::parse(testing::slurp(fs::path(run) / "run.json"));
  EXPECT_EQ(record.at("imported_from").at("model_type"), "qwen2");
  EXPECT_EQ(record.at("imported_from").at("weight_files").size(), 5u);  // the sharded fixture
  const auto e = expected_of("qwen2");
  torch::NoGradGuard no_grad;
  EXPECT_LT(testing::max_abs_diff(loaded->forward(e.tokens), e.logits), 1e-4);
  expect_error([&] { write_imported_run(imported, run); }, {run, "not an empty directory"});
}

// Text in, text out: the imported tokenizer gives HF tokenizers' prompt ids (with Llama-3's BOS
// as the document start), and greedy decoding continues it as transformers does.
TEST(HfImport, GreedyContinuationEqualsTransformers) {
  for (const auto& name : kHfFixtures) {
    SCOPED_TRACE(name);
    testing::TempDir tmp;
    const auto run = fs::path(tmp.path) / "run";
    write_imported_run(import_hf_model((kHfImportDir / name).string()), run.string());
    auto model = load_model(resolve_checkpoint(run.string()));
    const auto tokenizer = Tokenizer::load((run / "tokenizer").string());
    const auto e = expected_of(name);
    std::vector<int64_t> prompt = tokenizer->document_prefix();
    for (int64_t id : tokenizer->encode(e.text)) prompt.push_back(id);
    EXPECT_EQ(prompt, ids_of(e.prompt));
    EXPECT_EQ(prompt.front() == 0, name.rfind("llama", 0) == 0);  // <|begin_of_text|> for the llama3 tokenizer
    GenerationOptions o;
    o.max_new_tokens = e.greedy.numel();
    o.sampling.temperature = 0;
    o.eos_id = -1;  // transformers' continuation ran without an EOS stop
    EXPECT_EQ(generate(model, {prompt}, o)[0], ids_of(e.greedy));
  }
}

/// A copy of fixture `name` in `dir` whose config.json is edited by `edit` and whose tensors are
/// those of the fixture minus `drop`.
void damaged_copy(const std::string& name, const fs::path& dir, const std::function<void(nlohmann::json&)>& edit,
                  const std::string& drop = "") {
  fs::create_directories(dir);
  auto config = nlohmann::json::parse(testing::slurp(kHfImportDir / name / "config.json"));
  edit(config);
  testing::write_file(dir / "config.json", config.dump(2));
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kHfImportDir / name / file, dir / file, fs::copy_options::overwrite_existing);
  NamedTensors kept;
  for (auto& [key, t] : load_foreign_tensors((kHfImportDir / name / "model.safetensors").string()).tensors)
    if (key != drop) kept.emplace_back(key, t);
  save_tensors((dir / "model.safetensors").string(), kept, nlohmann::json::object());
}

TEST(HfImport, UnsupportedModelTypeIsNamed) {
  testing::TempDir tmp;
  const auto dir = fs::path(tmp.path) / "gpt2";
  damaged_copy("llama_tied", dir, [](nlohmann::json& c) { c["model_type"] = "gpt2"; });
  expect_error([&] { import_hf_model(dir.string()); },
               {"config.json", "model_type \"gpt2\" is not supported", "llama, qwen2, qwen3"});
  damaged_copy("llama_tied", dir, [](nlohmann::json& c) { c["rope_parameters"]["rope_type"] = "yarn"; });
  expect_error([&] { import_hf_model(dir.string()); }, {"config.json", "rope_parameters", "yarn"});
  damaged_copy("llama_tied", dir, [](nlohmann::json& c) { c["hidden_act"] = "gelu"; });
  expect_error([&] { import_hf_model(dir.string()); }, {"config.json", "hidden_act", "gelu"});
  damaged_copy("llama_tied", dir, [](nlohmann::json& c) { c.erase("hidden_size"); });
  expect_error([&] { import_hf_model(dir.string()); }, {"config.json", "hidden_size"});
}

TEST(HfImport, MissingOrWrongTensorsAreNamed) {
  testing::TempDir tmp;
  const auto dir = fs::path(tmp.path) / "m";
  damaged_copy(
      "llama_tied", dir, [](nlohmann::json&) {}, "model.layers.1.mlp.down_proj.weight");
  expect_error([&] { import_hf_model(dir.string()); }, {"missing tensor 'model.layers.1.mlp.down_proj.weight'"});
  damaged_copy("llama_tied", dir, [](nlohmann::json& c) { c["tie_word_embeddings"] = false; });
  expect_error([&] { import_hf_model(dir.string()); }, {"missing tensor 'lm_head.weight'"});
  damaged_copy("llama_tied", dir, [](nlohmann::json& c) {
    c["model_type"] = "qwen3";
    c["head_dim"] = 16;
  });
  expect_error([&] { import_hf_model(dir.string()); }, {"missing tensor 'model.layers.0.self_attn.", "_norm.weight'"});
  damaged_copy("llama_tied", dir, [](nlohmann::json& c) { c["intermediate_size"] = 40; });
  expect_error([&] { import_hf_model(dir.string()); }, {"model.safetensors", "mlp.", "has shape"});
  fs::remove(dir / "model.safetensors");
  expect_error([&] { import_hf_model(dir.string()); }, {dir.string(), "neither model.safetensors nor"});
}

TEST(HfImport, TokenizerErrorsAreNamed) {
  testing::TempDir tmp;
  const auto dir = fs::path(tmp.path) / "m";
  damaged_copy("llama_tied", dir, [](nlohmann::json&) {});
  fs::remove(dir / "tokenizer.json");
  expect_error([&] { import_hf_model(dir.string()); }, {dir.string(), "no tokenizer.json", "tokenizer.model"});
  damaged_copy("llama_tied", dir, [](nlohmann::json& c) { c["vocab_size"] = 300; });
  expect_error([&] { import_hf_model(dir.string()); },
               {(dir / "tokenizer.json").string(), "model.vocab", "outside the model's vocabulary [0, 300)"});
  damaged_copy("llama_tied", dir, [](nlohmann::json&) {});
  auto config = nlohmann::json::parse(testing::slurp(dir / "tokenizer_config.json"));
  config["eos_token"] = "<|no such token|>";
  testing::write_file(dir / "tokenizer_config.json", config.dump());
  expect_error([&] { import_hf_model(dir.string()); },
               {(dir / "tokenizer_config.json").string(), "eos_token", "<|no such token|>"});
  // Without tokenizer_config.json the special tokens come from config.json's ids.
  fs::remove(dir / "tokenizer_config.json");
  const auto imported = import_hf_model(dir.string());
  EXPECT_EQ(imported.hf_tokenizer_config.at("bos_token"), "<|begin_of_text|>");
  EXPECT_EQ(imported.hf_tokenizer_config.at("eos_token"), "<|end_of_text|>");
}

}  // namespace
}  // namespace fbt
