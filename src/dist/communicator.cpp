// c10d process group for data-parallel training (TCPStore + Gloo/NCCL) and sharded NorMuon
// orthogonalisation. Version notes: libtorch 1.13's process groups derive from
// c10d::ProcessGroup, 2.x's from c10d::Backend; both keep the constructors used here.
#include "fbt/dist/communicator.h"

#include <cstdlib>
#include <optional>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#ifdef FBT_WITH_GLOO
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // ProcessGroupGloo.hpp is empty without it; libtorch_cpu has Gloo built in
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef FBT_WITH_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "fbt/util/error.h"

namespace fbt {
namespace {

#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

/// Integer environment variable `name`, or `fallback` when unset; throws fbt::Error naming it.
int64_t env_int(const char* name, std::optional<int64_t> fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    if (fallback) return *fallback;
    throw Error(std::string("distributed launch: environment variable ") + name +
                " is not set (WORLD_SIZE > 1 needs RANK, MASTER_ADDR and MASTER_PORT; see scripts/launch.sh)");
  }
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (*end != '\0') throw Error(std::string("distributed launch: ") + name + "=" + v + " is not an integer");
  return x;
}

}  // namespace

DistributedEnv distributed_env_from_environment() {
  DistributedEnv e;
  e.world_size = env_int("WORLD_SIZE", 1);
  if (e.world_size < 1) throw Error("distributed launch: WORLD_SIZE must be >= 1, got " + std::to_string(e.world_size));
  if (e.world_size == 1) return e;
  e.rank = env_int("RANK", std::nullopt);
  if (e.rank < 0 || e.rank >= e.world_size)
    throw Error("distributed launch: RANK=" + std::to_string(e.rank) +
                " is outside [0, WORLD_SIZE=" + std::to_string(e.world_size) + ")");
  e.local_rank = env_int("LOCAL_RANK", e.rank);
  const char* addr = std::getenv("MASTER_ADDR");
  if (!addr || !*addr) throw Error("distributed launch: environment variable MASTER_ADDR is not set");
  e.master_addr = addr;
  e.master_port = env_int("MASTER_PORT", std::nullopt);
  if (e.master_port < 1 || e.master_port > 65535)
    throw Error("distributed launch: MASTER_PORT=" + std::to_string(e.master_port) + " is not a TCP port");
  return e;
}

struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> group;
  std::chrono::milliseconds timeout;
};

namespace {
struct PendingWork : Communicator::Pending {
  c10::intrusive_ptr<c10d::Work> work;
  explicit PendingWork(c10::intrusive_ptr<c10d::Work> w) : work(std::move(w)) {}
  void wait() override { work->wait(); }
};
}  // namespace

Communicator::Communicator(const DistributedEnv& env, const DistributedOptions& o, torch::Device device)
    : impl_(std::make_unique<Impl>()), rank_(env.rank), size_(env.world_size), device_(device) {
  backend_name_ = o.backend == "auto" ? (device.is_cuda() ? "nccl" : "gloo") : o.backend;
  if (backend_name_ != "gloo" && backend_name_ != "nccl")
    throw Error("--dist-backend " + o.backend + ": expected auto, gloo or nccl");
  if ((backend_name_ == "nccl") != device.is_cuda())
    throw Error("--dist-backend " + backend_name_ + " does not fit --device " + device.str() +
                " (gloo reduces CPU tensors, nccl CUDA tensors)");
  impl_->timeout = std::chrono::milliseconds(o.timeout_s * 1000);
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = static_cast<size_t>(env.world_size);
  so.waitWorkers = true;
  so.timeout = impl_->timeout;
  impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  if (backend_name_ == "gloo") {
#ifdef FBT_WITH_GLOO
    auto go = c10d::ProcessGroupGloo::Options::create(impl_->timeout);
    go->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, int(rank_), int(size_), go);
#else
    throw Error("--dist-backend gloo: this build of fbt has no Gloo (gloo headers not found: install libgloo-dev)");
#endif
  } else {
#ifdef FBT_WITH_NCCL
    auto no = c10d::ProcessGroupNCCL::Options::create();
    no->timeout = impl_->timeout;
    impl_->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, int(rank_), int(size_), no);
#else
    throw Error("--dist-backend nccl: this build of fbt has no NCCL (libtorch without CUDA, or nccl.h not found)");
#endif
  }
}

Communicator::~Communicator() = default;

std::unique_ptr<Communicator::Pending> Communicator::allreduce_sum_async(torch::Tensor t) {
  std::vector<torch::Tensor> ts{std::move(t)};
  c10d::AllreduceOptions ao;
  ao.reduceOp = c10d::ReduceOp::SUM;
  ao.timeout = impl_->timeout;
  return std::make_unique<PendingWork>(impl_->group->allreduce(ts, ao));
}

std::vector<double> Communicator::allreduce_sum(const std::vector<double>& values) {
  auto t = torch::tensor(values, torch::kDouble).to(device_);  // [n]
  allreduce_sum_async(t)->wait();
  t = t.cpu();
  return {t.data_ptr<double>(), t.data_ptr<double>() + t.numel()};
}

void Communicator::broadcast(std::vector<torch::Tensor>& tensors, int64_t root) {
  if (tensors.empty()) return;
  std::vector<torch::Tensor> flat_parts;
  for (const auto& t : tensors) flat_parts.push_back(t.detach().reshape(-1));
  std::vector<torch::Tensor> flat{torch::cat(flat_parts)};  // [Σ numel]; Gloo takes one tensor per call
  c10d::BroadcastOptions bo;
  bo.rootRank = root;
  bo.timeout = impl_->timeout;
  impl_->group->broadcast(flat, bo)->wait();
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& t : tensors) {
    t.copy_(flat[0].narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

void Communicator::barrier() {
  c10d::BarrierOptions bo;
  bo.timeout = impl_->timeout;
  impl_->group->barrier(bo)->wait();
}

std::vector<std::string> Communicator::gather_strings(const std::string& key, const std::string& value, int64_t root) {
  const auto slot = [&](int64_t r) { return "fbt/" + key + "/" + std::to_string(r); };
  impl_->store->set(slot(rank_), std::vector<uint8_t>(value.begin(), value.end()));
  if (rank_ != root) return {};
  std::vector<std::string> out;
  for (int64_t r = 0; r < size_; ++r) {
    const auto bytes = impl_->store->get(slot(r));  // blocks up to the store timeout
    out.emplace_back(bytes.begin(), bytes.end());
    impl_->store->deleteKey(slot(r));
  }
  return out;
}

}  // namespace fbt
