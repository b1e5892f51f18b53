// Layout of a training run directory and resolution of --checkpoint paths.
//
//   RUNDIR/run.json                 resolved config + provenance (git SHA, libtorch, device)
//   RUNDIR/metrics.jsonl            one JSON line per step (+ validation lines)
//   RUNDIR/tokenizer/               copy of the dataset's meta.json (+ tokenizer.model for BPE)
//   RUNDIR/step-0000200/model.safetensors    weights + metadata (checkpoint.h)
//   RUNDIR/step-0000200/optimizer.safetensors  optimiser state (optimizer_state.h)
//   RUNDIR/step-0000200/trainer.json         step, token counts, RNG and data-loader state
//   RUNDIR/latest                   text file naming the newest complete step directory
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace fbt {

/// "step-0000200" for step 200.
std::string step_dir_name(int64_t step);
/// Resolves a user's --checkpoint PATH to a model file: a model.safetensors file itself, a
/// step directory (its model.safetensors) or a run directory (the step named by RUNDIR/latest).
/// Throws fbt::Error naming PATH when none of these applies, and for a .gguf file (naming the
/// `fbt import` that makes a run of it).
std::string resolve_checkpoint(const std::string& path);
/// The run directory a model file belongs to (the parent of its step directory).
std::string run_dir_of(const std::string& model_file);
/// Atomically points RUNDIR/latest at `step_dir_name` (temporary file + rename).
void write_latest(const std::string& run_dir, const std::string& step_dir_name);

/// Throws fbt::Error naming --out unless `out_dir` can be made by write_directory_atomic: not empty,
/// absent or an empty directory, and its OUT.partial absent or a leftover of a killed fbt command
/// (one holding the ".fbt-partial" marker; anything else there is the user's and is refused, not
/// removed). A trailing '/' is ignored. Commands call it before their work, so a bad --out fails
/// at once rather than after an import or quantisation.
void check_new_directory(const std::string& out_dir);

/// Creates directory `out_dir` all at once (`fbt import`, `fbt export`, `fbt quantize`): checks it
/// as check_new_directory does; `fill` writes every file under OUT.partial (made with a
/// ".fbt-partial" marker; a leftover one from a killed command is removed first); then the marker
/// goes and OUT.partial is renamed to OUT. When anything fails OUT.partial is removed and OUT is
/// left as it was, so a failed command leaves no stub to trip the next one; the exception
/// propagates (a filesystem error as fbt::Error naming --out).
void write_directory_atomic(const std::string& out_dir, const std::function<void(const std::string& partial)>& fill);

/// Drops the lines of a run's metrics.jsonl whose step is after `step` (steps a resume from
/// `step` repeats) and lines that are not JSON (cut short by a kill), rewriting the file
/// atomically. Returns the number of lines dropped (0: the file is untouched or absent).
int64_t truncate_metrics(const std::string& path, int64_t step);

}  // namespace fbt
