// fbt_logits: a checkpoint's standard-mode logits of given token ids, for the real-model checks
// against transformers (bench/check_smollm2.py). Not part of `fbt`; built on demand
// (cmake --build build --target fbt_logits).
//   fbt_logits CHECKPOINT TOKENS.safetensors OUT.safetensors
// TOKENS holds "tokens" [B,T] int64; OUT gets "logits" [B,T,V] float32 (CPU, fp32).
#include <iostream>

#include "fbt/io/checkpoint.h"
#include "fbt/io/run_dir.h"
#include "fbt/io/safetensors.h"
#include "fbt/util/error.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: fbt_logits CHECKPOINT TOKENS.safetensors OUT.safetensors\n";
    return 2;
  }
  try {
    auto model = fbt::load_model(fbt::resolve_checkpoint(argv[1]));
    model->eval();
    torch::Tensor tokens;
    for (const auto& [name, t] : fbt::load_foreign_tensors(argv[2]).tensors)
      if (name == "tokens") tokens = t.to(torch::kLong);
    if (!tokens.defined()) throw fbt::Error(std::string("'") + argv[2] + "': no tensor 'tokens'");
    torch::NoGradGuard no_grad;
    const auto logits = model->forward(tokens).to(torch::kFloat).contiguous();  // [B,T,V]
    fbt::save_tensors(argv[3], {{"logits", logits}}, nlohmann::json::object());
  } catch (const fbt::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
