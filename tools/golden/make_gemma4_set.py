#!/usr/bin/env python3
"""Make the tiny gemma4 test models and their goldens (tests/models, tests/golden of the repository).

usage: make_gemma4_set.py --llama-bin DIR --make-golden BIN --gguf-py DIR --vocab VOCAB.gguf
                          --out DIR --work DIR --seed N --commit SHA [--variant moe]

  --llama-bin    bin/ of a llama.cpp build that knows gemma4 and has llama-quantize (3f545be)
  --make-golden  make_golden built against the same llama.cpp (build_make_golden.sh)
  --gguf-py      that tree's gguf-py; --vocab: stories260K.gguf (tokenizer keys are copied from it)
  --out          writes OUT/models/gemma4-tiny-{f16,q8_0,q4km}.gguf and OUT/golden/<same stem>.json
  --work         the F32 master, the F32 twins and logs (not shipped)

The steps of make_newarch_set.py (synth_gemma4.py, llama-quantize with 2 threads and the normal mixing
rules, make_golden with an F32 twin as reference and the file itself as quantized run, n_ctx 256,
2 threads, KV cache F32, no flash attention), with prompts per file to keep the repository small:
every file has the short, the special-token and a story prompt; the F16 golden's story is long
(PROMPT_LONG: about 190 tokens, well past the sliding window of 8 and the 64-slot rings of the
engine's sliding layers), the Q8_0 and Q4_K_M goldens' the 74-token story of the shared goldens.

--variant moe: the 26B-A4B layout (synth_gemma4.py's gemma4-moe) as gemma4-moe-tiny-{f16,q4km}, each
golden with the short, the special-token and the 74-token story prompt (make_golden records the router
logits, ffn_moe_logits-<layer>, for the near-tie rule of test_moe).
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TYPES = [("f16", "F16"), ("q8_0", "Q8_0"), ("q4km", "Q4_K_M")]
DESC = ("gemma4-tiny: gemma4 arch, random weights, 5 layers (sliding, sliding, global, sliding, global; window 8), "
        "the last 2 layers share the K/V of layers 1 and 2, n_embd 256, 2 heads, sliding layers head_dim 64 with 2 KV "
        "heads, global layers head_dim 128 with 1 KV head and proportional RoPE (16 of 64 pairs), n_ff 128 (256 on "
        "the KV-sharing layers), per-layer embeddings of 32, final logit soft-cap 15, tied output, 512-token "
        "SentencePiece vocab (stories260K's)")
REF_DESC = ("F32 twin: every tensor of {f} dequantized to F32, KV cache F32; exact math except that ggml-cpu's "
            "GELU goes through an F16 lookup table (about 5e-3 from an exact-GELU computation)")
PROMPT_SHORT = "Once upon a time"
PROMPT_SPECIAL = "Hi é 😀</s><s>Tom"
PROMPT_STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. "
                "One day, she saw a big, red ball in the park. She ran to it and kicked it very hard.")
PROMPT_LONG = (PROMPT_STORY + " The ball flew over the fence and into the garden of an old man. Lily was scared, "
               "but she went to the door and knocked. The old man opened the door and smiled. \"Is this your ball?\" "
               "he asked. Lily nodded and said sorry. The man gave her the ball and a cookie. They became good "
               "friends.")
PROMPTS = {"f16": [PROMPT_SHORT, PROMPT_SPECIAL, PROMPT_LONG],
           "q8_0": [PROMPT_SHORT, PROMPT_SPECIAL, PROMPT_STORY],
           "q4km": [PROMPT_SHORT, PROMPT_SPECIAL, PROMPT_STORY]}
MOE_TYPES = [("f16", "F16"), ("q4km", "Q4_K_M")]
MOE_DESC = ("gemma4-moe-tiny: gemma4 arch in the 26B-A4B layout, random weights, 3 layers (sliding, sliding, "
            "global; window 8), n_embd 256, 2 heads, sliding layers head_dim 64 with 2 KV heads, global layers "
            "head_dim 128 with 1 KV head, V = K projection and proportional RoPE (16 of 64 pairs); every layer a "
            "dense GELU-tanh FFN (n_ff 64, 64, 96) beside 8 routed GELU-tanh experts (top 2, width 32, softmax "
            "router on rms_norm(x) / sqrt(n_embd) * ffn_gate_inp.scale, renormalised, per-expert output scales "
            "ffn_down_exps.scale), no per-layer embeddings, no KV sharing, final logit soft-cap 15, tied output, "
            "512-token SentencePiece vocab (stories260K's)")
MOE_PROMPTS = [PROMPT_SHORT, PROMPT_SPECIAL, PROMPT_STORY]


def run(cmd, log):
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}; see {log}")


def main():
    ap = argparse.ArgumentParser()
    for k in ("llama-bin", "make-golden", "gguf-py", "vocab", "out", "work", "commit"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--variant", choices=["dense", "moe"], default="dense")
    a = ap.parse_args()
    moe = a.variant == "moe"
    name = "gemma4-moe" if moe else "gemma4"
    models, golden = os.path.join(a.out, "models"), os.path.join(a.out, "golden")
    for d in (models, golden, a.work):
        os.makedirs(d, exist_ok=True)
    run([sys.executable, os.path.join(HERE, "synth_gemma4.py"), a.gguf_py, a.vocab, a.work, str(a.seed), name],
        os.path.join(a.work, "synth.log"))
    master = os.path.join(a.work, f"{name}-tiny-f32.gguf")
    quant = os.path.join(a.llama_bin, "llama-quantize")
    for suffix, qtype in (MOE_TYPES if moe else TYPES):
        stem = f"{name}-tiny-{suffix}"
        dst = os.path.join(models, stem + ".gguf")
        twin = os.path.join(a.work, f"twin-{stem}.gguf")
        for p in (dst, twin):
            if os.path.exists(p):
                os.remove(p)
        run([quant, master, dst, qtype, "2"], os.path.join(a.work, f"quantize-{stem}.log"))
        cmd = [a.make_golden, "--model", dst, "--twin", twin, "--out", os.path.join(golden, stem + ".json"),
               "--commit", a.commit, "--description", f"{MOE_DESC if moe else DESC}; this file: llama-quantize {qtype} of the F32 master",
               "--run-desc", "reference=" + REF_DESC.format(f=stem + ".gguf")]
        for p in (MOE_PROMPTS if moe else PROMPTS[suffix]):
            cmd += ["--prompt", p]
        log = os.path.join(a.work, f"golden-{stem}.log")
        run(cmd, log)
        print(stem, os.path.getsize(dst), "bytes;", open(log).read().strip().splitlines()[-1])


if __name__ == "__main__":
    main()
