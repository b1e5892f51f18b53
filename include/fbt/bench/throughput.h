// Throughput measurements behind `fbt bench`: training steps, prefill, decode, matmul peak.
//
// Every measurement runs `warmup` untimed repetitions, then `reps` timed ones, and reports the
// median, minimum and maximum. Time is wall-clock (std::chrono::steady_clock) with a device
// synchronisation before each reading on CUDA.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/types.h>

#include "fbt/infer/cpu_decoder.h"
#include "fbt/infer/decode_backend.h"
#include "fbt/infer/decode.h"
#include "fbt/model/config.h"
#include "fbt/model/model.h"
#include "fbt/train/train_config.h"

namespace fbt {

/// Median, minimum and maximum of a set of measurements.
struct Stats {
  double median = 0, min = 0, max = 0;
  /// Throws fbt::Error for an empty set.
  static Stats of(std::vector<double> values);
  /// value ↦ numerator / value, so seconds become rates (the median of the rates is
  /// numerator / median seconds; min and max swap).
  Stats inverse(double numerator) const;
};

/// Runs fn() `warmup` times, then `reps` times timed; returns the seconds of each timed run.
/// Synchronises `device` (CUDA) before starting and before stopping each clock.
std::vector<double> time_repeated(const torch::Device& device, int64_t warmup, int64_t reps,
                                  const std::function<void()>& fn);

/// Matmul weights per token of one pass (the "N" of 6·N·tokens): per layer D·H·Dh (q) +
/// 2·D·Hkv·Dh (k, v) + H·Dh·D (o) + D·H (gate) + 3·D·F (SwiGLU), times L, plus V·D for the
/// tied head; with `fused` also the fusion's W_U and W_G (2·D²). Embedding lookups and norms
/// are not matmuls and are not counted.
int64_t matmul_weights_per_token(const ModelConfig& config, bool fused);

/// Model FLOPs of one K-pass training step per token of the batch (forward + backward = 3 ×
/// forward), following PaLM (Chowdhery et al. 2022, App. B): per pass 6·N + 12·Σ_l D·T_l,
/// T_l = min(T, window) for sliding-window layers and T otherwise (attention scores and
/// values, not halved for the causal mask). Pass 1 is plain, passes ≥ 2 also run the fusion
/// (matmul_weights_per_token(config, true)).
double training_flops_per_token(const ModelConfig& config, int64_t seq_len, int64_t passes);

/// Measured matmul peak of this device in FLOP/s: the best of `reps` timed n×n·n×n products
/// (2n³ FLOPs each) in `dtype` (fp32 on the CPU, bf16 on CUDA), using torch's current number
/// of CPU threads. This is the ceiling MFU is reported against.
double measure_matmul_peak(const torch::Device& device, torch::ScalarType dtype, int64_t n, int64_t reps);

/// Timing plus the peak memory of one measurement (memory_stats.h; -1 when unavailable).
struct BenchResult {
  Stats seconds;       ///< per repetition
  Stats tokens_per_s;  ///< tokens processed per repetition / seconds
  int64_t peak_memory_bytes = -1;
  int64_t anonymous_bytes = -1;  ///< decode on the CPU: anonymous RSS at the end of the untimed run
};

/// One training step repeated: forward_passes with `passes` passes (jitter and mixin as in
/// `train`), backward, TrainingOptimizer::step(1, 1) and zero_grad, on random tokens [batch,
/// seq] drawn with `seed`. tokens/s counts batch·seq per step (not ×K). The model is trained
/// in place. Throws fbt::Error if seq exceeds the model context.
BenchResult bench_train_step(FBT& model, const TrainConfig& train, int64_t batch, int64_t seq, int64_t passes,
                             int64_t warmup, int64_t reps, uint64_t seed);

/// Prefill of random prompts [batch, context] into a preallocated KVCache with `decoding`'s
/// passes (Standard and Soft: one plain pass; Fused(k): k + 1), under InferenceMode, by `backend`
/// (decode_backend.h: the CPU decoder, as fbt generate runs it, or the generic prefill).
/// tokens/s counts batch·context per prefill.
BenchResult bench_prefill(FBT& model, const Decoding& decoding, int64_t batch, int64_t context, int64_t warmup,
                          int64_t reps, uint64_t seed, DecodeBackend& backend);

/// Standard and Soft decoding measured together, for their per-token overhead (SPEC §7).
struct DecodeComparison {
  BenchResult standard, soft;
  Stats soft_overhead;  ///< over the repetitions: the median over their step pairs of soft / standard seconds − 1
  /// The CPU decoder's matrix weights read per step (CpuDecoder::matmul_weight_bytes) without and
  /// with the fusion; -1 for the other decoders.
  int64_t standard_weight_bytes = -1, soft_weight_bytes = -1;
  int64_t kv_cache_bytes = 0;  ///< keys and values of the KV cache the steps wrote (its tensors' bytes)
};

/// Greedy decoding of `new_tokens` tokens after a plain prefill of `context` random tokens per
/// row, batch rows in lockstep, in Standard and in Soft mode, under InferenceMode; only the
/// decode steps are timed, each to its end (CUDA synchronised). The two modes alternate step by
/// step, each on its own KV cache (which one goes first alternates too), so drift of a shared
/// machine's speed, even within a repetition, cancels out of the soft overhead: per repetition,
/// the median over its step pairs of soft / standard step seconds − 1. Peak memory (and, on the
/// CPU, the anonymous RSS at its end) is measured per mode in one extra, untimed run that decodes
/// that mode alone on one cache.
/// `decoder` picks the step: decode_step (Generic), CpuDecoder (Cpu: cpu_decoder.h, what `fbt
/// generate` uses for fp32 CPU models) or GraphDecoder replaying a CUDA graph (Graph:
/// graph_decoder.h; one per mode and cache, captured in the untimed first run; a cache has exactly
/// context + new_tokens slots, all of which its step attends over). tokens/s counts
/// batch·new_tokens. `cpu_options` configure the Cpu step (weights fp32 or int8). Throws
/// fbt::Error if context + new_tokens exceeds the model context, or for Graph off CUDA.
enum class BenchDecoder { Generic, Cpu, Graph };
DecodeComparison bench_decode_modes(FBT& model, BenchDecoder decoder, int64_t batch, int64_t context,
                                    int64_t new_tokens, int64_t warmup, int64_t reps, uint64_t seed,
                                    const CpuDecoderOptions& cpu_options = {});

}  // namespace fbt
