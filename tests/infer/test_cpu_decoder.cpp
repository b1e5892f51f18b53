// CpuDecoder (the dedicated CPU decode step, fp32, int8 and int4 weights) against the generic decode_step it replaces.
#include <gtest/gtest.h>

#include "fbt/infer/cpu_decoder.h"
#include "fbt/infer/decode.h"
#include "fbt/util/error.h"
#include "cpu_prefill.h"
#include "test_model_helpers.h"

namespace fbt {
namespace {
using testing::make_test_model;
using testing::max_abs_diff;

constexpr double kCpuDecoderTol = 2e-4;  // fp32: BLAS and libtorch round the products differently

std::vector<ModelConfig> configs() {
  auto windowed = ModelConfig::preset("debug");
  windowed.n_layers = 3;
  windowed.window = 4;  // layers 0 and 2 slide over 4 tokens, layer 1 is full
  windowed.full_attention_every = 2;
  auto variant = ModelConfig::preset("debug");
  variant.fusion = Fusion::GluPlusToken;
  variant.feedback_state = FeedbackState::PreNorm;
  variant.n_kv_heads = 4;  // no grouping
  variant.doc_separator_id = 3;
  auto smol = ModelConfig::preset("debug");  // the Llama block as SmolLM2 has it: tied, no QK-norm
  smol.block = BlockKind::Llama;
  smol.qk_norm = false;
  auto llama = variant;  // untied, QK-norm, Dh ≠ D/H, the separator
  llama.block = BlockKind::Llama;
  llama.tie_embeddings = false;
  llama.head_dim_override = 32;
  return {ModelConfig::preset("debug"), windowed, variant, smol, llama};
}

/// The test model of `config` with every weight the int8 / int4 decode step quantises (each matrix
/// product's whose rows split into blocks of 32; the embedding only where it is the tied head)
/// replaced by its Q8_0 / Q4_0 round trip (int4: the head Q8_0); fp32: the model itself.
FBT quant_round_trip(const ModelConfig& config, DecodeWeights weights) {
  auto model = make_test_model(config);
  if (weights == DecodeWeights::Fp32) return model;
  torch::NoGradGuard no_grad;
  const std::string head = config.tie_embeddings ? "embedding.weight" : "lm_head.weight";
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    auto& p = item.value();
    if (p.dim() != 2 || p.size(1) % QuantMatrix::kBlock != 0 || (name == "embedding.weight" && !config.tie_embeddings))
      continue;  // rows that do not split into blocks of 32 stay fp32 (debug's d_ff = 688)
    const auto format = weights == DecodeWeights::Int4 && name != head ? QuantFormat::Q4_0 : QuantFormat::Q8_0;
    auto w = p.contiguous();
    const auto q = QuantMatrix::quantize(format, w.data_ptr<float>(), w.size(0), w.size(1));
    auto back = torch::empty_like(w);
    for (int64_t n = 0; n < w.size(0); ++n) q.dequantize_row(n, back.data_ptr<float>() + n * w.size(1));
    p.copy_(back);
  }
  return model;
}

// Continuous batching (engine.h): three sequences of different lengths, each in its own cache and
// mode, stepped together in batch-invariant mode. Each row equals decode_step on its own cache
// (to fp32 rounding) and equals, bit for bit, the same sequence stepped alone.
TEST(CpuDecoder, PerSequenceCachesStepLikeDecodeStepAndTheSameAlone) {
  for (const auto& config : configs())
    for (auto weights : {DecodeWeights::Fp32, DecodeWeights::Int8, DecodeWeights::Int4}) {
      auto model = make_test_model(config);
      // quantised weights with fp32 activations step as the model of their dequantised weights
      auto reference = quant_round_trip(config, weights);
      torch::NoGradGuard no_grad;
      const std::vector<DecodeMode> modes{DecodeMode::Soft, DecodeMode::Standard, DecodeMode::Fused};
      std::vector<KVCache> caches;
      std::vector<int64_t> next;
      torch::manual_seed(9);
      for (int64_t n : {2, 5, 9}) {
        auto prompt = torch::randint(4, config.vocab_size, {1, n}, torch::kLong);
        caches.emplace_back(config, 1, n + 4, torch::dtype(torch::kFloat));
        auto mode = modes[caches.size() - 1];
        next.push_back(prefill(model, prompt, torch::ones({1, n}, torch::kBool), Decoding::make(mode, 2), caches.back())
                           .argmax(-1)
                           .item<int64_t>());
      }
      next[0] = 3;  // the variant's separator: row 0's next input is plain
      CpuDecoder decoder(model, CpuDecoderOptions{/*batch_invariant=*/true, weights, Q8Activations::Fp32});
      for (int64_t s = 0; s < 3; ++s) {
        const std::string where = enum_to_string(config.block) + " weights " + std::to_string(int(weights)) +
                                  " d_model " + std::to_string(config.d_model) + " step " + std::to_string(s);
        std::vector<KVCache> generic, alone;
        for (const auto& c : caches) {
          generic.push_back(c.clone());
          alone.push_back(c.clone());
        }
        std::vector<KVCache*> rows;
        for (auto& c : caches) rows.push_back(&c);
        auto logits = decoder.step(torch::tensor(next), modes, rows);  // [3,V]
        for (int64_t b = 0; b < 3; ++b) {
          auto expected = decode_step(reference, torch::tensor({next[b]}), modes[b], generic[b]);
          ASSERT_LT(max_abs_diff(logits[b], expected[0]), kCpuDecoderTol) << where << " row " << b;
          ASSERT_LT(max_abs_diff(caches[b].h_prev(), generic[b].h_prev()), kCpuDecoderTol) << where << " row " << b;
          ASSERT_EQ(caches[b].length, generic[b].length) << where;
          auto single = decoder.step(torch::tensor({next[b]}), {modes[b]}, {&alone[b]});
          ASSERT_TRUE(torch::equal(single[0], logits[b])) << where << " row " << b;
          ASSERT_TRUE(torch::equal(alone[b].h_prev(), caches[b].h_prev())) << where << " row " << b;
        }
        for (int64_t b = 0; b < 3; ++b) next[b] = logits[b].argmax().item<int64_t>();
      }
    }
}

// Left-padded prompts of unequal length, then 8 steps in lockstep through both steps from the
// same prefilled cache; one row is fed the document separator (its next input must be plain).
TEST(CpuDecoder, StepEqualsTheGenericDecodeStep) {
  for (const auto& config : configs()) {
    for (auto mode : {DecodeMode::Standard, DecodeMode::Soft}) {
      auto model = make_test_model(config);
      torch::NoGradGuard no_grad;
      const int64_t B = 3, P = 7, steps = 8;
      torch::manual_seed(5);
      auto tokens = torch::randint(4, config.vocab_size, {B, P}, torch::kLong);
      auto valid = torch::ones({B, P}, torch::kBool);
      valid[0].narrow(0, 0, 3).fill_(false);  // row 0: 4 real tokens
      valid[2].narrow(0, 0, 6).fill_(false);  // row 2: 1 real token
      KVCache generic(config, B, P + steps, torch::dtype(torch::kFloat));
      KVCache fast(config, B, P + steps, torch::dtype(torch::kFloat));
      auto logits = prefill(model, tokens, valid, Decoding{}, generic);
      prefill(model, tokens, valid, Decoding{}, fast);
      CpuDecoder decoder(model);
      auto next = logits.argmax(-1);
      for (int64_t s = 0; s < steps; ++s) {
        if (s == 3) next[1] = 3;  // the variant's separator (an ordinary token elsewhere)
        auto expected = decode_step(model, next, mode, generic);
        auto got = decoder.step(next, mode, fast);
        const std::string where = Decoding::make(mode, 0).label() + " d_model " + std::to_string(config.d_model) +
                                  " layers " + std::to_string(config.n_layers) + " step " + std::to_string(s);
        ASSERT_LT(max_abs_diff(got, expected), kCpuDecoderTol) << where;
        ASSERT_LT(max_abs_diff(fast.h_prev(), generic.h_prev()), kCpuDecoderTol) << where;
        ASSERT_TRUE(torch::equal(fast.next_pos(), generic.next_pos())) << where;
        ASSERT_EQ(fast.length, generic.length) << where;
        for (int64_t l = 0; l < config.n_layers; ++l) {
          ASSERT_LT(max_abs_diff(fast.k[l], generic.k[l]), kCpuDecoderTol) << where << " layer " << l;
          ASSERT_LT(max_abs_diff(fast.v[l], generic.v[l]), kCpuDecoderTol) << where << " layer " << l;
        }
        next = expected.argmax(-1);
      }
    }
  }
}

// 8- and 4-bit weights: with fp32 activations the step equals decode_step on the model whose
// weights are their own Q8_0 / Q4_0 round trip (so every matrix is quantised, and only those, the
// int4 head in Q8_0); with int8 activations it stays within activation-quantisation error of that;
// and in batch-invariant mode a sequence's row is the same bits alone as among others.
TEST(CpuDecoder, QuantisedWeightsStepLikeTheirDequantisedModel) {
  for (const auto& config : configs())
    for (auto weights : {DecodeWeights::Int8, DecodeWeights::Int4}) {
      auto model = make_test_model(config);
      auto dequantised = quant_round_trip(config, weights);
      torch::NoGradGuard no_grad;
      const int64_t B = 2, P = 5;
      torch::manual_seed(11);
      auto tokens = torch::randint(4, config.vocab_size, {B, P}, torch::kLong);
      auto valid = torch::ones({B, P}, torch::kBool);
      KVCache reference(config, B, P + 4, torch::dtype(torch::kFloat));
      auto next = prefill(dequantised, tokens, valid, Decoding{}, reference).argmax(-1);
      KVCache f32_in = reference.clone(), int8_in = reference.clone();
      CpuDecoderOptions fp32_acts{/*batch_invariant=*/true, weights, Q8Activations::Fp32};
      CpuDecoderOptions int8_acts{/*batch_invariant=*/true, weights, Q8Activations::Int8};
      CpuDecoder exact(model, fp32_acts), approx(model, int8_acts);
      for (int64_t s = 0; s < 3; ++s) {
        const std::string where =
            enum_to_string(config.block) + " weights " + std::to_string(int(weights)) + " step " + std::to_string(s);
        auto expected = decode_step(dequantised, next, DecodeMode::Soft, reference);
        auto got = exact.step(next, DecodeMode::Soft, f32_in);
        ASSERT_LT(max_abs_diff(got, expected), kCpuDecoderTol) << where;
        ASSERT_LT(max_abs_diff(f32_in.h_prev(), reference.h_prev()), kCpuDecoderTol) << where;
        auto rough = approx.step(next, DecodeMode::Soft, int8_in);
        ASSERT_LT(max_abs_diff(rough, expected), 0.05 * expected.abs().max().item<double>()) << where;
        ASSERT_GT(max_abs_diff(rough, expected), 0.0) << where << ": int8 activations must round";
        next = expected.argmax(-1);
      }
      // Int8 activations are quantised per row: a sequence's row is the same bits alone as in a batch.
      std::vector<KVCache> own;
      std::vector<KVCache*> rows;
      for (int64_t b = 0; b < B; ++b) {
        own.emplace_back(config, 1, P + 1, torch::dtype(torch::kFloat));
        prefill(model, tokens.narrow(0, b, 1), valid.narrow(0, b, 1), Decoding{}, own.back());
      }
      std::vector<KVCache> alone{own[0].clone(), own[1].clone()};
      for (auto& c : own) rows.push_back(&c);
      auto together = approx.step(next, {DecodeMode::Soft, DecodeMode::Standard}, rows);
      EXPECT_TRUE(torch::equal(approx.step(next.narrow(0, 1, 1), {DecodeMode::Standard}, {&alone[1]})[0], together[1]));
      EXPECT_TRUE(torch::equal(approx.step(next.narrow(0, 0, 1), {DecodeMode::Soft}, {&alone[0]})[0], together[0]));
    }
}

// A quantised decoder that frees the model's fp32 matrices decodes the same bits as one that
// keeps them: the model is left with its norms, an untied embedding and the matrices that stay
// fp32 (rows not a multiple of 32 long: w_down, d_ff = 176) only.
TEST(CpuDecoder, ReleasedModelWeightsDecodeTheSameBits) {
  for (const auto& config : configs())
    for (auto weights : {DecodeWeights::Int8, DecodeWeights::Int4}) {
      auto kept = make_test_model(config), released = make_test_model(config);  // same seed: same weights
      torch::NoGradGuard no_grad;
      CpuDecoderOptions options{false, weights};
      CpuDecoder a(kept, options);
      options.release_model_weights = true;
      CpuDecoder b(released, options);
      const std::string where = enum_to_string(config.block) + " weights " + std::to_string(int(weights));
      for (const auto& p : kept->named_parameters()) {
        const auto& original = p.value();
        const bool stays = original.dim() == 1 || (p.key() == "embedding.weight" && !config.tie_embeddings) ||
                           original.size(1) % QuantMatrix::kBlock != 0;
        EXPECT_EQ(released->named_parameters()[p.key()].numel(), stays ? original.numel() : 0)
            << where << " " << p.key();
      }
      torch::manual_seed(5);
      auto tokens = torch::randint(4, config.vocab_size, {2, 9}, torch::kLong);
      const auto valid = torch::ones({2, 9}, torch::kBool);
      for (int64_t passes : {0, 1}) {
        KVCache ca(config, 2, 12, torch::dtype(torch::kFloat)), cb(config, 2, 12, torch::dtype(torch::kFloat));
        EXPECT_TRUE(torch::equal(testing::cpu_prefill(a, tokens, valid, ca, passes),
                                 testing::cpu_prefill(b, tokens, valid, cb, passes)))
            << where;
        auto next = tokens.select(1, 8);
        EXPECT_TRUE(torch::equal(a.step(next, DecodeMode::Soft, ca), b.step(next, DecodeMode::Soft, cb))) << where;
      }
    }
}

// CpuDecoder::prefill against prefill() (decode.h), plain and Fused(2): left-padded rows, prompts
// longer than one pass of kPrefillRows (the later passes attend to the earlier ones' slots), fp32,
// int8 and int4 weights (int8/int4 with fp32 activations against the model of their dequantised weights).
TEST(CpuDecoder, PrefillEqualsTheGenericPrefill) {
  for (const auto& config : configs())
    for (auto weights : {DecodeWeights::Fp32, DecodeWeights::Int8, DecodeWeights::Int4}) {
      auto model = make_test_model(config);
      auto reference = quant_round_trip(config, weights);
      torch::NoGradGuard no_grad;
      CpuDecoder decoder(model, CpuDecoderOptions{/*batch_invariant=*/false, weights, Q8Activations::Fp32});
      for (int64_t B : {1, 2})
        for (int64_t passes : {0, 2}) {
          const int64_t T = CpuDecoder::kPrefillRows + 6;  // B = 1: passes of 64 + 6; B = 2: 32 + 32 + 6
          torch::manual_seed(21);
          auto tokens = torch::randint(4, config.vocab_size, {B, T}, torch::kLong);
          tokens[0][T / 2] = 3;  // the variant's separator: Fused passes leave the position after it plain
          auto valid = torch::ones({B, T}, torch::kBool);
          if (B == 2) valid[1].narrow(0, 0, 30).fill_(false);  // row 1: 40 real tokens after 30 pads
          KVCache generic(config, B, T + 1, torch::dtype(torch::kFloat)),
              fast(config, B, T + 1, torch::dtype(torch::kFloat));
          auto expected = prefill(reference, tokens, valid,
                                  Decoding::make(passes ? DecodeMode::Fused : DecodeMode::Standard, passes), generic);
          auto got = testing::cpu_prefill(decoder, tokens, valid, fast, passes);
          const std::string where = enum_to_string(config.block) + " weights " + std::to_string(int(weights)) +
                                    " layers " + std::to_string(config.n_layers) + " B " + std::to_string(B) +
                                    " fused passes " + std::to_string(passes);
          ASSERT_EQ(got.sizes(), expected.sizes()) << where;
          EXPECT_LT(max_abs_diff(got, expected), kCpuDecoderTol) << where;
          EXPECT_LT(max_abs_diff(fast.h_prev(), generic.h_prev()), kCpuDecoderTol) << where;
          EXPECT_TRUE(torch::equal(fast.next_pos(), generic.next_pos())) << where;
          EXPECT_TRUE(torch::equal(fast.last_token(), generic.last_token())) << where;
          EXPECT_TRUE(torch::equal(fast.slot_pos, generic.slot_pos) &&
                      torch::equal(fast.slot_valid, generic.slot_valid))
              << where;
          EXPECT_EQ(fast.length, generic.length) << where;
          // The keys and values of real tokens (a pad's, never attended to, differ above layer 0).
          const auto real = generic.slot_valid.view({B, 1, -1, 1});
          for (int64_t l = 0; l < config.n_layers; ++l) {
            EXPECT_LT(max_abs_diff(fast.k[l] * real, generic.k[l] * real), kCpuDecoderTol) << where << " layer " << l;
            EXPECT_LT(max_abs_diff(fast.v[l] * real, generic.v[l] * real), kCpuDecoderTol) << where << " layer " << l;
          }
        }
    }
}

// With batch-invariant products a prefill is its prompt decoded one token at a time (Standard steps
// from an empty cache), bit for bit: the same kernels see each position as a row.
TEST(CpuDecoder, BatchInvariantPrefillIsTokenByTokenDecoding) {
  for (const auto& config : configs()) {
    auto model = make_test_model(config);
    torch::NoGradGuard no_grad;
    CpuDecoder decoder(model, CpuDecoderOptions{/*batch_invariant=*/true});
    const int64_t T = CpuDecoder::kPrefillRows + 3;
    torch::manual_seed(23);
    auto tokens = torch::randint(4, config.vocab_size, {1, T}, torch::kLong);
    KVCache whole(config, 1, T, torch::dtype(torch::kFloat)), steps(config, 1, T, torch::dtype(torch::kFloat));
    auto logits = testing::cpu_prefill(decoder, tokens, torch::ones({1, T}, torch::kBool), whole);
    torch::Tensor last;
    for (int64_t t = 0; t < T; ++t) last = decoder.step(tokens.select(1, t), DecodeMode::Standard, steps);
    const std::string where = enum_to_string(config.block) + " layers " + std::to_string(config.n_layers);
    EXPECT_TRUE(torch::equal(logits, last)) << where;
    EXPECT_TRUE(torch::equal(whole.h_prev(), steps.h_prev())) << where;
    EXPECT_TRUE(torch::equal(whole.next_pos(), steps.next_pos())) << where;
    for (int64_t l = 0; l < config.n_layers; ++l)
      EXPECT_TRUE(torch::equal(whole.k[l], steps.k[l]) && torch::equal(whole.v[l], steps.v[l]))
          << where << " layer " << l;
  }
}

// A left-padded batch prefilled in two chunks (row 1 all pads in the first) equals it prefilled at
// once, bit for bit (batch-invariant products); a cleared cache starts again at position 0.
TEST(CpuDecoder, PrefillChunksContinueAndAClearedCacheStartsAgain) {
  const auto config = ModelConfig::preset("debug");
  auto model = make_test_model(config);
  torch::NoGradGuard no_grad;
  CpuDecoder decoder(model, CpuDecoderOptions{/*batch_invariant=*/true});
  torch::manual_seed(29);
  const int64_t B = 2, T = 9, split = 4;
  auto tokens = torch::randint(4, config.vocab_size, {B, T}, torch::kLong);
  auto valid = torch::ones({B, T}, torch::kBool);
  valid[1].narrow(0, 0, 6).fill_(false);  // row 1: 6 pads, then 3 real tokens
  KVCache whole(config, B, T, torch::dtype(torch::kFloat)), chunked(config, B, T, torch::dtype(torch::kFloat));
  auto expected = testing::cpu_prefill(decoder, tokens, valid, whole);
  testing::cpu_prefill(decoder, tokens.narrow(1, 0, split), valid.narrow(1, 0, split), chunked);
  EXPECT_EQ(chunked.next_pos()[1].item<int64_t>(), 0) << "a row of pads only has no position yet";
  auto got =
      testing::cpu_prefill(decoder, tokens.narrow(1, split, T - split), valid.narrow(1, split, T - split), chunked);
  EXPECT_TRUE(torch::equal(got, expected));
  EXPECT_TRUE(torch::equal(chunked.h_prev(), whole.h_prev()));
  EXPECT_TRUE(torch::equal(chunked.next_pos(), whole.next_pos()));
  EXPECT_TRUE(torch::equal(chunked.slot_pos, whole.slot_pos));
  const auto real = whole.slot_valid.view({B, 1, -1, 1});
  for (int64_t l = 0; l < config.n_layers; ++l)
    EXPECT_TRUE(torch::equal(chunked.k[l] * real, whole.k[l] * real)) << "layer " << l;
  whole.clear();  // as a benchmark reuses its cache
  EXPECT_TRUE(torch::equal(testing::cpu_prefill(decoder, tokens, valid, whole), expected));
  EXPECT_TRUE(torch::equal(whole.next_pos(), chunked.next_pos()));
}

// Soft decoding must differ from standard (the fusion is live), and bad input is refused.
TEST(CpuDecoder, SoftDiffersFromStandardAndBadInputIsRefused) {
  const auto config = ModelConfig::preset("debug");
  auto model = make_test_model(config);
  torch::NoGradGuard no_grad;
  auto prompt = torch::randint(config.vocab_size, {1, 5}, torch::kLong);
  auto valid = torch::ones({1, 5}, torch::kBool);
  KVCache a(config, 1, 6, torch::dtype(torch::kFloat)), b(config, 1, 6, torch::dtype(torch::kFloat));
  auto next = prefill(model, prompt, valid, Decoding{}, a).argmax(-1);
  prefill(model, prompt, valid, Decoding{}, b);
  CpuDecoder decoder(model);
  EXPECT_GT(max_abs_diff(decoder.step(next, DecodeMode::Soft, a), decoder.step(next, DecodeMode::Standard, b)), 1e-3);
  EXPECT_THROW(decoder.step(torch::full({1}, config.vocab_size, torch::kLong), DecodeMode::Soft, a), Error);
  EXPECT_THROW(decoder.step(next, DecodeMode::Soft, a), Error) << "the cache of 6 slots is full";
  KVCache c(config, 1, 6, torch::dtype(torch::kFloat));
  EXPECT_THROW(testing::cpu_prefill(decoder, torch::zeros({1, 7}, torch::kLong), torch::ones({1, 7}, torch::kBool), c),
               Error)
      << "7 tokens in 6 slots";
  EXPECT_THROW(testing::cpu_prefill(decoder, prompt, torch::ones({1, 4}, torch::kBool), c), Error) << "valid's shape";
  EXPECT_THROW(testing::cpu_prefill(decoder, prompt, valid, a, 1), Error)
      << "Fused prefill into a cache that holds slots";
  EXPECT_THROW(testing::cpu_prefill(decoder, prompt, valid, c, -1), Error) << "negative fused passes";
  for (int64_t passes : {0, 1}) {
    EXPECT_THROW(
        testing::cpu_prefill(decoder, torch::zeros({0, 5}, torch::kLong), torch::ones({0, 5}, torch::kBool), c, passes),
        Error)
        << "no rows, fused passes " << passes;
    EXPECT_THROW(
        testing::cpu_prefill(decoder, torch::zeros({1, 0}, torch::kLong), torch::ones({1, 0}, torch::kBool), c, passes),
        Error)
        << "no positions, fused passes " << passes;
  }
  CpuDecoder::PassFeedback wrong{torch::zeros({1, 5, config.d_model - 1}), torch::ones({1, 5}, torch::kBool)};
  EXPECT_THROW(decoder.prefill_pass(prompt, valid, c, &wrong), Error) << "feedback of the wrong shape";
  EXPECT_THROW(testing::cpu_prefill(decoder, prompt.fill_(config.vocab_size), valid, c), Error)
      << "a token outside the vocabulary";
  auto double_model = make_test_model(config);
  double_model->to(torch::kDouble);
  EXPECT_FALSE(CpuDecoder::supports(double_model));
  EXPECT_THROW(CpuDecoder{double_model}, Error);
}

// The decoder's own row loops (attention's (row, head) pairs, norms, SiLU) reach libtorch's threads:
// cpu_decoder.cpp must be compiled with OpenMP (until 2026-12-06 attention's split ran serially).
TEST(CpuDecoder, RowLoopsRunOnEveryIntraOpThread) {
  const int before = torch::get_num_threads();
  for (int threads : {2, 3, 1}) {
    torch::set_num_threads(threads);
    EXPECT_EQ(CpuDecoder::row_loop_threads(), threads);
  }
  torch::set_num_threads(before);
}

}  // namespace
}  // namespace fbt
