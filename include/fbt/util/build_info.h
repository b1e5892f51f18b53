// Build provenance recorded in run logs and checkpoints.
#pragma once
#include <string>

namespace fbt {

/// Short git SHA of the source tree at configure time ("unknown" outside git).
std::string git_sha();
/// libtorch version string, e.g. "1.13.1".
std::string torch_version();

}  // namespace fbt
