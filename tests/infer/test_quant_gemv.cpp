// QuantMatrix and quant_linear: ggml's Q8_0 and Q4_0 block rules by hand, the product against the
// double matmul of the dequantised weights (for Q5_0, Q4_K and Q6_K blocks, gguf-py's values), and
// a row's bits in any batch.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <torch/torch.h>

#include "fbt/infer/quant_gemv.h"
#include "fbt/io/safetensors.h"
#include "fbt/util/error.h"
#include "spawn_logged.h"
#include "temp_dir.h"

namespace fbt {
namespace {

/// Block ib of row n: its scale d and its 32 stored values (Q8_0: int8 q; Q4_0: the nibbles q,
/// unsigned, in ggml's order: byte j holds q_j low and q_(j+16) high).
float scale_of(const QuantMatrix& m, int64_t n, int64_t ib) {
  uint16_t bits;
  std::memcpy(&bits, m.block(n, ib), 2);
  return float(c10::Half(bits, c10::Half::from_bits()));
}
std::vector<int> values_of(const QuantMatrix& m, int64_t n, int64_t ib) {
  const uint8_t* v = m.block(n, ib) + 2;
  std::vector<int> q(32);
  for (int j = 0; j < 32; ++j)
    q[j] = m.format() == QuantFormat::Q8_0 ? int(int8_t(v[j])) : j < 16 ? (v[j] & 0x0F) : (v[j - 16] >> 4);
  return q;
}

/// Dequantising and quantising again gives the same blocks (GGUF Q8_0 / Q4_0 weights keep their
/// values), and the round trip's error is within `max_step_fraction` of the largest |w|.
void expect_round_trip(QuantFormat format, double max_step_fraction) {
  torch::manual_seed(3);
  auto W = torch::randn({5, 96});
  const auto q = QuantMatrix::quantize(format, W.data_ptr<float>(), 5, 96);
  std::vector<float> back(5 * 96);
  for (int64_t n = 0; n < 5; ++n) q.dequantize_row(n, back.data() + n * 96);
  const auto again = QuantMatrix::quantize(format, back.data(), 5, 96);
  for (int64_t n = 0; n < 5; ++n)
    for (int64_t ib = 0; ib < 3; ++ib) {
      ASSERT_EQ(scale_of(again, n, ib), scale_of(q, n, ib)) << n << " " << ib;
      ASSERT_EQ(values_of(again, n, ib), values_of(q, n, ib)) << n << " " << ib;
    }
  EXPECT_LT((torch::from_blob(back.data(), {5, 96}) - W).abs().max().item<double>(),
            W.abs().max().item<double>() * max_step_fraction * 1.01);
}

// Q8_0, one block by hand: max |w| = 2.54 → d = 0.02, q = round(w / 0.02); an all-zero block has d = 0.
TEST(QuantGemv, QuantisesAsGgmlQ8_0AndRoundTrips) {
  std::vector<float> w(64, 0.0f);
  w[0] = 2.54f, w[1] = -1.0f, w[2] = 0.011f, w[3] = 0.009f, w[31] = -2.54f;
  const auto m = QuantMatrix::quantize(QuantFormat::Q8_0, w.data(), 1, 64);
  EXPECT_EQ(m.bytes(), 68);
  EXPECT_EQ(scale_of(m, 0, 0), float(c10::Half(2.54f / 127.0f)));
  const auto q = values_of(m, 0, 0);
  const int expected[] = {127, -50, 1, 0};  // 0.011 / 0.02 = 0.55 → 1; 0.009 / 0.02 = 0.45 → 0
  for (int i = 0; i < 4; ++i) EXPECT_EQ(q[i], expected[i]) << i;
  EXPECT_EQ(q[31], -127);
  EXPECT_EQ(scale_of(m, 0, 1), 0.0f);
  EXPECT_EQ(values_of(m, 0, 1), std::vector<int>(32, 0));
  expect_round_trip(QuantFormat::Q8_0, 1.0 / 254);
  EXPECT_THROW(QuantMatrix::quantize(QuantFormat::Q8_0, w.data(), 2, 31), Error);
}

// Q4_0, one block by hand: the value of largest |w| is −1.6 → d = −1.6 / −8 = 0.2 and
// q = min(15, trunc(w / 0.2 + 8.5)): −1.6 → 0, 1.6 → 16 → 15, 0.3 → 10, 0.29 → 9, 0 → 8; an
// all-zero block has d = 0 and every q = 8. Dequantised: d·(q − 8).
TEST(QuantGemv, QuantisesAsGgmlQ4_0AndRoundTrips) {
  std::vector<float> w(64, 0.0f);
  w[0] = -1.6f, w[1] = 1.6f, w[2] = 0.3f, w[3] = 0.29f, w[16] = 0.3f, w[31] = -1.0f;
  const auto m = QuantMatrix::quantize(QuantFormat::Q4_0, w.data(), 1, 64);
  EXPECT_EQ(m.bytes(), 36);
  EXPECT_EQ(m.block_bytes(), 18);
  const float d = float(c10::Half(0.2f));
  EXPECT_EQ(scale_of(m, 0, 0), d);
  const auto q = values_of(m, 0, 0);
  const int expected[] = {0, 15, 10, 9, 8};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(q[i], expected[i]) << i;
  EXPECT_EQ(q[16], 10);
  EXPECT_EQ(q[31], 3);  // −1.0 / 0.2 + 8.5 = 3.5 → 3
  EXPECT_EQ(m.block(0, 0)[2] >> 4, 10) << "q_16 is the high nibble of byte 0";
  EXPECT_EQ(scale_of(m, 0, 1), 0.0f);
  EXPECT_EQ(values_of(m, 0, 1), std::vector<int>(32, 8));
  std::vector<float> row(64);
  m.dequantize_row(0, row.data());
  EXPECT_EQ(row[0], -8 * d);
  EXPECT_EQ(row[1], 7 * d);
  EXPECT_EQ(row[2], 2 * d);
  EXPECT_EQ(row[40], 0.0f);
  expect_round_trip(QuantFormat::Q4_0, 1.0 / 8);  // half a step of d = max/8 (the clamped top: one step)
  EXPECT_THROW(QuantMatrix::quantize(QuantFormat::Q4_0, w.data(), 1, 48), Error);
}

/// x [B, K] fp32 with each block of 32 rounded as quant_linear's Int8 activations are, in the same
/// fp32 steps (d = max|x|/127, q = round(x · (1/d))) but by torch's operators; returned in double.
torch::Tensor q8_round_trip(const torch::Tensor& x) {
  auto blocks = x.reshape({-1, 32});
  auto d = blocks.abs().amax(1, true) / 127.0f;
  auto v = blocks * torch::where(d > 0, 1.0f / d, torch::zeros_like(d));
  auto q = v.sign() * (v.abs() + 0.5f).floor();  // std::round: halves away from zero (torch's: to even)
  return (q.to(torch::kDouble) * d.to(torch::kDouble)).reshape(x.sizes());
}

/// The Tiles8 copy of a matrix (as CpuDecoder keeps it).
QuantMatrix tiled(QuantMatrix m) {
  std::shared_ptr<uint8_t> memory(new uint8_t[m.bytes()], std::default_delete<uint8_t[]>());
  m.move_to(memory.get(), memory, QuantLayout::Tiles8);
  return m;
}

// Tiles8 holds the same blocks: every row's blocks (in tiles and the N mod 8 after them) and its
// dequantised values are those of the Rows layout; tiles cannot go back to rows.
TEST(QuantGemv, Tiles8HoldsTheSameBlocks) {
  torch::manual_seed(5);
  auto W = torch::randn({19, 64});
  for (auto format : {QuantFormat::Q8_0, QuantFormat::Q4_0}) {
    SCOPED_TRACE(quant_format_name(format));
    const auto rows = QuantMatrix::quantize(format, W.data_ptr<float>(), 19, 64);
    const auto tiles = tiled(rows);
    const int64_t bb = rows.block_bytes();
    EXPECT_EQ(tiles.layout(), QuantLayout::Tiles8);
    EXPECT_EQ(tiles.tiled_rows(), 16);
    EXPECT_EQ(tiles.bytes(), rows.bytes());
    for (int64_t n = 0; n < 19; ++n) {
      for (int64_t ib = 0; ib < 2; ++ib) {
        std::vector<uint8_t> a(bb), b(bb);
        rows.copy_block(n, ib, a.data());
        tiles.copy_block(n, ib, b.data());
        ASSERT_EQ(a, b) << "row " << n << " block " << ib;
      }
      std::vector<float> a(64), b(64);
      rows.dequantize_row(n, a.data());
      tiles.dequantize_row(n, b.data());
      ASSERT_EQ(a, b) << "row " << n;
    }
    // By hand: tile 0, block column 1 (8 blocks further): row 3's scale at 2·3; chunk 2 (bytes
    // 8..11 of each row's values) at 16 + 32·2, row 3's 4 bytes at 4·3.
    const uint8_t* column = tiles.tile(0) + 8 * bb;
    EXPECT_EQ(column[2 * 3 + 1], rows.block(3, 1)[1]);
    EXPECT_EQ(column[16 + 32 * 2 + 4 * 3 + 1], rows.block(3, 1)[2 + 8 + 1]);
    EXPECT_EQ(tiles.block(17, 1), tiles.tile(0) + (17 * 2 + 1) * bb);  // the rest in rows, after the tiles
    EXPECT_THROW(tiles.block(15, 0), Error);
    QuantMatrix back = tiles;
    std::vector<uint8_t> elsewhere(tiles.bytes());
    EXPECT_THROW(back.move_to(elsewhere.data(), nullptr, QuantLayout::Rows), Error);
    std::vector<float> y(19);
    EXPECT_THROW(quant_linear(W.data_ptr<float>(), 1, tiles, y.data(), Q8Activations::Fp32), Error);
  }
}

// Shape classes: one block, several with N odd, N split across threads, B = 1..9 (the groups of
// four and two and every remainder), both formats, both activation kinds, and both formats in
// tiles of 8 rows (N = 3: no tile; 33, 65: a remainder row).
TEST(QuantGemv, EqualsTheMatmulOfTheDequantisedWeightsAndARowIsTheSameInAnyBatch) {
  for (auto [format, layout] : {std::pair{QuantFormat::Q8_0, QuantLayout::Rows},
                                {QuantFormat::Q4_0, QuantLayout::Rows},
                                {QuantFormat::Q8_0, QuantLayout::Tiles8},
                                {QuantFormat::Q4_0, QuantLayout::Tiles8}})
    for (auto [K, N] : {std::pair<int64_t, int64_t>{32, 3}, {96, 33}, {576, 1536}, {2048, 65}}) {
      torch::manual_seed(K + N);
      auto W = torch::randn({N, K});
      auto q = QuantMatrix::quantize(format, W.data_ptr<float>(), N, K);
      if (layout == QuantLayout::Tiles8) q = tiled(q);
      auto Wd = torch::empty({N, K});
      for (int64_t n = 0; n < N; ++n) q.dequantize_row(n, Wd.data_ptr<float>() + n * K);
      auto x = torch::randn({9, K});
      for (auto act : {Q8Activations::Fp32, Q8Activations::Int8}) {
        if (layout == QuantLayout::Tiles8 && act == Q8Activations::Fp32) continue;
        auto xin = act == Q8Activations::Int8 ? q8_round_trip(x) : x;
        for (int64_t B = 1; B <= 9; ++B) {
          const std::string where = std::string(quant_format_name(format)) +
                                    (layout == QuantLayout::Tiles8 ? " tiles8" : "") + " K " + std::to_string(K) +
                                    " N " + std::to_string(N) + " B " + std::to_string(B) +
                                    (act == Q8Activations::Int8 ? " int8" : " fp32");
          auto y = torch::empty({B, N});
          quant_linear(x.data_ptr<float>(), B, q, y.data_ptr<float>(), act);
          auto expected = torch::mm(xin.narrow(0, 0, B).to(torch::kDouble), Wd.to(torch::kDouble).t());
          const double tol = 1e-5 * std::sqrt(double(K)) * 4;
          EXPECT_LT((y.to(torch::kDouble) - expected).abs().max().item<double>(), tol) << where;
          for (int64_t b = 0; b < B; ++b) {
            auto row = x[b].clone();
            auto alone = torch::empty({1, N});
            quant_linear(row.data_ptr<float>(), 1, q, alone.data_ptr<float>(), act);
            ASSERT_TRUE(torch::equal(alone[0], y[b])) << where << " row " << b;
          }
        }
      }
    }
}

/// An [N, K] matrix of `format` in the Rows layout and its values [N, K]: block i (row-major) is
/// block i mod 3 of tests/fixtures/gguf/k_quant_blocks.safetensors (random bits, finite scales)
/// with gguf-py's dequantisation of it as the values, or (`from_fixture` false) random bytes with
/// fp16 scales of N(0, 0.05) at the format's scale offsets, the values dequantize_row's.
std::pair<QuantMatrix, torch::Tensor> blocks_matrix(QuantFormat format, int64_t N, int64_t K, bool from_fixture) {
  const auto probe = QuantMatrix::from_blocks(format, 1, quant_block_values(format), nullptr, nullptr);
  const int64_t bb = probe.block_bytes(), values = probe.block_values(), blocks = N * K / values;
  std::shared_ptr<uint8_t> memory(new uint8_t[blocks * bb], std::default_delete<uint8_t[]>());
  auto W = torch::empty({N, K});
  if (from_fixture) {
    const auto file = std::filesystem::path(FBT_SOURCE_DIR) / "tests/fixtures/gguf/k_quant_blocks.safetensors";
    torch::Tensor bytes, expected;
    for (const auto& [key, t] : load_foreign_tensors(file.string()).tensors) {
      if (key == std::string(quant_format_name(format)) + ".bytes") bytes = t;
      if (key == std::string(quant_format_name(format)) + ".values") expected = t;
    }
    EXPECT_TRUE(bytes.defined() && expected.defined() && expected.numel() == 3 * values);
    for (int64_t i = 0; i < blocks; ++i) {
      std::memcpy(memory.get() + i * bb, bytes.data_ptr<uint8_t>() + (i % 3) * bb, size_t(bb));
      std::memcpy(W.data_ptr<float>() + i * values, expected.data_ptr<float>() + (i % 3) * values,
                  sizeof(float) * size_t(values));
    }
    return {QuantMatrix::from_blocks(format, N, K, memory.get(), memory), W};
  }
  std::mt19937 rng(uint32_t(N * 7 + K));
  std::normal_distribution<float> scale(0.0f, 0.05f);
  for (int64_t i = 0; i < blocks * bb; ++i) memory.get()[i] = uint8_t(rng());
  const std::vector<int64_t> offsets = format == QuantFormat::Q4_K   ? std::vector<int64_t>{0, 2}
                                       : format == QuantFormat::Q6_K ? std::vector<int64_t>{208}
                                                                     : std::vector<int64_t>{0};
  for (int64_t i = 0; i < blocks; ++i)
    for (int64_t at : offsets) {
      const uint16_t bits = c10::Half(scale(rng)).x;
      std::memcpy(memory.get() + i * bb + at, &bits, 2);
    }
  auto m = QuantMatrix::from_blocks(format, N, K, memory.get(), memory);
  for (int64_t n = 0; n < N; ++n) m.dequantize_row(n, W.data_ptr<float>() + n * K);
  return {m, W};
}

// GGUF's other formats read in place: Q5_0 (with Q4_0's kernels) and the K super-blocks, against
// the double product of gguf-py's values (and, for random blocks, of fbt's dequantisation), in
// both activation kinds, with N odd (tiles of four rows and single rows) and B = 1..6; a row is
// the same bits alone or in a batch, and written at any output stride.
TEST(QuantGemv, GgufFormatsEqualTheProductOfTheirValuesAndARowIsTheSameInAnyBatch) {
  for (auto [format, layout] : {std::pair{QuantFormat::Q5_0, QuantLayout::Rows},
                                {QuantFormat::Q5_0, QuantLayout::Tiles8},
                                {QuantFormat::Q4_K, QuantLayout::Rows},
                                {QuantFormat::Q6_K, QuantLayout::Rows}})
    for (bool from_fixture : {true, false}) {
      const int64_t N = 13, K = format == QuantFormat::Q5_0 ? 96 : 768;  // Tiles8: one tile and 5 rows
      auto [q, W] = blocks_matrix(format, N, K, from_fixture);
      if (layout == QuantLayout::Tiles8) q = tiled(q);
      torch::manual_seed(K);
      auto x = torch::randn({6, K});
      for (auto act : {Q8Activations::Int8, Q8Activations::Fp32}) {
        if (layout == QuantLayout::Tiles8 && act == Q8Activations::Fp32) continue;
        auto xin = act == Q8Activations::Int8 ? q8_round_trip(x) : x.to(torch::kDouble);
        const auto Wd = W.to(torch::kDouble);
        for (int64_t B = 1; B <= 6; ++B) {
          const std::string where = std::string(quant_format_name(format)) +
                                    (layout == QuantLayout::Tiles8 ? " tiles8" : "") +
                                    (from_fixture ? " gguf-py" : " random") + " B " + std::to_string(B) +
                                    (act == Q8Activations::Int8 ? " int8" : " fp32");
          const int64_t ldy = N + 3;  // y's rows apart: the columns of a wider output
          auto y = torch::full({B, ldy}, -7.0f);
          quant_linear(x.data_ptr<float>(), B, q, y.data_ptr<float>(), act, ldy);
          EXPECT_TRUE(torch::equal(y.narrow(1, N, 3), torch::full({B, 3}, -7.0f))) << where;
          auto expected = torch::mm(xin.narrow(0, 0, B), Wd.t());
          auto magnitude = torch::mm(xin.narrow(0, 0, B).abs(), Wd.abs().t());  // Σ|x·w|: the rounding's scale
          const auto err = (y.narrow(1, 0, N).to(torch::kDouble) - expected).abs() - 1e-5 * magnitude;
          EXPECT_LE(err.max().item<double>(), 0.0) << where;
          for (int64_t b = 0; b < B; ++b) {
            auto row = x[b].clone();
            auto alone = torch::empty({1, N});
            quant_linear(row.data_ptr<float>(), 1, q, alone.data_ptr<float>(), act);
            ASSERT_TRUE(torch::equal(alone[0], y[b].narrow(0, 0, N))) << where << " row " << b;
          }
        }
      }
    }
}

// The K formats: rows whole super-blocks, no tiles of 8 rows, not quantised by fbt; names round-trip.
TEST(QuantGemv, KFormatsAreReadNotWritten) {
  std::vector<uint8_t> blocks(210 * 2);
  EXPECT_THROW(QuantMatrix::from_blocks(QuantFormat::Q6_K, 2, 96, blocks.data(), nullptr), Error);
  EXPECT_THROW(QuantMatrix::from_blocks(QuantFormat::Q4_K, 1, 256, blocks.data(), nullptr, QuantLayout::Tiles8), Error);
  auto m = QuantMatrix::from_blocks(QuantFormat::Q6_K, 2, 256, blocks.data(), nullptr);
  EXPECT_EQ(m.bytes(), 420);
  std::vector<uint8_t> elsewhere(420);
  EXPECT_THROW(m.move_to(elsewhere.data(), nullptr, QuantLayout::Tiles8), Error);
  std::vector<float> w(256, 0.5f);
  EXPECT_THROW(QuantMatrix::quantize(QuantFormat::Q4_K, w.data(), 1, 256), Error);
  for (auto f : {QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q5_0, QuantFormat::Q4_K, QuantFormat::Q6_K})
    EXPECT_EQ(quant_format_named(quant_format_name(f), "test"), f);
  EXPECT_THROW(quant_format_named("Q5_K", "test"), Error);
}

// The kernels this CPU would not run: the product tests above in a child process whose dispatch
// FBT_CPU caps at AVX2 (the K formats' ymm kernels, Q8_0/Q4_0/Q5_0 by maddubs), then at portable
// code (the scalar and dequantising paths).
TEST(QuantGemv, EveryInstructionSetPassesTheProductTests) {
  testing::TempDir tmp;
  for (const std::string level : {"avx2", "portable"}) {
    std::vector<std::string> env{"FBT_CPU=" + level};
    for (char** e = environ; *e; ++e)
      if (std::string(*e).rfind("FBT_CPU=", 0) != 0) env.emplace_back(*e);
    const auto log = tmp.path / (level + ".log");
    const pid_t pid = testing::spawn_logged(
        {"/proc/self/exe", "--gtest_filter=QuantGemv.EqualsTheMatmul*:QuantGemv.GgufFormats*"}, log, env);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    std::stringstream text;
    text << std::ifstream(log).rdbuf();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "FBT_CPU=" << level << ":\n" << text.str();
    EXPECT_NE(text.str().find("[  PASSED  ] 2 tests"), std::string::npos) << text.str();
  }
}

}  // namespace
}  // namespace fbt
