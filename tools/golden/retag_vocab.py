import sys, types
sys.path.insert(0, "/work/peers/llama.cpp/gguf-py")
sp = types.ModuleType("sentencepiece"); sp.SentencePieceProcessor = object
sys.modules.setdefault("sentencepiece", sp)
from gguf import GGUFReader, GGUFValueType, GGUFWriter
src, dst, pre = sys.argv[1:4]
r = GGUFReader(src)
arch = bytes(r.fields["general.architecture"].parts[r.fields["general.architecture"].data[0]]).decode()
w = GGUFWriter(dst, arch)
for name, f in r.fields.items():
    if name.startswith("GGUF.") or name == "general.architecture":
        continue
    t = f.types[0]
    if name == "tokenizer.ggml.pre":
        w.add_string(name, pre); continue
    if t == GGUFValueType.STRING:
        w.add_string(name, bytes(f.parts[f.data[0]]).decode("utf-8"))
    elif t == GGUFValueType.ARRAY:
        et = f.types[1]
        if et == GGUFValueType.STRING:
            w.add_array(name, [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data])
        elif et == GGUFValueType.FLOAT32:
            w.add_array(name, [float(f.parts[i][0]) for i in f.data])
        else:
            w.add_array(name, [int(f.parts[i][0]) for i in f.data])
    elif t == GGUFValueType.BOOL:
        w.add_bool(name, bool(f.parts[f.data[0]][0]))
    elif t == GGUFValueType.UINT32:
        w.add_uint32(name, int(f.parts[f.data[0]][0]))
    elif t == GGUFValueType.INT32:
        w.add_int32(name, int(f.parts[f.data[0]][0]))
    elif t == GGUFValueType.FLOAT32:
        w.add_float32(name, float(f.parts[f.data[0]][0]))
    else:
        raise SystemExit(f"unhandled {t} {name}")
if "tokenizer.ggml.pre" not in r.fields:
    w.add_string("tokenizer.ggml.pre", pre)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print("wrote", dst)
