// GET /metrics of `fbt serve`: request counters and the engine's statistics in Prometheus' text
// exposition format (version 0.0.4: "# HELP", "# TYPE", then "name{labels} value" lines).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "fbt/infer/engine.h"

namespace fbt {

/// HTTP requests to the API endpoints, by (path, status code). Thread-safe.
class RequestCounters {
 public:
  void count(const std::string& path, int status);
  std::map<std::pair<std::string, int>, int64_t> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
};

/// The exposition: fbt_requests_total{endpoint, code} (counter), fbt_prompt_tokens_total and
/// fbt_generated_tokens_total (counters, EngineStats' prompt_tokens / generated_tokens),
/// fbt_queue_length and fbt_active_sequences (gauges), and fbt_generated_tokens_per_second (gauge:
/// generated tokens per second of the engine's busy time since start; 0 before any).
std::string prometheus_metrics(const EngineStats& stats,
                               const std::map<std::pair<std::string, int>, int64_t>& requests);

}  // namespace fbt
