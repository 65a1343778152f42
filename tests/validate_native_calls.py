#!/usr/bin/python3
"""Independent check of native (non-JSON) tool calls: the oracle of tests/test_native_calls.cpp.

Reads a JSON-lines file; each record is one generated reply and what the provider read from it:
  {"id": 3, "format": "qwen-xml" | "python", "tools": [...], "parallel": false, "forced_tool": "",
   "list_open": "<|tool_call_start|>", "list_close": "<|tool_call_end|>",   # python only
   "text_hex": "...", "parsed": [{"name": "f", "arguments": "{...}"}, ...]}
and prints one JSON line per record: {"id": 3, "ok": true} or {"id": 3, "ok": false, "error": "..."}.

The reply must have the format's exact shape, and:
  python: the list is read by Python itself (ast.literal_eval of every keyword value), so the
    provider's reading must equal Python's;
  qwen-xml: every block is split with a regular expression; the provider's value of a parameter
    must be a faithful reading of its raw text (the text itself for a string, else what json.loads
    or the template's True/False/None spelling gives);
then every call names a listed tool (the forced one, if any) and its arguments validate against
the tool's "parameters" with jsonschema's Draft202012Validator.
Usage: validate_native_calls.py IN.jsonl > OUT.jsonl
"""
import ast
import json
import re
import sys

from jsonschema import Draft202012Validator


class Invalid(Exception):
    pass


def same(a, b):
    """JSON equality that tells booleans from numbers (Python's True == 1 does not)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a.keys()) == list(b.keys()) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def literal_to_json(v):
    """A Python literal as the JSON value it stands for (tuples as arrays)."""
    if isinstance(v, tuple):
        v = list(v)
    if isinstance(v, list):
        return [literal_to_json(x) for x in v]
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise Invalid("dict with a non-string key")
        return {k: literal_to_json(x) for k, x in v.items()}
    if isinstance(v, str):
        # \ud83d\ude00 in a Python literal is two lone surrogates; JSON (and the provider) join
        # the pair into one character.
        return v.encode("utf-16", "surrogatepass").decode("utf-16")
    if v is None or isinstance(v, (bool, int, float)):
        return v
    raise Invalid("not a JSON-like literal: %r" % (v,))


def python_calls(rec, text):
    lo, lc = rec.get("list_open", ""), rec.get("list_close", "")
    if not text.startswith(lo) or not text.endswith(lc):
        raise Invalid("not wrapped in %r ... %r" % (lo, lc))
    body = text[len(lo):len(text) - len(lc)]
    # JSON's escaped solidus \/ (the grammar's string automaton is JSON's, and checked the
    # schema's constraints on "/") means "/"; Python would keep the backslash. Outside strings
    # the call syntax has no backslash, so the replacement touches string contents only.
    body = re.sub(r"(?<!\\)((?:\\\\)*)\\/", r"\1/", body)
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError as e:
        raise Invalid("not Python: %s" % e)
    if not isinstance(tree, ast.List):
        raise Invalid("not a list")
    calls = []
    for node in tree.elts:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
            raise Invalid("list element is not name(keyword=value, ...)")
        args = {}
        for kw in node.keywords:
            if kw.arg is None or kw.arg in args:
                raise Invalid("**kwargs or a repeated keyword")
            try:
                args[kw.arg] = literal_to_json(ast.literal_eval(kw.value))
            except ValueError as e:
                raise Invalid("keyword %s is not a literal: %s" % (kw.arg, e))
        calls.append({"name": node.func.id, "arguments": args})
    return calls


XML_BLOCK = re.compile(r"<tool_call>\n<function=([^>\n]*)>\n((?:<parameter=[^>\n]*>\n.*?\n</parameter>\n)*)</function>\n</tool_call>", re.S)
XML_PARAM = re.compile(r"<parameter=([^>\n]*)>\n(.*?)\n</parameter>\n", re.S)


def xml_calls(rec, text):
    blocks, pos = [], 0
    for m in XML_BLOCK.finditer(text):
        gap = text[pos:m.start()]
        if gap != ("" if not blocks else "\n"):
            raise Invalid("unexpected text between blocks: %r" % gap[:80])
        raw = [(p.group(1), p.group(2)) for p in XML_PARAM.finditer(m.group(2))]
        if "".join(p.group(0) for p in XML_PARAM.finditer(m.group(2))) != m.group(2):
            raise Invalid("parameters do not tile the function body")
        blocks.append((m.group(1), raw))
        pos = m.end()
    if pos != len(text) or not blocks:
        raise Invalid("text after the calls or no call: %r" % text[pos:][:80])
    return blocks


def faithful_xml_value(raw, value):
    """Is `value` (the provider's reading) what the raw text of a parameter says?"""
    if isinstance(value, str):
        return value == raw
    spelled = {"True": True, "False": False, "None": None}
    if raw in spelled:
        return same(spelled[raw], value)
    try:
        return same(json.loads(raw), value)
    except ValueError:
        return False


def check(rec):
    try:
        text = bytes.fromhex(rec["text_hex"]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid("not UTF-8: %s" % e)
    parsed = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in rec["parsed"]]
    if rec["format"] == "python":
        calls = python_calls(rec, text)
        if len(calls) != len(parsed) or not all(c["name"] == p["name"] and same(c["arguments"], p["arguments"])
                                                for c, p in zip(calls, parsed)):
            raise Invalid("provider read %r, Python reads %r" % (parsed, calls))
    elif rec["format"] == "qwen-xml":
        blocks = xml_calls(rec, text)
        if len(blocks) != len(parsed):
            raise Invalid("%d blocks, provider read %d calls" % (len(blocks), len(parsed)))
        for (name, raw), p in zip(blocks, parsed):
            if name != p["name"] or [k for k, _ in raw] != list(p["arguments"].keys()):
                raise Invalid("provider read %r from block %r %r" % (p, name, raw))
            for k, r in raw:
                if not faithful_xml_value(r, p["arguments"][k]):
                    raise Invalid("parameter %s: provider read %r from %r" % (k, p["arguments"][k], r))
        calls = parsed
    else:
        raise Invalid("unknown format %r" % rec["format"])
    if not calls:
        raise Invalid("no tool call")
    if not rec.get("parallel") and len(calls) != 1:
        raise Invalid("%d calls without parallel" % len(calls))
    tools = {}
    for t in rec["tools"]:
        fn = t.get("function", t)
        tools[fn["name"]] = fn
    forced = rec.get("forced_tool")
    for c in calls:
        if c["name"] not in tools:
            raise Invalid("unknown tool %r" % c["name"])
        if forced and c["name"] != forced:
            raise Invalid("called %s, forced %s" % (c["name"], forced))
        params = tools[c["name"]].get("parameters", {"type": "object"})
        errors = sorted(Draft202012Validator(params).iter_errors(c["arguments"]), key=lambda e: list(e.path))
        if errors:
            e = errors[0]
            raise Invalid("arguments of %s: %s at %s" % (c["name"], e.message[:300], "/".join(map(str, e.path))))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: validate_native_calls.py IN.jsonl > OUT.jsonl")
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            out = {"id": rec["id"], "ok": True}
            try:
                check(rec)
            except Invalid as e:
                out = {"id": rec["id"], "ok": False, "error": str(e)}
            except Exception as e:  # a validator crash is a verdict too, never silence
                out = {"id": rec["id"], "ok": False, "error": "validator error: %r" % e}
            print(json.dumps(out))


if __name__ == "__main__":
    main()
