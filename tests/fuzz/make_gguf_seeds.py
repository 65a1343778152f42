#!/usr/bin/env python3
"""Writes the small GGUF seed files of corpus/gguf (a tiny llama-shaped model and variants).
The fuzzer mutates them; they only need to reach deep into the reader and the hyper-parameter
checks, not to be useful models. Run: python3 tests/fuzz/make_gguf_seeds.py tests/fuzz/corpus/gguf"""
import struct, sys, os

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)

def s(x):
    b = x.encode()
    return struct.pack('<Q', len(b)) + b

def kv(key, typ, val):
    out = s(key) + struct.pack('<I', typ)
    if typ == STR:
        out += s(val)
    elif typ == ARR:
        et, items = val
        out += struct.pack('<IQ', et, len(items))
        for it in items:
            out += s(it) if et == STR else struct.pack({I32: '<i', F32: '<f', U64: '<Q'}[et], it)
    else:
        out += struct.pack({U32: '<I', I32: '<i', F32: '<f', U64: '<Q', BOOL: '<?', U8: '<B'}[typ], val)
    return out

def gguf(meta, tensors, align=32):
    head = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(meta))
    body = b''.join(kv(*m) for m in meta)
    infos, data, off = b'', b'', 0
    for name, ne, typ, nbytes in tensors:
        infos += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n) for n in ne)
        infos += struct.pack('<IQ', typ, off)
        blob = bytes((i * 7 + 3) % 251 for i in range(nbytes))
        pad = (-nbytes) % align
        data += blob + b'\0' * pad
        off += nbytes + pad
    out = head + body + infos
    out += b'\0' * ((-len(out)) % align)
    return out + data

def llama(n_embd=8, n_vocab=16, extra=()):
    toks = ['<unk>', '<s>', '</s>'] + [chr(97 + i) for i in range(n_vocab - 3)]
    meta = [('general.architecture', STR, 'llama'),
            ('llama.embedding_length', U32, n_embd), ('llama.block_count', U32, 1),
            ('llama.attention.head_count', U32, 2), ('llama.attention.head_count_kv', U32, 2),
            ('llama.feed_forward_length', U32, 16), ('llama.context_length', U32, 64),
            ('llama.attention.layer_norm_rms_epsilon', F32, 1e-5),
            ('tokenizer.ggml.model', STR, 'llama'), ('tokenizer.ggml.tokens', ARR, (STR, toks)),
            ('tokenizer.ggml.scores', ARR, (F32, [0.0] * n_vocab)),
            ('tokenizer.ggml.token_type', ARR, (I32, [1] * n_vocab)),
            ('tokenizer.ggml.bos_token_id', U32, 1), ('tokenizer.ggml.eos_token_id', U32, 2)]
    over = {e[0] for e in extra}
    meta = [m for m in meta if m[0] not in over] + list(extra)
    f32 = 0
    t = [('token_embd.weight', [n_embd, n_vocab], f32, 4 * n_embd * n_vocab),
         ('output_norm.weight', [n_embd], f32, 4 * n_embd),
         ('blk.0.attn_norm.weight', [n_embd], f32, 4 * n_embd),
         ('blk.0.attn_q.weight', [n_embd, n_embd], f32, 4 * n_embd * n_embd),
         ('blk.0.attn_k.weight', [n_embd, n_embd], f32, 4 * n_embd * n_embd),
         ('blk.0.attn_v.weight', [n_embd, n_embd], f32, 4 * n_embd * n_embd),
         ('blk.0.attn_output.weight', [n_embd, n_embd], f32, 4 * n_embd * n_embd),
         ('blk.0.ffn_norm.weight', [n_embd], f32, 4 * n_embd),
         ('blk.0.ffn_gate.weight', [n_embd, 16], f32, 4 * n_embd * 16),
         ('blk.0.ffn_up.weight', [n_embd, 16], f32, 4 * n_embd * 16),
         ('blk.0.ffn_down.weight', [16, n_embd], f32, 4 * 16 * n_embd)]
    return gguf(meta, t)

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
seeds = {
    'tiny-llama.gguf': llama(),
    'u64-width.gguf': llama(extra=[('llama.embedding_length', U64, (1 << 32) + 8)]),
    'per-layer-arrays.gguf': llama(extra=[('llama.feed_forward_length', ARR, (I32, [16]))]),
    'header-only.gguf': gguf([('general.architecture', STR, 'llama')], []),
}
for name, data in seeds.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
    print(name, len(data))
