#!/usr/bin/env python3
"""Tiny random-weight F32 GGUF masters of the architectures phi3 (Phi-4-mini's form) and granitehybrid
(Granite-4.0-H's dense form: Mamba-2 + attention; and, as `granitehybrid-moe`, its MoE form of H-Tiny
and H-Small: every layer's FFN routed, plus a shared expert).

usage: synth_phi3_granite.py GGUF_PY_DIR VOCAB_GGUF OUT_DIR SEED [ARCH ...]

Same arguments, weight recipe (logits with a standard deviation near 2) and tokenizer copy as
synth_new_archs.py, whose copy_tokenizer this imports. Keys and tensor names are what llama.cpp
66d65ec's loader reads (src/llama-model.cpp, LLM_ARCH_PHI3 and LLM_ARCH_GRANITE_HYBRID).
"""
import importlib.util
import os
import sys

GGUF_PY, VOCAB, OUT, SEED = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ONLY = sys.argv[5:]

# synth_new_archs.py runs its architectures at import; with the architecture list "none" it only
# defines its helpers (it reads the same argv layout).
_argv = sys.argv
sys.argv = [_argv[0], GGUF_PY, VOCAB, OUT, str(SEED), "none"]
_spec = importlib.util.spec_from_file_location("synth_new_archs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "synth_new_archs.py"))
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)
sys.argv = _argv
np, GGUFWriter = base.np, base.GGUFWriter

ARCHS = {
    # Phi-4-mini's form: fused attn_qkv and ffn_up (gate | up), NeoX RoPE on 3/4 of each head
    # (n_rot 48 of 64, as 96 of 128), LongRoPE factors short/long [n_rot/2] with attn_factor
    # sqrt(1 + ln(32) / ln(orig)) (Phi-4-mini: 131072 / 4096), tied output, sliding_window 0.
    # The original context is 128 (scale 32 as Phi-4-mini's) so that the goldens' n_ctx 256 takes
    # the long factors, the path only LongRoPE models have.
    "phi3": dict(n_layer=2, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_rot=48, n_ff=768, ctx=4096,
                 orig_ctx=128, rope_base=10000.0, eps=1e-5),
    # Granite-4.0-H's form: head_count_kv per layer, 0 = Mamba-2 layer (pattern mamba, attention,
    # mamba); d_inner = 2 * n_embd (llama.cpp requires it), 8 heads of 64, d_state 32, 2 groups (the
    # real models have 1: 2 checks the head -> group mapping), conv 4 with bias; NoPE attention
    # (rope.scaling.finetuned false); multipliers as Granite-4.0-H-Micro's.
    "granitehybrid": dict(n_layer=3, n_embd=256, n_head=4, n_head_kv=[0, 2, 0], head_dim=64, n_ff=512, ctx=1 << 20,
                          rope_base=10000.0, eps=1e-5, d_inner=512, d_state=32, n_group=2, n_ssm_head=8, d_conv=4,
                          embedding_scale=12.0, residual_scale=0.22, logit_scale=8.0, attention_scale=0.015625),
    # Granite-4.0-H-Tiny's form (GGUF arch granitehybrid with expert_count): the dense form's Mamba-2 and
    # NoPE attention layers (pattern mamba, attention) whose FFN is llama.cpp's build_moe_ffn in every
    # layer (softmax router, top 2 of 8, renormalised, no scale) plus an ungated shared SwiGLU expert.
    # As in the real files, feed_forward_length is the experts' width (64 here; H-Tiny 512) and
    # expert_shared_feed_forward_length the shared expert's (128, twice the experts' as H-Tiny's 1024);
    # no expert_feed_forward_length key (llama.cpp reads n_ff for the experts). Router N(0, 1/n_embd):
    # router logits of standard deviation ~1, so most positions route by a clear margin.
    "granitehybrid-moe": dict(arch="granitehybrid", rng_index=2, n_layer=2, n_embd=256, n_head=4, n_head_kv=[0, 2],
                              head_dim=64, n_ff=64, ctx=1 << 20, rope_base=10000.0, eps=1e-5, d_inner=512,
                              d_state=32, n_group=2, n_ssm_head=8, d_conv=4, embedding_scale=12.0,
                              residual_scale=0.22, logit_scale=8.0, attention_scale=0.015625,
                              n_expert=8, n_used=2, n_ff_shexp=128),
}
# The random streams of the first two masters are keyed by their index in the sorted list of the
# original two (granitehybrid 0, phi3 1), so adding a master leaves theirs unchanged.
ARCHS["granitehybrid"]["rng_index"] = 0
ARCHS["phi3"]["rng_index"] = 1


def make(key, c, seed):
    path = os.path.join(OUT, f"{key}-tiny-f32.gguf")
    rng = np.random.default_rng([seed, 100 + c["rng_index"]])
    arch = c.get("arch", key)
    NE = c.get("n_expert", 0)
    w = GGUFWriter(path, arch)
    E, L, H, HD, FF = c["n_embd"], c["n_layer"], c["n_head"], c["head_dim"], c["n_ff"]
    hkv = c["n_head_kv"]
    # Not "phi3" in the name: llama.cpp's vocab loader then sets attributes of Phi-3's special tokens
    # (<|endoftext|>), which stories260K's vocabulary lacks.
    w.add_name(("Phi 4 Mini" if arch == "phi3" else key) + f" tiny (random weights, seed {seed})")
    w.add_context_length(c["ctx"]); w.add_embedding_length(E); w.add_block_count(L)
    w.add_feed_forward_length(FF); w.add_head_count(H); w.add_head_count_kv(hkv)
    w.add_rope_freq_base(c["rope_base"]); w.add_layer_norm_rms_eps(c["eps"])
    w.add_file_type(0)  # ALL_F32
    if arch == "phi3":
        w.add_rope_dimension_count(c["n_rot"])
        w.add_rope_scaling_orig_ctx_len(c["orig_ctx"])
        scale = c["ctx"] / c["orig_ctx"]
        w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(scale) / np.log(c["orig_ctx"]))))
        w.add_sliding_window(0)
    if arch == "granitehybrid":
        w.add_key_length(HD); w.add_value_length(HD)
        w.add_ssm_conv_kernel(c["d_conv"]); w.add_ssm_state_size(c["d_state"])
        w.add_ssm_group_count(c["n_group"]); w.add_ssm_inner_size(c["d_inner"])
        w.add_ssm_time_step_rank(c["n_ssm_head"])
        w.add_embedding_scale(c["embedding_scale"]); w.add_residual_scale(c["residual_scale"])
        w.add_logit_scale(c["logit_scale"]); w.add_attention_scale(c["attention_scale"])
        w.add_rope_scaling_finetuned(False)
        if NE:
            w.add_expert_count(NE); w.add_expert_used_count(c["n_used"])
            w.add_expert_shared_feed_forward_length(c["n_ff_shexp"])
    n_vocab = base.copy_tokenizer(VOCAB, w)

    def mat(rows, cols, std):  # numpy (rows, cols) = ggml ne (cols, rows)
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def stack(n, rows, cols, std):  # numpy (n, rows, cols) = ggml ne (cols, rows, n)
        return (rng.standard_normal((n, rows, cols)) * std).astype(np.float32)

    def norm(n, mean=1.0, std=0.1):
        return (mean + rng.standard_normal(n) * std).astype(np.float32)

    s = 1.0 / np.sqrt(E)
    t = {}
    if arch == "phi3":
        t["token_embd.weight"] = mat(n_vocab, E, 2.0 * s)  # tied output
        t["output_norm.weight"] = norm(E)
        half = c["n_rot"] // 2
        # Short factors near 1, long ones growing with the frequency index like Phi-4-mini's (1 .. ~40).
        t["rope_factors_short.weight"] = (1.0 + rng.uniform(0.0, 0.3, half)).astype(np.float32)
        t["rope_factors_long.weight"] = np.geomspace(1.0, 40.0, half).astype(np.float32)
        for i in range(L):
            p = f"blk.{i}."
            t[p + "attn_norm.weight"] = norm(E)
            t[p + "attn_qkv.weight"] = np.concatenate([mat(H * HD, E, 1.4 * s), mat(hkv * HD, E, 1.4 * s),
                                                       mat(hkv * HD, E, s)])
            t[p + "attn_output.weight"] = mat(E, H * HD, 1.0 / np.sqrt(H * HD))
            t[p + "ffn_norm.weight"] = norm(E)
            t[p + "ffn_up.weight"] = np.concatenate([mat(FF, E, s), mat(FF, E, s)])  # gate | up
            t[p + "ffn_down.weight"] = mat(E, FF, 1.0 / np.sqrt(FF))
    else:
        # Embeddings are multiplied by embedding_scale and logits divided by logit_scale: scale the
        # weights back so the residual stream and the logits stay at the recipe's magnitudes.
        t["token_embd.weight"] = mat(n_vocab, E, 1.0 / c["embedding_scale"])
        t["output_norm.weight"] = norm(E)
        t["output.weight"] = mat(n_vocab, E, 2.0 * s * c["logit_scale"])
        DI, DS, NG, NH, K = c["d_inner"], c["d_state"], c["n_group"], c["n_ssm_head"], c["d_conv"]
        conv_ch = DI + 2 * NG * DS
        rs = 1.0 / c["residual_scale"]  # sublayer outputs are scaled by residual_scale
        for i in range(L):
            p = f"blk.{i}."
            t[p + "attn_norm.weight"] = norm(E)
            if hkv[i] == 0:
                t[p + "ssm_in.weight"] = mat(2 * DI + 2 * NG * DS + NH, E, s)  # z | x B C | dt
                t[p + "ssm_conv1d.weight"] = mat(conv_ch, K, 0.5)  # ggml {d_conv, conv_ch}
                t[p + "ssm_conv1d.bias"] = (rng.standard_normal(conv_ch) * 0.1).astype(np.float32)
                t[p + "ssm_dt.bias"] = (rng.standard_normal(NH) * 0.5).astype(np.float32)
                # ssm_a = -exp(A_log) ~ -(1..16) as Mamba-2's init; dA = exp(softplus(dt) * a)
                t[p + "ssm_a"] = (-rng.uniform(1.0, 16.0, (NH, 1))).astype(np.float32)  # ggml {1, NH}
                t[p + "ssm_d"] = (1.0 + rng.standard_normal((NH, 1)) * 0.1).astype(np.float32)
                t[p + "ssm_norm.weight"] = norm(DI).reshape(NG, DI // NG)  # ggml {DI / NG, NG}
                t[p + "ssm_out.weight"] = mat(E, DI, rs / np.sqrt(DI))
            else:
                kv = hkv[i]
                t[p + "attn_q.weight"] = mat(H * HD, E, 1.4 * s * 8.0)  # attention.scale 1/64 instead of 1/8
                t[p + "attn_k.weight"] = mat(kv * HD, E, 1.4 * s)
                t[p + "attn_v.weight"] = mat(kv * HD, E, s)
                t[p + "attn_output.weight"] = mat(E, H * HD, rs / np.sqrt(H * HD))
            t[p + "ffn_norm.weight"] = norm(E)
            if NE:
                SF = c["n_ff_shexp"]
                t[p + "ffn_gate_inp.weight"] = mat(NE, E, s)
                t[p + "ffn_gate_exps.weight"] = stack(NE, FF, E, s)
                t[p + "ffn_up_exps.weight"] = stack(NE, FF, E, s)
                t[p + "ffn_down_exps.weight"] = stack(NE, E, FF, rs / np.sqrt(FF))
                t[p + "ffn_gate_shexp.weight"] = mat(SF, E, s)
                t[p + "ffn_up_shexp.weight"] = mat(SF, E, s)
                t[p + "ffn_down_shexp.weight"] = mat(E, SF, rs / np.sqrt(SF))
                continue
            t[p + "ffn_gate.weight"] = mat(FF, E, s)
            t[p + "ffn_up.weight"] = mat(FF, E, s)
            t[p + "ffn_down.weight"] = mat(E, FF, rs / np.sqrt(FF))
    for name, x in t.items():
        w.add_tensor(name, x)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    print("wrote", path, os.path.getsize(path), f"({len(t)} tensors)")


for a, cfg in ARCHS.items():
    if ONLY and a not in ONLY:
        continue
    make(a, cfg, SEED)
