#!/usr/bin/env python3
"""Writes a random-weight Llama GGUF of one of `fbt bench`'s shapes, for llama-bench.

The comparison of bench/vs_llama_cpp.sh needs llama.cpp to run the same shapes fbt benchmarks:
`small` (D=256, L=6, H=4, Hkv=2, d_ff=688, V=4096, context 256) and `llama-134m` (D=768, L=12,
H=12, d_ff=2048, V=32000, context 512), tied embeddings as fbt's models. Weights are N(0, 0.02²);
speed does not depend on their values. The tokenizer is a placeholder SentencePiece-type vocab
of V pieces with SentencePiece's 256 byte pieces (llama-bench draws random token ids, it never
tokenizes text; `fbt import --from gguf` needs the byte pieces). Tensors are f32, or
Q8_0 / Q4_0 (gguf-py's reference quantisers) where their rows split into blocks of 32; others stay
f32, as llama-quantize leaves them. In q4_0 files the tied embedding (the output head) is Q8_0, as
fbt's `--weights int4` keeps its head (llama-quantize keeps the output layer at Q6_K).

Usage: PYTHONPATH=$LLAMA_CPP_DIR/gguf-py python3 bench/llama_gguf.py {small|llama-134m} {f32|q8_0|q4_0} OUT.gguf
"""
import sys

import numpy as np

import gguf

SHAPES = {
    "small": dict(d=256, layers=6, heads=4, kv_heads=2, ff=688, vocab=4096, context=256),
    "llama-134m": dict(d=768, layers=12, heads=12, kv_heads=12, ff=2048, vocab=32000, context=512),
}


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES or sys.argv[2] not in ("f32", "q8_0", "q4_0"):
        sys.exit(__doc__.strip().splitlines()[-1])
    name, kind, out = sys.argv[1:]
    s = SHAPES[name]
    d, heads, kv, ff, vocab = s["d"], s["heads"], s["kv_heads"], s["ff"], s["vocab"]
    dh = d // heads
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(f"fbt-bench-{name}")
    w.add_context_length(s["context"])
    w.add_embedding_length(d)
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(dh)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type({"q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
                     "f32": gguf.LlamaFileType.ALL_F32}[kind])
    w.add_tokenizer_model("llama")
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]  # byte fallback, so that `fbt import` reads the file too
    w.add_token_list(["<unk>", "<s>", "</s>"] + byte_pieces + [f"t{i}" for i in range(3 + 256, vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] +
                      [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (vocab - 3 - 256))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def matrix(tensor: str, rows: int, cols: int, head: bool = False) -> None:
        data = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        if kind != "f32" and cols % 32 == 0:
            qtype = gguf.GGMLQuantizationType.Q4_0 if kind == "q4_0" and not head else gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(tensor, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(tensor, data)

    def norm(tensor: str) -> None:
        w.add_tensor(tensor, np.ones(d, dtype=np.float32))

    matrix("token_embd.weight", vocab, d, head=True)  # tied: llama.cpp uses it as the output head too
    norm("output_norm.weight")
    for i in range(s["layers"]):
        b = f"blk.{i}."
        norm(b + "attn_norm.weight")
        matrix(b + "attn_q.weight", heads * dh, d)
        matrix(b + "attn_k.weight", kv * dh, d)
        matrix(b + "attn_v.weight", kv * dh, d)
        matrix(b + "attn_output.weight", d, heads * dh)
        norm(b + "ffn_norm.weight")
        matrix(b + "ffn_gate.weight", ff, d)
        matrix(b + "ffn_up.weight", ff, d)
        matrix(b + "ffn_down.weight", d, ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
