#!/usr/bin/env python3
"""A small vocabulary of Gemma 4's tokenizer type (tokenizer.ggml.model "gemma4"), for tokenizer goldens.

usage: synth_gemma4_vocab.py GGUF_PY_DIR OUT.gguf

Writes a GGUF with only general.architecture and the tokenizer.* keys, laid out as llama.cpp's Gemma 4
converter writes them (conversion/gemma.py): <pad> <eos> <bos> <unk>, the 256 byte tokens <0x00>..<0xFF>,
a few control / user-defined tokens of the chat format, the characters of a small corpus (with spaces
written U+2581, as the tokenizer sees them; some characters, e.g. 'é' and the emoji, left out so that
they go through byte fallback), "\\n" and "\\n\\n", then 300 BPE merges learned greedily on the corpus
lines (most frequent adjacent pair first, ties by text). Merges run over whole lines, across spaces,
as Gemma 4's do. tokenize the same strings with llama.cpp's llama-tokenize on a model carrying this
vocabulary (synth_gemma4.py with it as VOCAB) to get the expected ids.
"""
import collections
import sys
import types

sys.path.insert(0, sys.argv[1])
sp = types.ModuleType("sentencepiece"); sp.SentencePieceProcessor = object
sys.modules.setdefault("sentencepiece", sp)
from gguf import GGUFWriter  # noqa: E402

OUT = sys.argv[2]
SPACE = "\u2581"
CORPUS = """Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine.
One day, she saw a big, red ball in the park. She ran to it and kicked it very hard.
The ball flew over the fence and into the garden of an old man. Lily was scared, but she went to the door.
Tom and Lily went to the park. They played on the swings and the slide until the sun went down.
def main():
    return {"name": "get_weather", "arguments": {"city": "Paris"}}
""".replace(" ", SPACE)
LEFT_OUT = set("é😀")

tokens, types_ = [], []


def add(text, t):
    tokens.append(text)
    types_.append(t)


NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6
add("<pad>", CONTROL); add("<eos>", CONTROL); add("<bos>", CONTROL); add("<unk>", UNKNOWN)
for b in range(256):
    add(f"<0x{b:02X}>", BYTE)
for t in ("<|turn>", "<turn|>"):
    add(t, CONTROL)
for t in ("<|tool_call>", "<tool_call|>", '<|"|>'):
    add(t, USER_DEFINED)
chars = sorted(set(CORPUS) - set("\n") | set(SPACE))
for c in chars:
    add(c, NORMAL)
add("\n", NORMAL); add("\n\n", NORMAL)

lines = [list(line) for line in CORPUS.split("\n") if line]
merges = []
known = set(tokens)
for _ in range(300):
    counts = collections.Counter()
    for seq in lines:
        for a, b in zip(seq, seq[1:]):
            counts[(a, b)] += 1
    if not counts:
        break
    (a, b), n = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if n < 2:
        break
    merges.append(f"{a} {b}")
    if a + b not in known:
        add(a + b, NORMAL)
        known.add(a + b)
    for i, seq in enumerate(lines):
        out, j = [], 0
        while j < len(seq):
            if j + 1 < len(seq) and seq[j] == a and seq[j + 1] == b:
                out.append(a + b); j += 2
            else:
                out.append(seq[j]); j += 1
        lines[i] = out

w = GGUFWriter(OUT, "gemma4")
w.add_tokenizer_model("gemma4")
w.add_tokenizer_pre("gemma4")
w.add_token_list(tokens)
w.add_token_scores([0.0] * len(tokens))
w.add_token_types(types_)
w.add_token_merges(merges)
w.add_bos_token_id(2); w.add_eos_token_id(1); w.add_unk_token_id(3); w.add_pad_token_id(0)
w.add_add_space_prefix(False)
w.add_add_bos_token(True)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print("wrote", OUT, len(tokens), "tokens,", len(merges), "merges")
