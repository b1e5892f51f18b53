// GraphDecoder: fixed-shape decode steps, captured into a CUDA graph and replayed per token.
#include "fbt/infer/graph_decoder.h"

#include <string>

#ifdef FBT_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "fbt/util/error.h"

namespace fbt {

#ifdef FBT_WITH_CUDA
struct GraphDecoder::Graph {
  at::cuda::CUDAGraph graph;
};
#else
struct GraphDecoder::Graph {};
#endif

GraphDecoder::GraphDecoder(FBT& model, DecodeMode mode, KVCache& cache, bool use_graph)
    : model_(model), mode_(mode), cache_(cache), use_graph_(use_graph) {
  const auto device = cache.slot_pos.device();
  if (use_graph && !device.is_cuda())
    throw Error("CUDA-graph decoding needs the model and KV cache on a CUDA device (they are on " + device.str() + ")");
#ifndef FBT_WITH_CUDA
  if (use_graph)
    throw Error("CUDA-graph decoding: this build of fbt has no CUDA (build against PyTorch 2.x with CUDA)");
#endif
  tokens_ = torch::zeros({cache.batch()}, torch::dtype(torch::kLong).device(device));
  write_slot_ = torch::zeros({1}, torch::dtype(torch::kLong).device(device));
}

GraphDecoder::~GraphDecoder() = default;

bool GraphDecoder::captured() const { return graph_ != nullptr; }

torch::Tensor GraphDecoder::run_step() {
  cache_.write_slot = write_slot_;
  auto logits = decode_step(model_, tokens_, mode_, cache_);  // [B,V]
  cache_.write_slot = torch::Tensor();
  return logits;
}

void GraphDecoder::capture() {
#ifdef FBT_WITH_CUDA
  // Capture on a side stream (the default stream cannot be captured), after every queued
  // kernel has finished; the captured kernels read tokens_, write_slot_ and the cache's
  // tensors, and write logits_ and the cache, all at fixed addresses.
  c10::cuda::device_synchronize();
  auto graph = std::make_unique<Graph>();
  {
    c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, tokens_.device().index()));
    graph->graph.capture_begin();
    logits_ = run_step();
    graph->graph.capture_end();
  }
  c10::cuda::device_synchronize();
  graph_ = std::move(graph);
#endif
}

torch::Tensor GraphDecoder::step(const torch::Tensor& tokens) {
  const auto flat = tokens.reshape({-1});
  if (flat.size(0) != cache_.batch())
    throw Error("decode step: " + std::to_string(flat.size(0)) + " tokens for a KV cache of " +
                std::to_string(cache_.batch()) + " rows");
  cache_.check_room(1);
  model_->check_token_ids(flat);  // the captured step cannot: it reads no device value on the host
  tokens_.copy_(flat);
  write_slot_.fill_(cache_.length);
  torch::Tensor logits;
#ifdef FBT_WITH_CUDA
  if (graph_) {
    graph_->graph.replay();
    logits = logits_;
  }
#endif
  if (!logits.defined()) {
    logits = run_step();  // eager; on CUDA with use_graph also the warm-up before the capture
    if (use_graph_) capture();
  }
  ++cache_.length;
  return logits;
}

}  // namespace fbt
