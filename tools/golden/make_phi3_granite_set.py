#!/usr/bin/env python3
"""Make the tiny phi3 and granitehybrid test models and their goldens (issue 32).

usage: make_phi3_granite_set.py (the arguments of make_newarch_set.py) [--arch phi3|granitehybrid|granitehybrid-moe ...]

The chain of make_newarch_set.py (whose run() and TYPES it imports) with synth_phi3_granite.py as
the master writer: llama-quantize to F16 / Q8_0 / Q4_K_M (granitehybrid-moe: F16 and Q4_K_M only,
the repository's size budget), make_golden on each with its F32 twin.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_newarch_set import TYPES, run  # noqa: E402

DESC = {
    "phi3": "phi3-tiny: phi3 arch (Phi-4-mini's form: fused attn_qkv and gate|up ffn_up, NeoX RoPE on 48 of 64 dims, "
            "LongRoPE short/long factors, original context 128 of 4096 (n_ctx 256 takes the long factors), attn_factor sqrt(1 + ln 32 / ln 128), tied output), random weights, "
            "2 layers, n_embd 256, 4 heads, 2 KV heads, head_dim 64, n_ff 768, 512-token SentencePiece vocab (stories260K's)",
    "granitehybrid": "granitehybrid-tiny: granitehybrid arch (Granite-4.0-H dense form), random weights, 3 layers "
                     "(Mamba-2, NoPE attention, Mamba-2), n_embd 256, attention 4 heads/2 KV heads/head_dim 64, "
                     "Mamba-2 d_inner 512, 8 heads of 64, d_state 32, 2 groups, conv 4 with bias, n_ff 512, "
                     "embedding/residual/logit/attention multipliers 12/0.22/8/1/64, 512-token SentencePiece vocab (stories260K's)",
    "granitehybrid-moe": "granitehybrid-moe-tiny: granitehybrid arch (Granite-4.0-H-Tiny's MoE form), random weights, 2 layers "
                         "(Mamba-2, NoPE attention), routed FFN in both (softmax router, top 2 of 8 experts of n_ff 64 "
                         "renormalised, plus an ungated shared expert of 128), n_embd 256, attention 4 heads/2 KV heads/head_dim 64, "
                         "Mamba-2 d_inner 512, 8 heads of 64, d_state 32, 2 groups, conv 4 with bias, "
                         "embedding/residual/logit/attention multipliers 12/0.22/8/1/64, 512-token SentencePiece vocab (stories260K's)",
}
TYPES_OF = {"granitehybrid-moe": ("f16", "q4km")}


def main():
    ap = argparse.ArgumentParser()
    for k in ("llama-bin", "make-golden", "gguf-py", "vocab", "out", "work", "prompts", "commit"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--arch", action="append", default=[])
    a = ap.parse_args()
    archs = a.arch or list(DESC)
    prompts = json.load(open(a.prompts))
    models, golden = os.path.join(a.out, "models"), os.path.join(a.out, "golden")
    for d in (models, golden, a.work):
        os.makedirs(d, exist_ok=True)
    run([sys.executable, os.path.join(HERE, "synth_phi3_granite.py"), a.gguf_py, a.vocab, a.work, str(a.seed)] + archs,
        os.path.join(a.work, "synth.log"))
    quant = os.path.join(a.llama_bin, "llama-quantize")
    for arch in archs:
        master = os.path.join(a.work, f"{arch}-tiny-f32.gguf")
        for suffix, qtype in TYPES:
            if arch in TYPES_OF and suffix not in TYPES_OF[arch]:
                continue
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
