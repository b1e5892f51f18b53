// `fbt`: the command-line front end (prepare, train, generate, eval-loss, eval, synth, eval-probe, bench,
// import, export, chat, serve).
#include <iostream>

#include "commands.h"
#include "fbt/util/cpu_allocator.h"
#include "fbt/util/cpu_threads.h"
#include "fbt/util/error.h"

int main(int argc, char** argv) {
  fbt::keep_freed_cpu_blocks();  // activations are reused, not re-faulted, every step (cpu_allocator.h)
  fbt::set_cpu_threads(0);       // the physical cores, not libtorch's default (cpu_threads.h); --threads overrides
  CLI::App app{"fbt — the Full-Bandwidth Transformer (latent-feedback decoding)"};
  app.require_subcommand(1);
  fbt::cli::add_prepare_command(app);
  fbt::cli::add_generate_command(app);
  fbt::cli::add_eval_loss_command(app);
  fbt::cli::add_eval_command(app);
  fbt::cli::add_synth_command(app);
  fbt::cli::add_eval_probe_command(app);
  fbt::cli::add_train_command(app);
  fbt::cli::add_bench_command(app);
  fbt::cli::add_import_command(app);
  fbt::cli::add_export_command(app);
  fbt::cli::add_quantize_command(app);
  fbt::cli::add_chat_command(app);
  fbt::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help, and a run stopped by a signal (cmd_train.cpp: exit 128 + signal)
    if (e.get_exit_code() == 0 || dynamic_cast<const CLI::RuntimeError*>(&e) != nullptr) return app.exit(e);
    // A bad flag or value is bad input like any other: "error: ..." and exit 1 (CLI11's own codes
    // are 100+).
    std::cerr << "error: " << e.what() << "\nRun with --help for more information.\n";
    return 1;
  } catch (const fbt::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::runtime_error& e) {  // c10d/Gloo: a peer rank died or timed out
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory (a size or count too large for this machine?)\n";
    return 1;
  } catch (const std::exception& e) {  // JSON library, std::invalid_argument, ...: never an abort
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
