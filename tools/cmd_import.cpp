// `fbt import --from hf DIR | --from gguf FILE --out RUNDIR`: a Hugging Face or GGUF
// Llama/Qwen2/Qwen3 model as an fbt run.
#include <iostream>
#include <memory>

#include "commands.h"
#include "fbt/io/gguf_import.h"
#include "fbt/io/hf_import.h"
#include "fbt/io/run_dir.h"

namespace fbt::cli {
namespace {

struct ImportArgs {
  std::string from = "hf", source, out, fusion = "residual";
  HfImportOptions options;
};

void run_import(const ImportArgs& a) {
  check_new_directory(a.out);  // before the work, not after it
  auto o = a.options;
  o.fusion = enum_from_string<Fusion>(a.fusion, "--fusion");
  // Everything is read and checked before --out is touched.
  const auto imported = a.from == "gguf" ? import_gguf_model(a.source, o) : import_hf_model(a.source, o);
  write_imported_run(imported, a.out);
  const auto& c = imported.model->config();
  const auto kind = imported.source.value("model_type", imported.source.value("architecture", std::string()));
  std::cout << "imported " << kind << " model " << a.source << " (" << c.parameter_count()
            << " parameters with the fusion; L=" << c.n_layers << " D=" << c.d_model << " H=" << c.n_heads
            << " Hkv=" << c.n_kv_heads << " V=" << c.vocab_size << " context " << c.context << ") -> " << a.out << "/"
            << step_dir_name(0) << "\n"
            << "model config: " << c.to_json().dump() << "\n";
  if (imported.source.contains("tensor_types"))
    std::cout << "tensor types: " << imported.source.at("tensor_types").dump() << "\n";
  const auto& decoder = imported.hf_tokenizer.value("decoder", nlohmann::json());
  const bool byte_level = decoder.is_object() && decoder.value("type", "") == "ByteLevel";
  const auto& chat_template = imported.hf_tokenizer_config.value("chat_template", nlohmann::json());
  std::cout << "tokenizer: " << a.out << "/tokenizer (Hugging Face "
            << (byte_level ? "byte-level BPE" : "SentencePiece-style BPE with byte fallback")
            << (chat_template.is_string() ? ", with its chat template" : "") << ")\n";
}

}  // namespace

void add_import_command(CLI::App& app) {
  auto a = std::make_shared<ImportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "import", "Import a pretrained model (Hugging Face or GGUF Llama, Qwen2, Qwen3) as an fbt run directory");
  cmd->add_option("--from", a->from, "Source format: hf (a model directory) or gguf (a .gguf file)")
      ->check(CLI::IsMember({"hf", "gguf"}))
      ->capture_default_str();
  cmd->add_option("source", a->source,
                  "hf: model directory (config.json, model.safetensors or a sharded index, tokenizer.json "
                  "[, tokenizer_config.json]); gguf: the .gguf file")
      ->required();
  cmd->add_option("--out", a->out, "Run directory to create (must not exist, or be empty)")->required();
  cmd->add_option("--fusion", a->fusion,
                  "Fusion on top of the imported stack: residual (W_U = 0: every decoding mode is the imported model "
                  "until training changes it), glu or glu_plus_token (W_U = I)")
      ->capture_default_str();
  cmd->add_option("--context", a->options.context,
                  "Model context in tokens (0: config.json max_position_embeddings or GGUF ARCH.context_length)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--gate-init-std", a->options.fusion_gate_init_std, "Std of the fusion gate W_G at init")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--seed", a->options.seed, "Seed of W_G's draw")->capture_default_str();
  cmd->callback([a] { run_import(*a); });
}

}  // namespace fbt::cli
