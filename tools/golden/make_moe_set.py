#!/usr/bin/env python3
"""Make the tiny mixture-of-experts test models (qwen3moe, lfm2moe, qwen35moe) and their goldens, for
tests/models/ and tests/golden/ of the repository (issue 32).

usage: make_moe_set.py --llama-bin DIR --make-golden BIN --gguf-py DIR --vocab VOCAB.gguf --out DIR
                       --work DIR --seed N --prompts PROMPTS.json --commit SHA [--arch A ...] [--type T ...]

As make_newarch_set.py (same steps and settings: llama-quantize with the normal mixing rules, make_golden
with an F32 twin as `reference` and the file as `quantized`, n_ctx 256, 2 threads, F32 KV cache), with
synth_moe.py's masters. --type: f16, q8_0, q4km (default f16 and q4km: the repository's size budget).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TYPES = {"f16": "F16", "q8_0": "Q8_0", "q4km": "Q4_K_M"}
DESC = {
    "qwen3moe": "qwen3moe-tiny: qwen3moe arch (Qwen3 MoE: QK-norm attention, routed FFN in every layer: softmax router, top 2 of 8 experts renormalised), random weights, 2 layers, n_embd 256, 4 heads, 2 KV heads, head_dim 64, expert n_ff 128, 512-token SentencePiece vocab (stories260K's)",
    "lfm2moe": "lfm2moe-tiny: lfm2moe arch (LFM2 MoE), random weights, 3 layers (short conv with a dense FFN of 256, attention, short conv; layers 1-2 routed: sigmoid gating + exp_probs_b selection bias, top 2 of 8 experts renormalised), n_embd 256, 4 heads, 2 KV heads, head_dim 64, expert n_ff 128, tied output, 512-token SentencePiece vocab (stories260K's)",
    "qwen35moe": "qwen35moe-tiny: qwen35moe arch (Qwen3.5 MoE), random weights, 2 layers (gated delta net, gated attention; full_attention_interval 2), routed FFN in both (softmax, top 2 of 8 experts renormalised, plus a shared expert of 128 with a sigmoid gate), n_embd 256, attention 4 heads/2 KV heads/head_dim 64, linear attention 2 K heads/4 V heads/head dim 32, expert n_ff 128, 512-token SentencePiece vocab (stories260K's)",
}


def run(cmd, log):
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}; see {log}")


def main():
    ap = argparse.ArgumentParser()
    for k in ("llama-bin", "make-golden", "gguf-py", "vocab", "out", "work", "prompts", "commit"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--arch", action="append", default=[])
    ap.add_argument("--type", action="append", default=[])
    a = ap.parse_args()
    archs = a.arch or list(DESC)
    types = a.type or ["f16", "q4km"]
    prompts = json.load(open(a.prompts))
    models, golden = os.path.join(a.out, "models"), os.path.join(a.out, "golden")
    for d in (models, golden, a.work):
        os.makedirs(d, exist_ok=True)
    run([sys.executable, os.path.join(HERE, "synth_moe.py"), a.gguf_py, a.vocab, a.work, str(a.seed)] + archs,
        os.path.join(a.work, "synth.log"))
    quant = os.path.join(a.llama_bin, "llama-quantize")
    for arch in archs:
        master = os.path.join(a.work, f"{arch}-tiny-f32.gguf")
        for suffix in types:
            qtype = TYPES[suffix]
            stem = f"{arch}-tiny-{suffix}"
            dst = os.path.join(models, stem + ".gguf")
            if os.path.exists(dst):
                os.remove(dst)
            run([quant, master, dst, qtype, "2"], os.path.join(a.work, f"quantize-{stem}.log"))
            twin = os.path.join(a.work, f"twin-{stem}.gguf")
            if os.path.exists(twin):
                os.remove(twin)
            cmd = [a.make_golden, "--model", dst, "--twin", twin, "--out", os.path.join(golden, stem + ".json"),
                   "--commit", a.commit, "--description", f"{DESC[arch]}; this file: llama-quantize {qtype} of the F32 master"]
            for p in prompts:
                cmd += ["--prompt", p]
            log = os.path.join(a.work, f"golden-{stem}.log")
            run(cmd, log)
            print(stem, os.path.getsize(dst), "bytes;", open(log).read().strip().splitlines()[-1])


if __name__ == "__main__":
    main()
