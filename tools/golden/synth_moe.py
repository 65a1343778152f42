#!/usr/bin/env python3
"""Tiny random-weight F32 GGUF masters of the mixture-of-experts architectures qwen3moe, lfm2moe and
qwen35moe (issue 32), written with llama.cpp's own gguf-py so the keys and tensor names are what its
loader reads (src/llama-model.cpp of 66d65ec).

usage: synth_moe.py GGUF_PY_DIR VOCAB_GGUF OUT_DIR SEED ARCH [ARCH ...]

Same conventions as synth_new_archs.py (its copy_tokenizer is reused): writes OUT_DIR/<arch>-tiny-f32.gguf;
weights N(0, sigma^2) with the zoo recipe (logits with a standard deviation near 2), norm weights
1 + N(0, 0.1^2), q/k norms N(1.6, 0.2^2). The MoE parts: the router ffn_gate_inp N(0, 1/n_embd) (router
logits of standard deviation ~1, so routing is decided by clear margins at most positions), experts stacked
3-D [n_expert][rows][cols] like the dense FFN's matrices, lfm2moe's selection bias exp_probs_b N(0, 0.05^2)
(comparable with the sigmoid probabilities' spread), qwen35moe's shared-expert gate N(0, 1/n_embd).
Expert FFN width 128: gate/up (256 columns) quantize to K-quants, down (128 columns) takes llama-quantize's
fallback type, so the expert path meets two weight types.
"""
import os
import sys

GGUF_PY, VOCAB, OUT, SEED = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ONLY = sys.argv[5:]
if not ONLY:
    sys.exit(__doc__)
# synth_new_archs.py makes its own architectures at import, unless its arch list names none of them.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.argv = [sys.argv[0], GGUF_PY, VOCAB, OUT, str(SEED), "--none--"]
import synth_new_archs as base  # noqa: E402
from synth_new_archs import np, GGUFWriter  # noqa: E402
from gguf import ExpertGatingFuncType  # noqa: E402

ARCHS = {
    # Qwen3 MoE: qwen3's attention, every layer's FFN routed (softmax, top 2 of 8, renormalised).
    "qwen3moe": dict(n_layer=2, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=768, ctx=4096,
                     rope_base=1000000.0, eps=1e-6, tied=False, n_expert=8, n_used=2, n_ff_exp=128),
    # LFM2 MoE: conv, attention, conv; layer 0 dense (leading_dense_block_count 1), layers 1-2 routed
    # (sigmoid gating + selection bias, top 2 of 8, renormalised); tied output, token_embd_norm.
    "lfm2moe": dict(n_layer=3, n_embd=256, n_head=4, n_head_kv=[0, 2, 0], head_dim=64, n_ff=256, ctx=4096,
                    rope_base=1000000.0, eps=1e-5, tied=True, l_cache=3, n_expert=8, n_used=2, n_ff_exp=128,
                    n_dense=1),
    # Qwen3.5 MoE: layer 0 gated delta net, layer 1 gated attention (full_attention_interval 2), both routed
    # (softmax, top 2 of 8, renormalised) plus a shared expert of 128 with its sigmoid gate.
    "qwen35moe": dict(n_layer=2, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=768, ctx=4096,
                      rope_base=10000000.0, eps=1e-6, tied=False, n_rot=16, sections=[3, 3, 2, 0],
                      d_conv=4, d_state=32, n_group=2, dt_rank=4, full_attn_interval=2,
                      n_expert=8, n_used=2, n_ff_exp=128, n_ff_shexp=128),
}


def make(arch, c, seed):
    path = os.path.join(OUT, f"{arch}-tiny-f32.gguf")
    rng = np.random.default_rng([seed, 100 + sorted(ARCHS).index(arch)])
    w = GGUFWriter(path, arch)
    E, L, H, HD, FF = c["n_embd"], c["n_layer"], c["n_head"], c["head_dim"], c["n_ff"]
    NE, FE = c["n_expert"], c["n_ff_exp"]
    hkv = c["n_head_kv"]
    w.add_name(f"{arch}-tiny (random weights, seed {seed})")
    w.add_context_length(c["ctx"]); w.add_embedding_length(E); w.add_block_count(L)
    w.add_feed_forward_length(FF); w.add_head_count(H); w.add_head_count_kv(hkv)
    w.add_key_length(HD); w.add_value_length(HD)
    w.add_rope_freq_base(c["rope_base"]); w.add_layer_norm_rms_eps(c["eps"])
    w.add_file_type(0)  # ALL_F32
    w.add_expert_count(NE); w.add_expert_used_count(c["n_used"]); w.add_expert_feed_forward_length(FE)
    if arch == "lfm2moe":
        w.add_shortconv_l_cache(c["l_cache"])
        w.add_leading_dense_block_count(c["n_dense"])
        w.add_expert_gating_func(ExpertGatingFuncType.SIGMOID)
    if arch == "qwen35moe":
        w.add_rope_dimension_count(c["n_rot"]); w.add_rope_dimension_sections(c["sections"])
        w.add_ssm_conv_kernel(c["d_conv"]); w.add_ssm_state_size(c["d_state"])
        w.add_ssm_group_count(c["n_group"]); w.add_ssm_time_step_rank(c["dt_rank"])
        w.add_ssm_inner_size(c["d_state"] * c["dt_rank"])
        w.add_full_attention_interval(c["full_attn_interval"])
        w.add_expert_shared_feed_forward_length(c["n_ff_shexp"])
    n_vocab = base.copy_tokenizer(VOCAB, w)

    def mat(rows, cols, std):  # numpy (rows, cols) = ggml ne (cols, rows)
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def stack(n, rows, cols, std):  # numpy (n, rows, cols) = ggml ne (cols, rows, n)
        return (rng.standard_normal((n, rows, cols)) * std).astype(np.float32)

    def norm(n, mean=1.0, std=0.1):
        return (mean + rng.standard_normal(n) * std).astype(np.float32)

    s = 1.0 / np.sqrt(E)
    tensors = {}
    tensors["token_embd.weight"] = mat(n_vocab, E, 2.0 * s if c["tied"] else 1.0)
    tensors["token_embd_norm.weight" if arch == "lfm2moe" else "output_norm.weight"] = norm(E)
    if not c["tied"]:
        tensors["output.weight"] = mat(n_vocab, E, 2.0 * s)
    for i in range(L):
        p = f"blk.{i}."
        kv = hkv[i] if isinstance(hkv, list) else hkv
        if arch == "qwen35moe":
            recurrent = (i + 1) % c["full_attn_interval"] != 0
        elif arch == "lfm2moe":
            recurrent = kv == 0
        else:
            recurrent = False
        tensors[p + "attn_norm.weight"] = norm(E)
        if not recurrent:
            q_rows = 2 * H * HD if arch == "qwen35moe" else H * HD
            tensors[p + "attn_q.weight"] = mat(q_rows, E, 1.4 * s)
            tensors[p + "attn_k.weight"] = mat(kv * HD, E, 1.4 * s)
            tensors[p + "attn_v.weight"] = mat(kv * HD, E, s)
            tensors[p + "attn_output.weight"] = mat(E, H * HD, 1.0 / np.sqrt(H * HD))
            tensors[p + "attn_q_norm.weight"] = norm(HD, 1.6, 0.2)
            tensors[p + "attn_k_norm.weight"] = norm(HD, 1.6, 0.2)
        elif arch == "qwen35moe":
            dk, nk, nv = c["d_state"], c["n_group"], c["dt_rank"]
            key_dim, value_dim = dk * nk, dk * nv
            conv_dim = 2 * key_dim + value_dim
            tensors[p + "attn_qkv.weight"] = mat(conv_dim, E, s)
            tensors[p + "attn_gate.weight"] = mat(value_dim, E, s)
            tensors[p + "ssm_conv1d.weight"] = mat(conv_dim, c["d_conv"], 0.5)
            tensors[p + "ssm_dt.bias"] = (rng.standard_normal(nv) * 0.5).astype(np.float32)
            tensors[p + "ssm_a"] = (-rng.uniform(0.05, 1.0, nv)).astype(np.float32)
            tensors[p + "ssm_beta.weight"] = mat(nv, E, s)
            tensors[p + "ssm_alpha.weight"] = mat(nv, E, s)
            tensors[p + "ssm_norm.weight"] = norm(dk)
            tensors[p + "ssm_out.weight"] = mat(E, value_dim, 1.0 / np.sqrt(value_dim))
        else:  # lfm2moe short convolution
            tensors[p + "shortconv.conv.weight"] = mat(E, c["l_cache"], 0.6)
            tensors[p + "shortconv.in_proj.weight"] = mat(3 * E, E, s)
            tensors[p + "shortconv.out_proj.weight"] = mat(E, E, s)
        tensors[p + ("post_attention_norm.weight" if arch == "qwen35moe" else "ffn_norm.weight")] = norm(E)
        if arch == "lfm2moe" and i < c["n_dense"]:
            tensors[p + "ffn_gate.weight"] = mat(FF, E, s)
            tensors[p + "ffn_up.weight"] = mat(FF, E, s)
            tensors[p + "ffn_down.weight"] = mat(E, FF, 1.0 / np.sqrt(FF))
            continue
        tensors[p + "ffn_gate_inp.weight"] = mat(NE, E, s)
        tensors[p + "ffn_gate_exps.weight"] = stack(NE, FE, E, s)
        tensors[p + "ffn_up_exps.weight"] = stack(NE, FE, E, s)
        tensors[p + "ffn_down_exps.weight"] = stack(NE, E, FE, 1.0 / np.sqrt(FE))
        if arch == "lfm2moe":
            tensors[p + "exp_probs_b.bias"] = (rng.standard_normal(NE) * 0.05).astype(np.float32)
        if arch == "qwen35moe":
            SF = c["n_ff_shexp"]
            tensors[p + "ffn_gate_inp_shexp.weight"] = (rng.standard_normal(E) * s).astype(np.float32)
            tensors[p + "ffn_gate_shexp.weight"] = mat(SF, E, s)
            tensors[p + "ffn_up_shexp.weight"] = mat(SF, E, s)
            tensors[p + "ffn_down_shexp.weight"] = mat(E, SF, 1.0 / np.sqrt(SF))
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    print("wrote", path, os.path.getsize(path), f"({len(tensors)} tensors)")


for a in ONLY:
    if a not in ARCHS:
        sys.exit(f"unknown architecture {a} (known: {', '.join(ARCHS)})")
    make(a, ARCHS[a], SEED)
