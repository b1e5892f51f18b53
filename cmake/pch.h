// Precompiled header shared by the library, the CLI and the tests: libtorch and JSON.
#pragma once
#include <torch/torch.h>
#include <nlohmann/json.hpp>
