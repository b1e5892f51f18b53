// Data-parallel training on PyTorch's c10d: torchrun's environment, TCPStore rendezvous, a
// Gloo (CPU) or NCCL (CUDA) process group, and NorMuon's orthogonalisation shared across ranks.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

namespace fbt {

/// Run-time settings of a data-parallel run (`fbt train` flags; none of them changes results).
struct DistributedOptions {
  std::string backend = "auto";       ///< "auto" (NCCL for CUDA, Gloo for CPU), "gloo" or "nccl"
  int64_t timeout_s = 300;            ///< c10d timeout: rendezvous and every collective, seconds
  double bucket_mb = 4;               ///< gradient all-reduce bucket size, MiB
  std::string normuon = "replicate";  ///< "replicate": every rank orthogonalises every matrix;
                                      ///< "shard": each matrix on one rank, results broadcast
};

/// This process's place in a torchrun-style launch.
struct DistributedEnv {
  int64_t rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;  ///< MASTER_ADDR
  int64_t master_port = 0;  ///< MASTER_PORT
  bool active() const { return world_size > 1; }
};

/// Reads WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (torchrun's variables).
/// WORLD_SIZE unset or 1 means a single process (the others are then ignored). Throws
/// fbt::Error naming the variable if one is missing, not an integer, or out of range.
DistributedEnv distributed_env_from_environment();

/// A c10d process group over every rank of the launch: TCPStore rendezvous at
/// MASTER_ADDR:MASTER_PORT (rank 0 hosts the store), then ProcessGroupGloo or ProcessGroupNCCL.
/// Every collective blocks at most `timeout_s`; a dead peer makes it throw (c10::Error or
/// std::runtime_error from c10d) instead of hanging.
class Communicator {
 public:
  /// `device` is where collective buffers live (CPU tensors need Gloo, CUDA tensors NCCL).
  /// Throws fbt::Error for an unknown --dist-backend, NCCL requested in a build without it or
  /// for CPU tensors, Gloo for CUDA tensors; c10d errors if the rendezvous times out.
  Communicator(const DistributedEnv& env, const DistributedOptions& options, torch::Device device);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  const std::string& backend_name() const { return backend_name_; }
  torch::Device device() const { return device_; }

  /// An asynchronous in-place sum of `t` (on device()) over ranks; wait() on the result.
  class Pending;
  std::unique_ptr<Pending> allreduce_sum_async(torch::Tensor t);
  /// Element-wise sum over ranks of `values` (a few scalars: losses, flags), blocking.
  std::vector<double> allreduce_sum(const std::vector<double>& values);
  /// Overwrites every rank's `tensors` (on device()) with those of rank `root`, blocking.
  void broadcast(std::vector<torch::Tensor>& tensors, int64_t root);
  void barrier();
  /// Rank `root` receives every rank's `value` (in rank order); others get an empty vector.
  /// Goes through the TCPStore under `key` (unique per call: e.g. "generators/<step>").
  std::vector<std::string> gather_strings(const std::string& key, const std::string& value, int64_t root = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t rank_ = 0, size_ = 1;
  std::string backend_name_;
  torch::Device device_;
};

/// A collective in flight.
class Communicator::Pending {
 public:
  virtual ~Pending() = default;
  /// Blocks until done; rethrows c10d's error (peer died, timeout).
  virtual void wait() = 0;
};

}  // namespace fbt
