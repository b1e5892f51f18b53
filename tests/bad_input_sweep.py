#!/usr/bin/env python3
"""Bad-input sweep: runs `fbt` on bad flags, settings and damaged files across every subcommand.

    tests/bad_input_sweep.py build/fbt [--keep] [-k SUBSTRING]

Builds a fixture (a byte-tokenizer dataset, a 4-step debug run with checkpoints at steps 2 and 4,
a one-checkpoint run, a synth task file, a tiny task directory), then runs each case and asserts
what fbt promises about bad input (README, "What fbt promises"):
  - the process exits 1..127 (never killed by a signal or aborted: no exit >= 128);
  - stderr holds "error:" and names what to fix (the case's flag, setting, field or file);
  - no file that existed before the command changed or vanished, and no file appeared outside
    the paths the case allows (a failed command leaves no stub run directory or temporary file).
Exit status: 0 when every case holds, 1 otherwise (each failure is printed). CTest runs it.
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

FBT = None
ROOT = None


def sh(*argv, check=True):
    r = subprocess.run([FBT, *argv], cwd=ROOT, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"fixture command failed ({r.returncode}): fbt {' '.join(argv)}\n{r.stderr}")
    return r


def write(path, text):
    os.makedirs(os.path.dirname(os.path.join(ROOT, path)) or ROOT, exist_ok=True)
    with open(os.path.join(ROOT, path), "w") as f:
        f.write(text)


def write_bytes(path, data):
    with open(os.path.join(ROOT, path), "wb") as f:
        f.write(data)


def build_fixture():
    words = "the a cat dog sat on mat ran far away under tree with big small red blue house".split()
    state = 1
    for i in range(40):  # 40 documents of ~1.3 KB (a fixed LCG: no dependence on Python's random)
        out = []
        for _ in range(300):
            state = (state * 1103515245 + 12345) % 2**31
            out.append(words[state % len(words)])
        write(f"corpus/doc{i:03d}.txt", " ".join(out) + ".\n")
    sh("prepare", "--input", "corpus", "--out", "data", "--tokenizer", "byte", "--val-fraction", "0.2")
    sh("train", "--config", "debug", "--data", "data", "--out", "run", "--steps", "4",
       "--set", "train.checkpoint_every=2")
    sh("train", "--config", "debug", "--data", "data", "--out", "run1", "--steps", "2")
    sh("synth", "--task", "memory", "--n", "8", "--distractors", "0", "--out", "mem.jsonl")
    write("tasks/lambada/lambada_test.jsonl",
          "".join(json.dumps({"text": f"the cat sat on the mat number {i} and ran far away"}) + "\n"
                  for i in range(110)))  # > the 100-record few-shot pool
    write("prompt.txt", "the cat")


# ---- damaged copies: each case gets its own copy of a fixture directory, then breaks one thing

def copy(src, dst):
    shutil.copytree(os.path.join(ROOT, src), os.path.join(ROOT, dst))


def edit_json(path, fn):
    p = os.path.join(ROOT, path)
    with open(p) as f:
        j = json.load(f)
    j = fn(j)
    with open(p, "w") as f:
        f.write(j if isinstance(j, str) else json.dumps(j, indent=2))


def truncate(path, keep):
    p = os.path.join(ROOT, path)
    with open(p, "rb") as f:
        data = f.read()
    with open(p, "wb") as f:
        f.write(data[: keep if keep >= 0 else len(data) + keep])


def flip_byte(path, offset_from_end):
    p = os.path.join(ROOT, path)
    with open(p, "r+b") as f:
        f.seek(-offset_from_end, os.SEEK_END)
        b = f.read(1)
        f.seek(-offset_from_end, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x55]))


def edit_safetensors_meta(path, old, new):
    """Same-length edit of the fbt metadata inside a safetensors header (sizes stay valid)."""
    assert len(old) == len(new)
    p = os.path.join(ROOT, path)
    with open(p, "rb") as f:
        data = bytearray(f.read())
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8 : 8 + n].decode()
    assert old in header, (old, path)
    data[8 : 8 + n] = header.replace(old, new, 1).encode()
    with open(p, "wb") as f:
        f.write(data)


def set_field(*keys, value):
    def fn(j):
        d = j
        for k in keys[:-1]:
            d = d[k]
        if value is DELETE:
            del d[keys[-1]]
        else:
            d[keys[-1]] = value
        return j
    return fn


DELETE = object()


def damaged_run(name, fn, base="run1"):
    def setup():
        copy(base, name)
        fn(name)
    return setup


def damaged_data(name, fn):
    def setup():
        copy("data", name)
        fn(name)
    return setup


# ---- the cases: (id, argv, words the error must contain, setup or None, paths it may create)

RESUME = ["train", "--data", "data", "--resume", "--steps", "6", "--out"]


HF_FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf", "llama_tied")
GGUF_FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "gguf", "llama_tied_f32.gguf")
def hf_copy(name, drop=None, edit=None):
    """A copy of the HF fixture in ROOT/name without file `drop`, its tokenizer.json edited by `edit`."""
    dst = os.path.join(ROOT, name)
    if not os.path.isdir(dst):
        shutil.copytree(HF_FIXTURE, dst)
    if drop and os.path.exists(os.path.join(dst, drop)):
        os.remove(os.path.join(dst, drop))
    if edit:
        with open(os.path.join(dst, "tokenizer.json")) as f:
            t = json.load(f)
        edit(t)
        write(os.path.join(name, "tokenizer.json"), json.dumps(t))


def gguf_with_bad_string(key, first_byte):
    """The GGUF fixture with the first byte of metadata `key`'s string value set to `first_byte`
    (not UTF-8), or with `first_byte` None, the last byte of the first element of its string array
    cut to a lone 0xE2 (a sequence cut short)."""
    data = bytearray(open(GGUF_FIXTURE, "rb").read())
    at = data.find(key) + len(key) + 4  # the key, then its uint32 type
    if first_byte is not None:
        data[at + 8] = first_byte[0]  # past the uint64 length
    else:
        at += 4 + 8  # the array's element type and count
        (n,) = struct.unpack("<Q", data[at:at + 8])
        data[at + 8 + n - 1] = 0xE2
    return bytes(data)


SMALL = ["--preset", "debug", "--contexts", "8", "--new-tokens", "8"]  # fits the 64-token context


def cases():
    c = []

    def add(cid, argv, names, setup=None, allow=()):
        c.append((cid, argv, names if isinstance(names, list) else [names], setup, allow))

    # prepare
    add("prepare-missing-input", ["prepare", "--input", "nope", "--out", "p1", "--tokenizer", "byte"], "nope")
    add("prepare-empty-dir", ["prepare", "--input", "emptydir", "--out", "p2", "--tokenizer", "byte"], "emptydir",
        setup=lambda: os.makedirs(os.path.join(ROOT, "emptydir")))
    add("prepare-val-fraction-1", ["prepare", "--input", "corpus", "--out", "p3", "--val-fraction", "1"],
        "--val-fraction")
    add("prepare-over-data", ["prepare", "--input", "corpus", "--out", "data", "--tokenizer", "byte",
                              "--val-fraction", "0.3"], "--out")
    add("prepare-bad-tokenizer-model", ["prepare", "--input", "corpus", "--out", "p4", "--tokenizer-model",
                                        "prompt.txt"], "prompt.txt")
    # prepare --conversations (SFT datasets)
    add("sft-not-jsonl", ["prepare", "--conversations", "gsm8k", "--input", "prompt.txt", "--out", "s1",
                          "--tokenizer", "byte"], "prompt.txt:1")
    add("sft-no-assistant", ["prepare", "--conversations", "messages", "--input", "chats.jsonl", "--out", "s2",
                             "--tokenizer", "byte"], ["chats.jsonl:2", "assistant"],
        setup=lambda: write("chats.jsonl", '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", '
                            '"content": "b"}]}\n{"messages": [{"role": "user", "content": "x"}]}\n'))
    add("sft-bad-role", ["prepare", "--conversations", "messages", "--input", "roles.jsonl", "--out", "s3",
                         "--tokenizer", "byte"], ["roles.jsonl:1", "messages[1].role"],
        setup=lambda: write("roles.jsonl", '{"messages": [{"role": "user", "content": "a"}, {"role": "robot", '
                            '"content": "b"}]}\n'))
    add("sft-untrained-tokenizer", ["prepare", "--conversations", "gsm8k", "--input", "corpus", "--out", "s4"],
        "--tokenizer-model")
    add("sft-format", ["prepare", "--conversations", "sharegpt", "--input", "corpus", "--out", "s5"], "--conversations")
    add("sft-chatml-on-bytes", ["prepare", "--conversations", "gsm8k", "--input", "gsm.jsonl", "--out", "s6",
                                "--tokenizer", "byte", "--chat-template", "chatml"], "<|im_start|>",
        setup=lambda: write("gsm.jsonl", '{"question": "q", "answer": "#### 1"}\n{"question": "r", "answer": "#### 2"}\n'))
    # train: flags and settings
    add("train-unknown-set", ["train", "--config", "debug", "--data", "data", "--out", "t1", "--set",
                              "train.no_such=1"], "train.no_such")
    add("train-set-wrong-type", ["train", "--config", "debug", "--data", "data", "--out", "t2", "--set",
                                 "train.steps=abc"], "train.steps")
    add("train-set-no-equals", ["train", "--config", "debug", "--data", "data", "--out", "t3", "--set",
                                "train.steps"], "train.steps")
    add("train-unknown-config", ["train", "--config", "nosuch", "--data", "data", "--out", "t4"], "nosuch")
    add("train-config-not-json", ["train", "--config", "prompt.txt", "--data", "data", "--out", "t5"],
        "prompt.txt")
    add("train-missing-data", ["train", "--config", "debug", "--data", "nodata", "--out", "t6"], "nodata")
    add("train-out-is-file", ["train", "--config", "debug", "--data", "data", "--out", "prompt.txt"],
        "prompt.txt")
    add("train-existing-run", ["train", "--config", "debug", "--data", "data", "--out", "run"], "--out")
    add("train-resume-force", ["train", "--data", "data", "--out", "run", "--resume", "--force"], "--resume")
    add("train-resume-with-set", ["train", "--data", "data", "--out", "run", "--resume", "--steps", "6",
                                  "--set", "train.lr=0.1"], "--set")
    add("train-resume-done", RESUME[:-3] + ["--steps", "4", "--out", "run"], "--steps")
    add("train-resume-nothing", ["train", "--data", "data", "--out", "nothing", "--resume"], "nothing")
    add("train-seq-over-context", ["train", "--config", "debug", "--data", "data", "--out", "t7", "--set",
                                   "train.seq_len=100000"], "train.seq_len")
    add("train-val-shorter-than-window", ["train", "--config", "debug", "--data", "data", "--out", "t8",
                                          "--set", "model.context=16384"], ["val"])
    add("train-bad-device", ["train", "--config", "debug", "--data", "data", "--out", "t9", "--device", "tpu"],
        "--device")
    # train --resume: damaged run directories (run1 has one checkpoint, so nothing to fall back to)
    add("resume-run-json-truncated", RESUME + ["r1"], "run.json",
        damaged_run("r1", lambda d: truncate(f"{d}/run.json", 40)))
    add("resume-run-json-empty-object", RESUME + ["r2"], "run.json",
        damaged_run("r2", lambda d: edit_json(f"{d}/run.json", lambda j: {})))
    add("resume-run-json-steps-string", RESUME + ["r3"], "steps",
        damaged_run("r3", lambda d: edit_json(f"{d}/run.json", set_field("config", "train", "steps", value="six"))))
    add("resume-trainer-truncated", RESUME + ["r4"], "trainer.json",
        damaged_run("r4", lambda d: truncate(f"{d}/step-0000002/trainer.json", 30)))
    add("resume-trainer-empty-object", RESUME + ["r5"], "trainer.json",
        damaged_run("r5", lambda d: edit_json(f"{d}/step-0000002/trainer.json", lambda j: {})))
    add("resume-trainer-bad-generator", RESUME + ["r6"], "trainer.json",
        damaged_run("r6", lambda d: edit_json(f"{d}/step-0000002/trainer.json",
                                              set_field("torch_generator", value="zz" * 10))))
    add("resume-trainer-step-string", RESUME + ["r7"], "trainer.json",
        damaged_run("r7", lambda d: edit_json(f"{d}/step-0000002/trainer.json", set_field("step", value="sixty"))))
    add("resume-trainer-bad-pass-rng", RESUME + ["r8"], "trainer.json",
        damaged_run("r8", lambda d: edit_json(f"{d}/step-0000002/trainer.json",
                                              set_field("pass_rng", value="1 2 3"))))
    # (an empty or dangling `latest` alone falls back to the newest intact checkpoint, with a warning)
    add("resume-latest-empty-no-intact", RESUME + ["r9"], ["latest", "trainer.json"],
        damaged_run("r9", lambda d: (write(f"{d}/latest", ""), truncate(f"{d}/step-0000002/trainer.json", 9))))
    add("resume-latest-dangling-no-intact", RESUME + ["r10"], ["latest", "model.safetensors"],
        damaged_run("r10", lambda d: (write(f"{d}/latest", "step-0000099\n"),
                                      truncate(f"{d}/step-0000002/model.safetensors", 99))))
    add("resume-no-checkpoint", RESUME + ["r16"], "without --resume",
        damaged_run("r16", lambda d: (shutil.rmtree(os.path.join(ROOT, d, "step-0000002")),
                                      os.remove(os.path.join(ROOT, d, "latest")))))
    add("resume-model-truncated", RESUME + ["r11"], "model.safetensors",
        damaged_run("r11", lambda d: truncate(f"{d}/step-0000002/model.safetensors", -100)))
    add("resume-model-corrupt", RESUME + ["r12"], "model.safetensors",
        damaged_run("r12", lambda d: flip_byte(f"{d}/step-0000002/model.safetensors", 50)))
    add("resume-optimizer-missing", RESUME + ["r13"], "optimizer.safetensors",
        damaged_run("r13", lambda d: os.remove(os.path.join(ROOT, d, "step-0000002/optimizer.safetensors"))))
    add("resume-model-header-edit", RESUME + ["r14"], "model.safetensors",
        damaged_run("r14", lambda d: edit_safetensors_meta(f"{d}/step-0000002/model.safetensors",
                                                           '\\"step\\":2', '\\"step\\":3')))
    add("resume-other-tokenizer", ["train", "--data", "data2", "--resume", "--steps", "6", "--out", "r15"],
        "tokenizer", damaged_run("r15", lambda d: (copy("data", "data2"),
                                                   edit_json("data2/meta.json",
                                                             set_field("tokenizer", "eos_id", value=1)))))
    # dataset meta.json and shards
    add("data-meta-no-tokenizer", ["train", "--config", "debug", "--data", "d1", "--out", "t10"],
        ["meta.json", "tokenizer"], damaged_data("d1", lambda d: edit_json(f"{d}/meta.json",
                                                                         set_field("tokenizer", value=DELETE))))
    add("data-meta-vocab-string", ["train", "--config", "debug", "--data", "d2", "--out", "t11"],
        ["meta.json", "vocab_size"],
        damaged_data("d2", lambda d: edit_json(f"{d}/meta.json", set_field("tokenizer", "vocab_size", value="259"))))
    add("data-meta-truncated", ["eval-loss", "--checkpoint", "run", "--data", "d3"], "meta.json",
        damaged_data("d3", lambda d: truncate(f"{d}/meta.json", 50)))
    add("data-shard-truncated", ["train", "--config", "debug", "--data", "d4", "--out", "t12"], "train.bin",
        damaged_data("d4", lambda d: truncate(f"{d}/train.bin", -64)))
    add("data-shard-overwritten", ["train", "--config", "debug", "--data", "d5", "--out", "t13"], "val.bin",
        damaged_data("d5", lambda d: shutil.copy(os.path.join(ROOT, d, "train.bin"),
                                                 os.path.join(ROOT, d, "val.bin"))))
    add("data-shard-edited-verify", ["eval-loss", "--checkpoint", "run", "--data", "d7", "--verify"], "val.bin",
        damaged_data("d7", lambda d: flip_byte(f"{d}/val.bin", 4000)))
    # checkpoints read by the inference subcommands
    add("generate-missing-checkpoint", ["generate", "--checkpoint", "nope", "--prompt", "a"], "nope")
    add("generate-run-tokenizer-broken", ["generate", "--checkpoint", "g1", "--prompt", "a"], "meta.json",
        damaged_run("g1", lambda d: truncate(f"{d}/tokenizer/meta.json", 20)))
    add("generate-checkpoint-rope-edit", ["generate", "--checkpoint", "g2", "--prompt", "a"],
        "model.safetensors",
        damaged_run("g2", lambda d: edit_safetensors_meta(f"{d}/step-0000002/model.safetensors",
                                                          '\\"rope_theta\\":10000.0', '\\"rope_theta\\":90000.0')))
    add("generate-checkpoint-format-string", ["generate", "--checkpoint", "g3", "--prompt", "a"],
        "model.safetensors",
        damaged_run("g3", lambda d: edit_safetensors_meta(f"{d}/step-0000002/model.safetensors",
                                                          '\\"format_version\\":1', '\\"format_version\\":7')))
    # quantize, and the commands that need fp32 weights given a quantised run
    quantized = lambda: sh("quantize", "--checkpoint", "run", "--weights", "int8", "--out", "qrun") \
        if not os.path.isdir(os.path.join(ROOT, "qrun")) else None
    add("quantize-bad-weights", ["quantize", "--checkpoint", "run", "--weights", "int2", "--out", "q1"], "--weights")
    add("quantize-over-run", ["quantize", "--checkpoint", "run1", "--weights", "int8", "--out", "run"], "--out")
    add("quantize-quantized", ["quantize", "--checkpoint", "qrun", "--weights", "int4", "--out", "q2"],
        ["qrun", "quantised to int8"], setup=quantized)
    add("train-init-from-quantized", ["train", "--data", "data", "--out", "q3", "--steps", "2",
                                      "--init-from", "qrun"], ["qrun", "quantised checkpoint"], setup=quantized)
    add("export-quantized", ["export", "--checkpoint", "qrun", "--out", "q4"], ["qrun", "fbt export"], setup=quantized)
    add("eval-loss-quantized", ["eval-loss", "--checkpoint", "qrun", "--data", "data"], ["qrun", "fbt eval-loss"],
        setup=quantized)
    add("generate-quantized-int4", ["generate", "--checkpoint", "qrun", "--prompt", "a", "--weights", "int4"],
        ["--weights int4", "quantised to int8"], setup=quantized)
    add("generate-bad-mode", ["generate", "--checkpoint", "run", "--prompt", "a", "--mode", "fast"], "--mode")
    add("generate-fused-passes-0", ["generate", "--checkpoint", "run", "--prompt", "a", "--mode", "fused",
                                    "--fused-passes", "0"], "--fused-passes")
    add("generate-no-prompt", ["generate", "--checkpoint", "run"], "--prompt")
    add("generate-empty-prompt", ["generate", "--checkpoint", "run", "--prompt", ""], "prompt")
    add("generate-prompt-file-missing", ["generate", "--checkpoint", "run", "--prompt-file", "nope.txt"],
        "nope.txt")
    add("generate-prompt-too-long", ["generate", "--checkpoint", "run", "--prompt", "x" * 5000], "context")
    add("generate-temperature-nan", ["generate", "--checkpoint", "run", "--prompt", "a", "--temperature", "nan"],
        "--temperature")
    add("generate-temperature-negative-no-tokens", ["generate", "--checkpoint", "run", "--prompt", "a",
                                                    "--temperature", "-1", "--max-new-tokens", "5"],
        "--temperature")
    add("generate-top-p-2", ["generate", "--checkpoint", "run", "--prompt", "a", "--top-p", "2"], "--top-p")
    add("generate-top-k-negative", ["generate", "--checkpoint", "run", "--prompt", "a", "--top-k", "-3"],
        "--top-k")
    # eval-loss
    add("eval-loss-passes-negative", ["eval-loss", "--checkpoint", "run", "--data", "data", "--passes", "-1"],
        "--passes")
    add("eval-loss-batch-0", ["eval-loss", "--checkpoint", "run", "--data", "data", "--batch", "0"], "--batch")
    add("eval-loss-context-too-long", ["eval-loss", "--checkpoint", "run", "--data", "data", "--context", "100000"],
        "--context")
    add("eval-loss-max-tokens-0", ["eval-loss", "--checkpoint", "run", "--data", "data", "--max-tokens", "0"],
        "--max-tokens")
    add("eval-loss-max-tokens-negative", ["eval-loss", "--checkpoint", "run", "--data", "data", "--max-tokens",
                                          "-5"], "--max-tokens")
    add("eval-loss-out-is-dir", ["eval-loss", "--checkpoint", "run", "--data", "data", "--out", "corpus"],
        "corpus")
    add("eval-loss-wrong-tokenizer", ["eval-loss", "--checkpoint", "run", "--data", "d6"], "tokenizer",
        damaged_data("d6", lambda d: edit_json(f"{d}/meta.json", set_field("tokenizer", "eos_id", value=1))))
    # eval
    add("eval-missing-data-dir", ["eval", "lambada", "--checkpoint", "run", "--data-dir", "nodir"], "nodir")
    add("eval-shots-negative", ["eval", "lambada", "--checkpoint", "run", "--data-dir", "tasks", "--shots", "-2"],
        "--shots")
    add("eval-limit-0", ["eval", "lambada", "--checkpoint", "run", "--data-dir", "tasks", "--limit", "0"],
        "--limit")
    add("eval-batch-0", ["eval", "lambada", "--checkpoint", "run", "--data-dir", "tasks", "--batch", "0"],
        "--batch")
    add("eval-pass-k-0", ["eval", "humaneval", "--checkpoint", "run", "--data-dir", "tasks", "--pass-k", "0",
                          "--allow-code-execution"], "--pass-k")
    add("eval-sandbox-timeout-negative", ["eval", "humaneval", "--checkpoint", "run", "--data-dir", "tasks",
                                          "--sandbox-timeout", "-1", "--allow-code-execution"], "--sandbox-timeout")
    add("eval-code-without-opt-in", ["eval", "humaneval", "--checkpoint", "run", "--data-dir", "tasks"],
        "--allow-code-execution")
    add("eval-out-unwritable", ["eval", "lambada", "--checkpoint", "run", "--data-dir", "tasks", "--out",
                                "nodir/x/results.json"], "nodir/x/results.json")
    add("eval-fused-passes-0", ["eval", "lambada", "--checkpoint", "run", "--data-dir", "tasks", "--mode", "fused",
                                "--fused-passes", "0"], "--fused-passes")
    add("eval-chat-mc-task", ["eval", "lambada", "--checkpoint", "run", "--data-dir", "tasks", "--prompt-format",
                              "chat"], "--prompt-format")
    add("eval-chat-code-task", ["eval", "humaneval", "--checkpoint", "run", "--data-dir", "tasks", "--prompt-format",
                                "chat", "--allow-code-execution"], "--prompt-format")
    add("eval-chat-bad-format", ["eval", "gsm8k", "--checkpoint", "run", "--data-dir", "tasks", "--prompt-format",
                                 "html"], "--prompt-format")
    add("eval-chat-template-without-chat", ["eval", "gsm8k", "--checkpoint", "run", "--data-dir", "tasks",
                                            "--chat-template", "chatml"], "--chat-template")
    gsm8k = "".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"}) + "\n"
                    for i in range(3))
    add("eval-chat-template-lacks-tokens", ["eval", "gsm8k", "--checkpoint", "run", "--data-dir", "chattasks",
                                            "--prompt-format", "chat", "--chat-template", "chatml"], "<|im_start|>",
        # the data is read before the checkpoint (and its tokenizer) is loaded: give it some
        setup=lambda: (write("chattasks/gsm8k/test.jsonl", gsm8k), write("chattasks/gsm8k/train.jsonl", gsm8k)))
    # chat
    add("chat-missing-checkpoint", ["chat", "--checkpoint", "nope"], "nope")
    add("chat-bad-mode", ["chat", "--checkpoint", "run", "--mode", "fast"], "--mode")
    add("chat-max-new-tokens-over-context", ["chat", "--checkpoint", "run", "--max-new-tokens", "64"],
        "--max-new-tokens")
    add("chat-temperature-nan", ["chat", "--checkpoint", "run", "--temperature", "nan"], "--temperature")
    add("chat-bad-template", ["chat", "--checkpoint", "run", "--chat-template", "jinja"], "--chat-template")
    # serve (each fails before listening)
    add("serve-missing-checkpoint", ["serve", "--checkpoint", "nope"], "nope")
    add("serve-bad-mode", ["serve", "--checkpoint", "run", "--mode", "fast"], "--mode")
    add("serve-port-over-65535", ["serve", "--checkpoint", "run", "--port", "70000"], "--port")
    add("serve-max-batch-0", ["serve", "--checkpoint", "run", "--max-batch", "0"], "--max-batch")
    add("serve-fused-passes-0", ["serve", "--checkpoint", "run", "--fused-passes", "0"], "--fused-passes")
    add("serve-bad-host", ["serve", "--checkpoint", "run", "--host", "256.1.1.1", "--port", "0"], "--host")
    # synth and eval-probe
    add("synth-n-0", ["synth", "--task", "memory", "--n", "0", "--out", "s1.jsonl"], "--n")
    add("synth-distractors-negative", ["synth", "--task", "memory", "--distractors", "-3", "--out", "s2.jsonl"],
        "--distractors")
    add("synth-registers-0", ["synth", "--task", "registers", "--registers", "0", "--out", "s3.jsonl"],
        "--registers")
    add("synth-out-is-dir", ["synth", "--task", "memory", "--out", "corpus"], "corpus")
    add("synth-arithmetic-min-ops-0", ["synth", "--task", "arithmetic", "--min-ops", "0", "--out", "s5.jsonl"],
        "--min-ops")
    add("synth-arithmetic-max-below-min", ["synth", "--task", "arithmetic", "--min-ops", "3", "--max-ops", "2",
                                           "--out", "s6.jsonl"], "--max-ops")
    add("synth-arithmetic-skip-fraction-1.5", ["synth", "--task", "arithmetic", "--skip-fraction", "1.5",
                                               "--out", "s7.jsonl"], "--skip-fraction")
    add("synth-arithmetic-registers", ["synth", "--task", "arithmetic", "--registers", "3", "--out", "s8.jsonl"],
        "--registers")
    add("synth-memory-min-ops", ["synth", "--task", "memory", "--min-ops", "3", "--out", "s9.jsonl"], "--min-ops")
    add("eval-no-item-before-checkpoint", ["eval", "lambada", "--checkpoint", "nocheckpoint", "--data-dir", "fewtasks"],
        "no item to evaluate",  # 50 records: all in the 100-record few-shot pool; checked before the checkpoint
        setup=lambda: write("fewtasks/lambada/lambada_test.jsonl", "".join(
            json.dumps({"text": f"the cat sat on the mat number {i}"}) + "\n" for i in range(50))))
    add("eval-arithmetic-no-data", ["eval", "arithmetic", "--checkpoint", "run", "--data-dir", "tasks"],
        "arithmetic/test.jsonl")
    add("probe-not-jsonl", ["eval-probe", "prompt.txt", "--checkpoint", "run"], "prompt.txt")
    add("probe-folds-1", ["eval-probe", "mem.jsonl", "--checkpoint", "run", "--folds", "1"], "--folds")
    add("probe-l2-negative", ["eval-probe", "mem.jsonl", "--checkpoint", "run", "--l2", "-1"], "--l2")
    # bench
    add("bench-unknown-preset", ["bench", "--preset", "huge"], "--preset")
    add("bench-unknown-test", ["bench", *SMALL, "--tests", "fly"], "--tests")
    add("bench-batch-sizes-0", ["bench", *SMALL, "--tests", "decode", "--batch-sizes", "0"],
        "--batch-sizes")
    add("bench-contexts-0", ["bench", *SMALL, "--tests", "decode", "--contexts", "0"], "--contexts")
    add("bench-new-tokens-negative", ["bench", *SMALL, "--tests", "decode", "--new-tokens", "-1"],
        "--new-tokens")
    add("bench-train-batch-0", ["bench", *SMALL, "--tests", "train", "--train-batch", "0"],
        "--train-batch")
    add("bench-threads-negative", ["bench", *SMALL, "--threads", "-1"], "--threads")
    add("bench-warmup-negative", ["bench", *SMALL, "--warmup", "-3"], "--warmup")
    add("bench-reps-0", ["bench", *SMALL, "--reps", "0"], "--reps")
    # numbers out of range, everywhere (issue 21 item 13), and output paths checked before the work
    T = ["train", "--config", "debug", "--data", "data", "--out", "t20"]
    for flag, value in [("--steps", "0"), ("--steps", "-5"), ("--steps", "99999999999999999999999"),
                        ("--dist-timeout", "0"), ("--bucket-mb", "-1")]:
        add(f"train{flag}={value}", T + [flag, value], flag)
    for setting in ["train.lr=1e39", "train.seed=-1", "train.batch_size=16000000", "model.d_model=0",
                    "train.warmup_steps=-3", "train.mixin_prob=nan", "train.eval_tokens=8"]:
        add(f"train-set-{setting}", T + ["--set", setting], setting.split("=")[0])
    add("train-config-steps-wraps", ["train", "--config", "huge.json", "--data", "data", "--out", "t21"], "steps",
        setup=lambda: write("huge.json", '{"model": "debug", "train": {"steps": 18446744073709551615}}'))
    add("generate-max-new-tokens-0", ["generate", "--checkpoint", "run", "--prompt", "a", "--max-new-tokens", "0"],
        "--max-new-tokens")
    add("generate-seed-negative", ["generate", "--checkpoint", "run", "--prompt", "a", "--seed", "-1"], "--seed")
    add("prepare-seed-negative", ["prepare", "--input", "corpus", "--out", "p5", "--tokenizer", "byte", "--seed", "-1"],
        "--seed")
    add("prepare-vocab-too-small", ["prepare", "--input", "corpus", "--out", "p6", "--vocab-size", "100"],
        "--vocab-size")
    add("prepare-out-under-file", ["prepare", "--input", "corpus", "--out", "prompt.txt/sub", "--tokenizer", "byte"],
        "prompt.txt")
    add("eval-loss-max-passes-0", ["eval-loss", "--checkpoint", "run", "--data", "data", "--contraction",
                                   "--max-passes", "0"], "--max-passes")
    add("eval-loss-json-missing-dir", ["eval-loss", "--checkpoint", "run", "--data", "data", "--json",
                                       "nodir/x.json"], "nodir")
    add("eval-samples-under-file", ["eval", "gsm8k", "--checkpoint", "run", "--data-dir", "tasks", "--samples",
                                    "prompt.txt/s.jsonl"], "prompt.txt")
    add("eval-sandbox-jobs-0", ["eval", "humaneval", "--checkpoint", "run", "--data-dir", "tasks",
                                "--sandbox-jobs", "0", "--allow-code-execution"], "--sandbox-jobs")
    add("eval-temperatures-nan", ["eval", "humaneval", "--checkpoint", "run", "--data-dir", "tasks",
                                  "--temperatures", "0.5,nan", "--allow-code-execution"], "--temperatures")
    add("eval-samples-per-problem-0", ["eval", "humaneval", "--checkpoint", "run", "--data-dir", "tasks",
                                       "--samples-per-problem", "0", "--allow-code-execution"], "--samples-per-problem")
    add("synth-writes-negative", ["synth", "--task", "registers", "--writes", "-1", "--out", "s4.jsonl"], "--writes")
    add("probe-l2-inf", ["eval-probe", "mem.jsonl", "--checkpoint", "run", "--l2", "inf"], "--l2")
    add("probe-max-iter-0", ["eval-probe", "mem.jsonl", "--checkpoint", "run", "--max-iter", "0"], "--max-iter")
    add("probe-out-is-dir", ["eval-probe", "mem.jsonl", "--checkpoint", "run", "--out", "corpus"], "corpus")
    add("bench-train-seq-negative", ["bench", *SMALL, "--train-seq", "-5"], "--train-seq")
    add("bench-peak-size-negative", ["bench", *SMALL, "--peak-size", "-1"], "--peak-size")
    add("bench-passes-0", ["bench", *SMALL, "--passes", "1,0"], "--passes")
    add("bench-context-overflow", ["bench", "--preset", "debug", "--tests", "decode", "--contexts", "60",
                                   "--new-tokens", "8"], "--contexts")
    add("bench-out-is-dir", ["bench", *SMALL, "--tests", "train", "--out", "corpus"], "corpus")
    add("bench-results-dir-is-file", ["bench", *SMALL, "--tests", "train", "--results-dir", "prompt.txt"],
        "prompt.txt")
    # import (issue 17): the HF fixture of tests/fixtures/hf; nothing is written on bad input
    add("import-from-onnx", ["import", "--from", "onnx", HF_FIXTURE, "--out", "i1"], "--from")
    add("import-gguf-is-dir", ["import", "--from", "gguf", HF_FIXTURE, "--out", "i6"], [HF_FIXTURE, "not a file"])
    add("import-gguf-bad-magic", ["import", "--from", "gguf", "prompt.txt", "--out", "i7"], ["prompt.txt", "not a GGUF file"])
    add("import-gguf-truncated", ["import", "--from", "gguf", "cut.gguf", "--out", "i8"], ["cut.gguf", "truncated"],
        setup=lambda: write_bytes("cut.gguf", open(GGUF_FIXTURE, "rb").read()[:5000]))
    add("import-gguf-unsupported-arch", ["import", "--from", "gguf", "gemma.gguf", "--out", "i9"],
        ["gemma.gguf", "architecture \"gemma\"", "llama, qwen2, qwen3"],
        setup=lambda: write_bytes("gemma.gguf", open(GGUF_FIXTURE, "rb").read().replace(
            b"\x05" + b"\0" * 7 + b"llama", b"\x05" + b"\0" * 7 + b"gemma", 1)))
    add("import-gguf-no-tokenizer", ["import", "--from", "gguf", "notok.gguf", "--out", "i10"],
        ["notok.gguf", "tokenizer.ggml.model", "missing"],
        setup=lambda: write_bytes("notok.gguf", open(GGUF_FIXTURE, "rb").read().replace(
            b"tokenizer.ggml.model", b"tokenizer.ggml.modeX", 1)))
    # GGUF strings that are not UTF-8 (issue 36): the file and the key named, no stub --out left
    for cid, key, first_byte in [("name", b"general.name", b"\xff"), ("chat-template", b"tokenizer.chat_template", b"\x80"),
                                 ("token", b"tokenizer.ggml.tokens", None)]:
        named = "metadata '" + key.decode() + "'" + ("[0]" if first_byte is None else "")
        add(f"import-gguf-{cid}-not-utf8", ["import", "--from", "gguf", f"utf8-{cid}.gguf", "--out", f"i-{cid}"],
            [f"utf8-{cid}.gguf", named + " is not valid UTF-8"],
            setup=lambda cid=cid, key=key, first_byte=first_byte: write_bytes(
                f"utf8-{cid}.gguf", gguf_with_bad_string(key, first_byte)))
    add("import-missing-dir", ["import", "--from", "hf", "nohf", "--out", "i2"], "nohf")
    add("import-no-config", ["import", "--from", "hf", "corpus", "--out", "i3"], "config.json")
    add("import-unsupported-model-type", ["import", "--from", "hf", "gpt2", "--out", "i4"],
        ["gpt2/config.json", "model_type", "llama, qwen2, qwen3"],
        setup=lambda: write("gpt2/config.json", '{"model_type": "gpt2", "vocab_size": 50257}'))
    add("import-over-run", ["import", "--from", "hf", HF_FIXTURE, "--out", "run"], "--out")
    add("import-bad-fusion", ["import", "--from", "hf", HF_FIXTURE, "--out", "i5", "--fusion", "add"], "--fusion")
    add("import-no-tokenizer", ["import", "--from", "hf", "notok", "--out", "i6"], ["notok", "tokenizer.json"],
        setup=lambda: hf_copy("notok", drop="tokenizer.json"))
    add("import-tokenizer-wordpiece", ["import", "--from", "hf", "wordpiece", "--out", "i7"],
        ["wordpiece/tokenizer.json", "model.type", "WordPiece"],
        setup=lambda: hf_copy("wordpiece", edit=lambda t: t["model"].update(type="WordPiece")))
    add("import-tokenizer-metaspace", ["import", "--from", "hf", "metaspace", "--out", "i8"],
        ["metaspace/tokenizer.json", "pre_tokenizer", "Metaspace"],
        setup=lambda: hf_copy("metaspace", edit=lambda t: t.update(pre_tokenizer={"type": "Metaspace"})))
    add("prepare-tokenizer-model-bad-json", ["prepare", "--input", "corpus", "--out", "d9", "--tokenizer-model",
                                             "bad/tokenizer.json"], ["bad/tokenizer.json", "not valid JSON"],
        setup=lambda: write("bad/tokenizer.json", '{"model": '))
    return c


# ---- the harness

def snapshot():
    """{relative path: sha256} of every file under ROOT (directories as themselves)."""
    out = {}
    for d, dirs, files in os.walk(ROOT):
        for name in files + [x for x in dirs if not os.listdir(os.path.join(d, x))]:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, ROOT)
            if os.path.isdir(p):
                out[rel] = "<dir>"
            else:
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def run_case(cid, argv, names, setup, allow):
    if setup:
        setup()
    before = snapshot()
    r = subprocess.run([FBT, *argv], cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       errors="replace", timeout=300)
    after = snapshot()
    problems = []
    if r.returncode == 0:
        problems.append("exit 0 (accepted silently)")
    elif r.returncode < 0 or r.returncode >= 128:
        problems.append(f"exit {r.returncode} (abort or signal)")
    if r.returncode != 0 and "error:" not in r.stderr:
        problems.append("stderr lacks 'error:'")
    if ": Success" in r.stderr:
        problems.append("stderr prints a clobbered errno (': Success')")
    for name in names:
        if name.lower() not in r.stderr.lower():
            problems.append(f"stderr does not name {name!r}")
    changed = [p for p in before if after.get(p) != before[p]]
    created = [p for p in after if p not in before and not any(p.startswith(a) for a in allow)]
    if changed:
        problems.append("changed or removed: " + ", ".join(sorted(changed)[:5]))
    if created:
        problems.append("created: " + ", ".join(sorted(created)[:5]))
    return problems, r


def main():
    global FBT, ROOT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fbt", help="the fbt binary")
    ap.add_argument("--keep", action="store_true", help="keep the fixture directory")
    ap.add_argument("-k", default="", help="run only cases whose id contains this")
    args = ap.parse_args()
    FBT = os.path.abspath(args.fbt)
    ROOT = tempfile.mkdtemp(prefix="fbt-sweep-")
    env_threads = os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        build_fixture()
        all_cases = [x for x in cases() if args.k in x[0]]
        failures = 0
        for cid, argv, names, setup, allow in all_cases:
            problems, r = run_case(cid, argv, names, setup, allow)
            status = "ok  " if not problems else "FAIL"
            first = (r.stderr.strip().splitlines() or [""])[-1][:150]
            print(f"{status} {cid:42s} exit {r.returncode:3d}  {first}")
            for p in problems:
                print(f"       - {p}")
            failures += bool(problems)
        print(f"{len(all_cases) - failures}/{len(all_cases)} cases hold (threads {env_threads}); fixture {ROOT}")
        return 1 if failures else 0
    finally:
        if not args.keep:
            shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
