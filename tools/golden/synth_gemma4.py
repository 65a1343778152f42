#!/usr/bin/env python3
"""Tiny random-weight F32 GGUF master of the gemma4 architecture (Gemma 4 E2B/E4B text layout).

usage: synth_gemma4.py GGUF_PY_DIR VOCAB_GGUF OUT_DIR SEED [gemma4] [gemma4-moe]

  GGUF_PY_DIR  gguf-py of a llama.cpp tree that knows gemma4 (upstream of 2026-08, 3f545be)
  VOCAB_GGUF   every tokenizer.* key is copied verbatim from it (stories260K.gguf: 512-token SentencePiece)
  OUT_DIR      writes gemma4-tiny-f32.gguf (gemma4) and gemma4-moe-tiny-f32.gguf (gemma4-moe) there
               (overwrites); no name: gemma4 only
  SEED         numpy seed

The arguments are those of synth_new_archs.py, whose tokenizer copy this reuses (importing it with an
architecture list that names none of its own makes nothing). Keys and tensor names are those the
3f545be loader reads (src/models/gemma4.cpp, conversion/gemma.py):

  layers       5: sliding, sliding, global, sliding, global (attention.sliding_window_pattern, a bool array)
  KV sharing   attention.shared_kv_layers 2: layers 3 and 4 have no K/V of their own and read those of
               layer 1 (the last sliding layer with K/V) and layer 2 (the last global one)
  heads        2 query heads; sliding layers head_dim 64 with 2 KV heads, global layers head_dim 128 with
               1 KV head (key_length / key_length_swa, head_count_kv per layer)
  RoPE         sliding: base 10000 (rope.freq_base_swa), all 64 dims; global: base 1e6, rope_freqs.weight
               gives "proportional" RoPE (the first 16 of 64 pairs rotate, the others have factor 1e30)
  FFN          GELU(tanh)-gated, n_ff 128, 256 on the KV-shared layers (use_double_wide_mlp)
  per-layer    embedding_length_per_layer_input 32: per_layer_token_embd [n_vocab][5 * 32],
  embeddings   per_layer_model_proj, per_layer_proj_norm, and per layer inp_gate, proj, post_norm
  QK-norm      weights about 1.6 / head_dim^(1/4): gemma4 does not scale q.k, so this gives the attention
               the sharpness of gemma3-tiny (weights 1.6, q.k / sqrt(head_dim)); with 1.6 the scores reach
               ~100 and llama.cpp's own F32-vs-F16 runs differ by 0.5 in the logits
  other        layer_output_scale per layer, final_logit_softcapping 15 (the real models have 30; lower
               so that the cap bends the logits of this model clearly), tied output, norms applied as
               weights (Gemma 4 files store them unshifted)

gemma4-moe: the 26B-A4B layout (google/gemma-4-26B-A4B's config: every layer has the dense FFN and
the routed experts side by side, no per-layer embeddings, no KV sharing, the global layers' V is their
K projection (attention_k_eq_v: no attn_v), 5 sliding : 1 global), as 3f545be computes it
(src/models/gemma4.cpp, conversion/gemma.py):

  layers       3: sliding, sliding, global (window 8); shared_kv_layers 0; per-layer input 0
  heads        as gemma4 above (sliding head_dim 64 with 2 KV heads, global 128 with 1 KV head)
  FFN          per layer: x_mlp = post_ffw_norm_1(ffn(ffn_norm(h))) with the dense GELU(tanh) FFN
               (n_ff 64, 64, 96: per-layer widths), x_moe = post_ffw_norm_2(moe(pre_ffw_norm_2(h))),
               h += post_ffw_norm(x_mlp + x_moe)
  router       logits = ffn_gate_inp . (rms_norm(h) / sqrt(n_embd) * ffn_gate_inp.scale): an input
               of norm ~1, so ffn_gate_inp N(0, 2^2) gives logits of standard deviation ~2 (routing by
               clear margins at most positions); softmax, top 2 of 8, renormalised
  experts      8, GELU(tanh)-gated, expert_feed_forward_length 32 (ffn_gate_exps, ffn_up_exps,
               ffn_down_exps stacked [n_expert][rows][cols]); ffn_down_exps.scale: per-expert output
               scales U(0.5, 1.5) (the checkpoint's router.per_expert_scale)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT, SEED = sys.argv[3], int(sys.argv[4])
ONLY = sys.argv[5:]
_argv = sys.argv
sys.argv = _argv[:5] + ["(none)"]  # synth_new_archs makes the architectures named here: none of its own
sys.path.insert(0, HERE)
import synth_new_archs  # noqa: E402  (also puts GGUF_PY_DIR on sys.path and stubs sentencepiece)
sys.argv = _argv
import numpy as np  # noqa: E402
from gguf import GGUFWriter  # noqa: E402

# SYNTH_GEMMA4_K_EQ_V=1: no attn_v on the global layers, as the 31B model (attention_k_eq_v); llama.cpp
# then uses the K projection as V. For a check of that path; the committed goldens do not use it.
K_EQ_V = os.environ.get("SYNTH_GEMMA4_K_EQ_V") == "1"
C = dict(n_embd=256, n_head=2, swa=[True, True, False, True, False], n_kv_shared=2,
         hd_swa=64, hd_full=128, kv_swa=2, kv_full=1, n_ff=128, n_pl=32, ctx=4096, window=8,
         base_full=1000000.0, base_swa=10000.0, rot_frac_full=0.25, eps=1e-6, softcap=15.0)


def make(seed):
    c = C
    path = os.path.join(OUT, "gemma4-tiny-f32.gguf")
    rng = np.random.default_rng([seed, 4])
    w = GGUFWriter(path, "gemma4")
    E, H, L, PL = c["n_embd"], c["n_head"], len(c["swa"]), c["n_pl"]
    first_shared = L - c["n_kv_shared"]
    n_ff = [c["n_ff"] if l < first_shared else 2 * c["n_ff"] for l in range(L)]
    w.add_name(f"gemma4-tiny (random weights, seed {seed})")
    w.add_context_length(c["ctx"]); w.add_embedding_length(E); w.add_block_count(L)
    w.add_feed_forward_length(n_ff); w.add_head_count(H)
    w.add_head_count_kv([c["kv_swa"] if s else c["kv_full"] for s in c["swa"]])
    w.add_key_length(c["hd_full"]); w.add_value_length(c["hd_full"])
    w.add_key_length_swa(c["hd_swa"]); w.add_value_length_swa(c["hd_swa"])
    w.add_rope_dimension_count(c["hd_full"]); w.add_rope_dimension_count_swa(c["hd_swa"])
    w.add_rope_freq_base(c["base_full"]); w.add_rope_freq_base_swa(c["base_swa"])
    w.add_layer_norm_rms_eps(c["eps"]); w.add_sliding_window(c["window"])
    w.add_sliding_window_pattern(c["swa"]); w.add_shared_kv_layers(c["n_kv_shared"])
    w.add_embedding_length_per_layer_input(PL); w.add_final_logit_softcapping(c["softcap"])
    w.add_file_type(0)  # ALL_F32
    n_vocab = synth_new_archs.copy_tokenizer(synth_new_archs.VOCAB, w)

    def mat(rows, cols, std):  # numpy (rows, cols) = ggml ne (cols, rows)
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def norm(n, mean=1.0, std=0.1):
        return (mean + rng.standard_normal(n) * std).astype(np.float32)

    s = 1.0 / np.sqrt(E)
    t = {}
    t["token_embd.weight"] = mat(n_vocab, E, 2.0 * s)  # x = sqrt(E) * row: standard deviation 2
    t["output_norm.weight"] = norm(E)
    hd_full = c["hd_full"]
    n_rot = int(hd_full * c["rot_frac_full"] / 2)
    t["rope_freqs.weight"] = np.array([1.0] * n_rot + [1e30] * (hd_full // 2 - n_rot), dtype=np.float32)
    t["per_layer_token_embd.weight"] = mat(n_vocab, L * PL, 1.0 / np.sqrt(PL))
    t["per_layer_model_proj.weight"] = mat(L * PL, E, s)
    t["per_layer_proj_norm.weight"] = norm(PL)
    for l in range(L):
        p = f"blk.{l}."
        hd = c["hd_swa"] if c["swa"][l] else hd_full
        kv = c["kv_swa"] if c["swa"][l] else c["kv_full"]
        t[p + "attn_norm.weight"] = norm(E)
        t[p + "attn_q.weight"] = mat(H * hd, E, 1.4 * s)
        qk = 1.6 / hd ** 0.25  # q.k unscaled: as sharp as gemma3-tiny's 1.6-weighted q.k / sqrt(head_dim)
        t[p + "attn_q_norm.weight"] = norm(hd, qk, 0.125 * qk)
        if l < first_shared:  # the KV-shared layers have no K/V projections
            t[p + "attn_k.weight"] = mat(kv * hd, E, 1.4 * s)
            if c["swa"][l] or not K_EQ_V:  # K_EQ_V: the global layers' V is their K projection (31B)
                t[p + "attn_v.weight"] = mat(kv * hd, E, s)
            t[p + "attn_k_norm.weight"] = norm(hd, qk, 0.125 * qk)
        t[p + "attn_output.weight"] = mat(E, H * hd, 1.0 / np.sqrt(H * hd))
        t[p + "post_attention_norm.weight"] = norm(E)
        t[p + "ffn_norm.weight"] = norm(E)
        t[p + "ffn_gate.weight"] = mat(n_ff[l], E, s)
        t[p + "ffn_up.weight"] = mat(n_ff[l], E, s)
        t[p + "ffn_down.weight"] = mat(E, n_ff[l], 1.0 / np.sqrt(n_ff[l]))
        t[p + "post_ffw_norm.weight"] = norm(E)
        t[p + "inp_gate.weight"] = mat(PL, E, 0.5 * s)
        t[p + "proj.weight"] = mat(E, PL, 1.0 / np.sqrt(PL))
        t[p + "post_norm.weight"] = norm(E)
        t[p + "layer_output_scale.weight"] = rng.uniform(0.6, 1.2, 1).astype(np.float32)
    for name, v in t.items():
        w.add_tensor(name, v)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    print("wrote", path, os.path.getsize(path), f"({len(t)} tensors)")


CM = dict(C, swa=[True, True, False], n_kv_shared=0, n_pl=0, n_ff=[64, 64, 96], n_expert=8, n_used=2,
          n_ff_exp=32, router_std=2.0)


def make_moe(seed):
    c = CM
    path = os.path.join(OUT, "gemma4-moe-tiny-f32.gguf")
    rng = np.random.default_rng([seed, 26])
    w = GGUFWriter(path, "gemma4")
    E, H, L = c["n_embd"], c["n_head"], len(c["swa"])
    NE, FE = c["n_expert"], c["n_ff_exp"]
    w.add_name(f"gemma4-moe-tiny (random weights, seed {seed})")
    w.add_context_length(c["ctx"]); w.add_embedding_length(E); w.add_block_count(L)
    w.add_feed_forward_length(c["n_ff"]); w.add_head_count(H)
    w.add_head_count_kv([c["kv_swa"] if s else c["kv_full"] for s in c["swa"]])
    w.add_key_length(c["hd_full"]); w.add_value_length(c["hd_full"])
    w.add_key_length_swa(c["hd_swa"]); w.add_value_length_swa(c["hd_swa"])
    w.add_rope_dimension_count(c["hd_full"]); w.add_rope_dimension_count_swa(c["hd_swa"])
    w.add_rope_freq_base(c["base_full"]); w.add_rope_freq_base_swa(c["base_swa"])
    w.add_layer_norm_rms_eps(c["eps"]); w.add_sliding_window(c["window"])
    w.add_sliding_window_pattern(c["swa"]); w.add_shared_kv_layers(0)
    w.add_embedding_length_per_layer_input(0); w.add_final_logit_softcapping(c["softcap"])
    w.add_expert_count(NE); w.add_expert_used_count(c["n_used"]); w.add_expert_feed_forward_length(FE)
    w.add_file_type(0)  # ALL_F32
    n_vocab = synth_new_archs.copy_tokenizer(synth_new_archs.VOCAB, w)

    def mat(rows, cols, std):  # numpy (rows, cols) = ggml ne (cols, rows)
        return (rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def stack(n, rows, cols, std):  # numpy (n, rows, cols) = ggml ne (cols, rows, n)
        return (rng.standard_normal((n, rows, cols)) * std).astype(np.float32)

    def norm(n, mean=1.0, std=0.1):
        return (mean + rng.standard_normal(n) * std).astype(np.float32)

    s = 1.0 / np.sqrt(E)
    t = {}
    t["token_embd.weight"] = mat(n_vocab, E, 2.0 * s)
    t["output_norm.weight"] = norm(E)
    hd_full = c["hd_full"]
    n_rot = int(hd_full * c["rot_frac_full"] / 2)
    t["rope_freqs.weight"] = np.array([1.0] * n_rot + [1e30] * (hd_full // 2 - n_rot), dtype=np.float32)
    for l in range(L):
        p = f"blk.{l}."
        hd = c["hd_swa"] if c["swa"][l] else hd_full
        kv = c["kv_swa"] if c["swa"][l] else c["kv_full"]
        ff = c["n_ff"][l]
        t[p + "attn_norm.weight"] = norm(E)
        t[p + "attn_q.weight"] = mat(H * hd, E, 1.4 * s)
        qk = 1.6 / hd ** 0.25
        t[p + "attn_q_norm.weight"] = norm(hd, qk, 0.125 * qk)
        t[p + "attn_k.weight"] = mat(kv * hd, E, 1.4 * s)
        if c["swa"][l]:  # the global layers' V is their K projection (attention_k_eq_v)
            t[p + "attn_v.weight"] = mat(kv * hd, E, s)
        t[p + "attn_k_norm.weight"] = norm(hd, qk, 0.125 * qk)
        t[p + "attn_output.weight"] = mat(E, H * hd, 1.0 / np.sqrt(H * hd))
        t[p + "post_attention_norm.weight"] = norm(E)
        t[p + "ffn_norm.weight"] = norm(E)
        t[p + "ffn_gate.weight"] = mat(ff, E, s)
        t[p + "ffn_up.weight"] = mat(ff, E, s)
        t[p + "ffn_down.weight"] = mat(E, ff, 1.0 / np.sqrt(ff))
        t[p + "post_ffw_norm_1.weight"] = norm(E)
        t[p + "pre_ffw_norm_2.weight"] = norm(E)
        t[p + "ffn_gate_inp.weight"] = mat(NE, E, c["router_std"])
        t[p + "ffn_gate_inp.scale"] = norm(E)
        t[p + "ffn_gate_exps.weight"] = stack(NE, FE, E, s)
        t[p + "ffn_up_exps.weight"] = stack(NE, FE, E, s)
        t[p + "ffn_down_exps.weight"] = stack(NE, E, FE, 1.0 / np.sqrt(FE))
        t[p + "ffn_down_exps.scale"] = rng.uniform(0.5, 1.5, NE).astype(np.float32)
        t[p + "post_ffw_norm_2.weight"] = norm(E)
        t[p + "post_ffw_norm.weight"] = norm(E)
        t[p + "layer_output_scale.weight"] = rng.uniform(0.6, 1.2, 1).astype(np.float32)
    for name, v in t.items():
        w.add_tensor(name, v)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    print("wrote", path, os.path.getsize(path), f"({len(t)} tensors)")


os.makedirs(OUT, exist_ok=True)
if not ONLY or "gemma4" in ONLY:
    make(SEED)
if "gemma4-moe" in ONLY:
    make_moe(SEED)
