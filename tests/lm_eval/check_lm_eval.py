"""lm-evaluation-harness against `fbt serve` (issue 19, item 4): lm-eval's `local-completions` model
scores arc_easy, piqa, hellaswag and lambada through /v1/completions (echo + logprobs), and its
acc / acc_norm / acc_bytes (lambada: acc and perplexity) must equal `fbt eval`'s on the same items,
in the standard mode and in fused(1).

  .venv/bin/python tests/lm_eval/check_lm_eval.py path/to/fbt SHARED_DATA_DIR [--limit N]

The model is tests/fixtures/hf/llama_tied (a random 2-layer Llama with a real byte-level BPE
tokenizer.json, two embedding rows swapped so that one prompt is followed by EOS:
fixture_with_eos_after) imported by `fbt import --context 2048`, so that lm-eval can load the same
tokenizer with transformers offline. Exits 77 (CTest's skip) without lm_eval in this Python or
without the shared data.

Where lm-eval and fbt eval could differ, and how they are made to agree (not by loosening the check):
  - The document prefix. fbt's requests start with Tokenizer::document_prefix() (src/eval/mc.cpp
    encode_request): EOS for fbt's own tokenizers, BOS for an imported tokenizer that adds one
    (this one's post-processor prepends <|begin_of_text|>). lm-eval's TemplateAPI.tok_encode encodes
    with add_special_tokens = add_bos_token (default False; lm_eval/models/api_models.py), so the
    model_args set add_bos_token=True: context_enc = [BOS] + ids(context), as fbt's.
  - The split of context and continuation. lm-eval's TemplateLM._encode_pair (lm_eval/api/model.py)
    moves the context's trailing spaces to the continuation and takes continuation_enc =
    encode(context + continuation)[len(encode(context)):], as fbt does; fbt instead re-encodes the
    continuation alone where a token spans the join. This tokenizer's pre-tokenizer splits before
    " word", so no token spans the join on these tasks and both give the same tokens.
  - The decoding mode. local-completions' _create_payload (lm_eval/models/openai_completions.py)
    sends exactly {model, prompt, temperature: 0, max_tokens: 1, logprobs: 1, seed, echo: true} and
    no extra body fields, so fbt_mode cannot travel in the request: each mode gets its own server,
    `fbt serve --mode standard` and `fbt serve --mode fused --fused-passes 1`, whose default mode
    applies to every request. fbt eval's fused(1) is ModelScorer's (forward_passes with 2 passes,
    last pass's logits), the definition prompt_logprobs uses for fused echo log-probabilities.
  - Greedy (lambada acc). lm-eval's LocalCompletionsAPI.parse_logprobs calls a token greedy when its
    logprob equals max(top_logprobs[t].values()) (logprobs=1: the top-1 entry); fbt eval when it is
    the argmax. They differ only on an exact tie with a lower id, which random float logits do not
    produce; the server reports both numbers from the same float, so equality is exact.
  - acc_norm divides by len(choice) in characters in both (lm_eval/api/task.py process_results,
    completion_len); acc_bytes by UTF-8 bytes in both.
  - Perplexity: exp(-mean item loglik) in both; fbt eval sums float32 log-probabilities from batched
    forwards, the server from one sequence at a time and JSON, so it agrees to a relative 1e-4, not
    bit for bit.
  - Items: the tasks here (tests/lm_eval/fbt_*.yaml, utils.py) read the same local files and, like
    fbt eval, leave out each file's last 100 records (fbt's few-shot pool); --limit N takes the
    first N in both. 0-shot only.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "serve"))
from serve_helpers import Server, skip  # noqa: E402

try:
    import lm_eval  # noqa: F401
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except ImportError as e:
    skip(f"{e} (lm-eval is in scripts/requirements-check.txt; scripts/setup.sh --torch2 installs it)")

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "hf", "llama_tied")
CONTEXT = 2048  # model.context of the import and lm-eval's max_length: no request is truncated
TASKS = {"arc_easy": "fbt_arc_easy", "piqa": "fbt_piqa", "hellaswag": "fbt_hellaswag", "lambada": "fbt_lambada"}
MODES = [("standard", 0), ("fused", 1)]  # (fbt serve --mode, --fused-passes); fbt eval's name below
METRICS = {"arc_easy": ["acc", "acc_norm", "acc_bytes"], "piqa": ["acc", "acc_norm", "acc_bytes"],
           "hellaswag": ["acc", "acc_norm", "acc_bytes"], "lambada": ["acc", "perplexity"]}
PERPLEXITY_RTOL = 1e-4


def post(url, body):
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        return json.load(r)


def fixture_with_eos_after(out):
    """Copies FIXTURE to `out` with two rows of its (tied) embedding swapped so that EOS is the
    greedy next token after some prompt [BOS, t]: v = the greedy successor of [BOS, t] under
    transformers, and rows EOS and v trade places (t, BOS not among them), a relabelling of two ids
    that leaves the model as random as before. Returns [BOS, t]."""
    model = transformers.AutoModelForCausalLM.from_pretrained(FIXTURE, dtype=torch.float32).eval()
    bos, eos, vocab = model.config.bos_token_id, model.config.eos_token_id, model.config.vocab_size
    with torch.no_grad():
        successors = model(torch.tensor([[bos, t] for t in range(vocab)])).logits[:, -1].argmax(-1).tolist()
    t, v = next((t, v) for t, v in enumerate(successors) if len({bos, eos, t, v}) == 4)
    shutil.copytree(FIXTURE, out)
    weights = load_file(os.path.join(FIXTURE, "model.safetensors"))
    embedding = weights["model.embed_tokens.weight"]
    embedding[[eos, v]] = embedding[[v, eos]]
    save_file(weights, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return [bos, t]


def check_stop_token_reported(url, model, prompt):
    """lm-eval's LocalCompletionsAPI.parse_logprobs takes token_logprobs[ctxlen:-1]: it assumes the
    answer to its request (echo, max_tokens 1) holds the prompt's entries plus exactly one for the
    generated token. If the server left that entry out when the generated token is a stop token
    (EOS), lm-eval would silently drop the continuation's last token. `prompt` is followed by EOS
    (fixture_with_eos_after): its answer must still hold len(prompt) + 1 entries."""
    probe = post(url, {"model": model, "prompt": [prompt], "max_tokens": 1, "temperature": 0})
    if probe["choices"][0]["finish_reason"] != "stop":
        raise AssertionError(f"the greedy next token after {prompt} should be EOS: {probe}")
    answer = post(url, {"model": model, "prompt": [prompt], "temperature": 0, "max_tokens": 1, "logprobs": 1,
                        "seed": 1234, "echo": True})
    entries = answer["choices"][0]["logprobs"]["token_logprobs"]
    return None if len(entries) == len(prompt) + 1 else (
        f"lm-eval's request for {prompt}, whose greedy next token is EOS, is answered with {len(entries)} "
        f"token_logprobs, not {len(prompt) + 1}: lm-eval would drop the last prompt token's log-probability")


def run_lm_eval(url, model, tokenizer_dir, data_dir, limit, out_dir):
    """{task: {metric: value}} of `lm-eval run --model local-completions` against the server at url."""
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    model_args = [f"model={model}", f"base_url={url}/v1/completions", "tokenizer_backend=huggingface",
                  f"tokenizer={tokenizer_dir}", "add_bos_token=True", f"max_length={CONTEXT}", "num_concurrent=1",
                  "max_retries=1"]
    subprocess.run([sys.executable, "-m", "lm_eval", "run", "--model", "local-completions",
                    "--model_args", *model_args, "--tasks", ",".join(TASKS.values()), "--include_path", HERE,
                    "--metadata", json.dumps({"data_dir": data_dir}), "--num_fewshot", "0", "--limit", str(limit),
                    "--output_path", out_dir],
                   check=True, env=env)
    [path] = glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True)
    with open(path) as f:
        results = json.load(f)["results"]
    return {task: {metric: results[name][f"{metric},none"] for metric in METRICS[task]}
            for task, name in TASKS.items()}


def run_fbt_eval(fbt, run, data_dir, limit, out):
    """{mode: {task: {metric: value}}} of `fbt eval --mode all --fused-passes 1 --shots 0`."""
    subprocess.run([fbt, "eval", *TASKS, "--checkpoint", run, "--data-dir", data_dir, "--mode", "all",
                    "--fused-passes", "1", "--shots", "0", "--limit", str(limit), "--out", out], check=True)
    with open(out) as f:
        rows = json.load(f)["results"]
    table = {}
    for row in rows:
        if row["n"] != limit:
            raise AssertionError(f"fbt eval scored {row['n']} items of {row['task']}, not {limit}")
        table.setdefault(row["mode"], {}).setdefault(row["task"], {})[row["metric"]] = row["value"]
    return table


def compare(label, harness, ours):
    """Prints the two tables side by side; returns the mismatches."""
    print(f"\n{label}: lm-eval local-completions vs fbt eval\n| task | metric | lm-eval | fbt eval |\n|---|---|---|---|")
    bad = []
    for task, metrics in METRICS.items():
        for metric in metrics:
            a, b = harness[task][metric], ours[task][metric]
            print(f"| {task} | {metric} | {a:.6f} | {b:.6f} |")
            same = abs(a - b) <= PERPLEXITY_RTOL * abs(b) if metric == "perplexity" else a == b
            if not same:
                bad.append(f"{label} {task} {metric}: lm-eval {a} != fbt eval {b}")
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fbt")
    parser.add_argument("data_dir")
    parser.add_argument("--limit", type=int, default=50, help="items per task (the first N)")
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.data_dir, "hellaswag")):
        skip(f"no {args.data_dir}/hellaswag (the shared datasets)")
    with tempfile.TemporaryDirectory() as tmp:
        fixture, run = os.path.join(tmp, "fixture"), os.path.join(tmp, "run")
        eos_prompt = fixture_with_eos_after(fixture)
        subprocess.run([args.fbt, "import", "--from", "hf", fixture, "--out", run, "--context", str(CONTEXT)],
                       check=True, stdout=subprocess.DEVNULL)
        ours = run_fbt_eval(args.fbt, run, args.data_dir, args.limit, os.path.join(tmp, "fbt_eval.json"))
        bad = []
        for mode, k in MODES:
            server = Server(args.fbt, run, "--mode", mode, "--fused-passes", str(max(k, 1)))
            try:
                if k == 0:
                    problem = check_stop_token_reported(server.url, server.model, eos_prompt)
                    print(problem or f"a prompt followed by EOS ({eos_prompt}) is echoed with its generated entry")
                    bad += [problem] if problem else []
                harness = run_lm_eval(server.url, server.model, fixture, args.data_dir, args.limit,
                                      os.path.join(tmp, f"lm_eval_{mode}"))
                status = server.terminate()
            finally:
                server.stop()
            if status != 0:
                raise AssertionError(f"fbt serve --mode {mode} exited {status} on SIGTERM")
            label = "standard" if k == 0 else f"fused({k})"
            bad += compare(label, harness, ours[label])
    if bad:
        print("\nMISMATCH:\n  " + "\n  ".join(bad))
        sys.exit(1)
    print(f"\nlm-eval and fbt eval agree on {args.limit} items of each task in both modes")


if __name__ == "__main__":
    main()
