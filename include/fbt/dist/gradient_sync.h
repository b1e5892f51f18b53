// Bucketed gradient all-reduce for data-parallel training, launched from autograd hooks so
// communication overlaps the rest of the backward pass (what PyTorch DDP's Reducer does).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <torch/types.h>

#include "fbt/dist/communicator.h"

namespace torch::autograd {
struct Node;
}

namespace fbt {

/// Sums parameter gradients over the ranks of `comm`, bucket by bucket.
///
/// Buckets: the parameters in reverse registration order (roughly the order backward produces
/// their gradients), cut every `bucket_bytes`. With `overlap`, a post-hook on each parameter's
/// gradient accumulator marks it ready during an armed backward; a bucket's all-reduce starts
/// as soon as it and every earlier bucket are complete, so buckets go out in the same order on
/// every rank. Without `overlap` (needed with activation checkpointing, whose inner backward
/// accumulates a parameter more than once) everything is reduced in finish().
///
/// Undefined gradients: a parameter no micro-batch used (the fusion when K = 1) contributes
/// zeros to its bucket and keeps an undefined grad afterwards, so the optimiser skips it as in
/// a single process. This needs every rank to use the same parameters in a step (same K).
/// Each rank scales its loss by 1 / (micro-batches over all ranks), so the sum is the average.
class GradientSync {
 public:
  /// Throws fbt::Error if the parameters differ in dtype or device.
  GradientSync(Communicator& comm, std::vector<torch::Tensor> params, int64_t bucket_bytes, bool overlap);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  /// The next backward is the step's last micro-batch: its hooks launch buckets.
  void arm();
  /// Launches the buckets not yet launched (in order), waits for all, writes the sums into
  /// the defined grads and disarms. Returns the seconds spent blocked here (communication
  /// that the backward did not hide). Rethrows c10d's error if a peer died or timed out.
  double finish();

  int64_t bucket_count() const { return int64_t(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    std::vector<int64_t> offsets;
    torch::Tensor flat;          // [Σ numel], on the parameters' device
    std::vector<bool> had_grad;  // per member, at launch
    int64_t pending = 0;         // members not yet ready in this backward
    std::unique_ptr<Communicator::Pending> work;
  };
  void on_ready(size_t param);  // called from the autograd hook
  void launch_ready_prefix();   // launches complete buckets in order (caller holds mutex_)
  void launch(Bucket& b);

  Communicator& comm_;
  std::vector<torch::Tensor> params_;
  std::vector<size_t> bucket_of_;  // param index -> bucket index
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: they hold the hooks
  std::vector<uintptr_t> hook_keys_;
  std::mutex mutex_;
  bool armed_ = false;
  size_t next_launch_ = 0;  // buckets [0, next_launch_) are in flight
};

}  // namespace fbt
