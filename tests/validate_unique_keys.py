#!/usr/bin/python3
"""Independent check of unique keys (issue 29): the oracle of tests/test_grammar_unique_keys.cpp.

Reads a JSON-lines file; each record is one generated instance:
  {"id": 3, "syntax": "json" | "qwen-xml" | "python", "schema": {...}, "text_hex": "...",
   "list_open": "<|tool_call_start|>", "list_close": "<|tool_call_end|>"}      # python only
and prints one JSON line per record: {"id": 3, "ok": true, "keys": N, "schema_order": true} (N: keys
read, all objects; schema_order: the listed top-level properties came in the order of "properties")
or {"id": 3, "ok": false, "error": "..."}.

  json:     the text is the instance; Python's json with an object_pairs_hook that reports a
            repeated key in any object;
  python:   the text is one LFM2 call `list_open[f(k=v, ...)]list_close`; Python's ast reads it
            (a repeated keyword is a SyntaxError there), every dict literal inside a value is
            checked for repeated keys, values are ast.literal_eval'ed;
  qwen-xml: the text is one Qwen3.5 call block, split by regular expressions; a repeated
            <parameter=NAME> is an error; a value is its raw text where the schema declares the
            property a string, else True/False/None or JSON (read with the same hook), else text;
then the object validates against "schema" with jsonschema's Draft202012Validator.
Usage: validate_unique_keys.py IN.jsonl > OUT.jsonl
"""
import ast
import json
import re
import sys

from jsonschema import Draft202012Validator


class Invalid(Exception):
    pass


class Counter:
    keys = 0


def no_repeats(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise Invalid("repeated key %r" % k)
        d[k] = v
    Counter.keys += len(pairs)
    return d


def json_loads(text):
    try:
        return json.loads(text, object_pairs_hook=no_repeats)
    except json.JSONDecodeError as e:
        raise Invalid("not JSON: %s" % e)


def check_dicts(node):
    """Repeated keys in any dict literal below an ast node (literal_eval would keep the last)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Dict):
            keys = [ast.literal_eval(k) for k in n.keys]
            if len(set(keys)) != len(keys):
                raise Invalid("repeated key in a dict literal: %r" % keys)
            Counter.keys += len(keys)


def python_args(rec, text):
    lo, lc = rec.get("list_open", ""), rec.get("list_close", "")
    if not text.startswith(lo) or not text.endswith(lc):
        raise Invalid("not wrapped in %r ... %r" % (lo, lc))
    body = text[len(lo):len(text) - len(lc)]
    body = re.sub(r"(?<!\\)((?:\\\\)*)\\/", r"\1/", body)  # JSON's \/ is "/"; Python keeps the backslash
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError as e:  # also "keyword argument repeated"
        raise Invalid("not Python: %s" % e)
    if not isinstance(tree, ast.List) or len(tree.elts) != 1 or not isinstance(tree.elts[0], ast.Call):
        raise Invalid("not [name(...)]")
    args = {}
    for kw in tree.elts[0].keywords:
        if kw.arg is None or kw.arg in args:
            raise Invalid("**kwargs or a repeated keyword %r" % kw.arg)
        check_dicts(kw.value)
        args[kw.arg] = to_json(ast.literal_eval(kw.value))
    Counter.keys += len(args)
    return args


def to_json(v):
    if isinstance(v, tuple):
        v = list(v)
    if isinstance(v, list):
        return [to_json(x) for x in v]
    if isinstance(v, dict):
        return {k: to_json(x) for k, x in v.items()}
    if isinstance(v, str):
        return v.encode("utf-16", "surrogatepass").decode("utf-16")
    return v


XML_CALL = re.compile(r"<tool_call>\n<function=([^>\n]*)>\n((?:<parameter=[^>\n]*>\n.*?\n</parameter>\n)*)</function>\n</tool_call>", re.S)
XML_PARAM = re.compile(r"<parameter=([^>\n]*)>\n(.*?)\n</parameter>\n", re.S)


def declared_string(schema, key):
    s = schema.get("properties", {}).get(key, schema.get("additionalProperties", {}))
    return isinstance(s, dict) and s.get("type") == "string"


def xml_args(rec, text):
    m = XML_CALL.fullmatch(text)
    if not m:
        raise Invalid("not one <tool_call> block")
    params = list(XML_PARAM.finditer(m.group(2)))
    if "".join(p.group(0) for p in params) != m.group(2):
        raise Invalid("parameters do not tile the function body")
    args = {}
    for p in params:
        k, raw = p.group(1), p.group(2)
        if k in args:
            raise Invalid("repeated parameter %r" % k)
        if declared_string(rec["schema"], k):
            args[k] = raw
        elif raw in ("True", "False", "None"):
            args[k] = {"True": True, "False": False, "None": None}[raw]
        else:
            try:
                args[k] = json.loads(raw, object_pairs_hook=no_repeats)
            except json.JSONDecodeError:
                args[k] = raw
    Counter.keys += len(args)
    return args


def check(rec):
    try:
        text = bytes.fromhex(rec["text_hex"]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid("not UTF-8: %s" % e)
    syntax = rec["syntax"]
    if syntax == "json":
        value = json_loads(text)
    elif syntax == "python":
        value = python_args(rec, text)
    elif syntax == "qwen-xml":
        value = xml_args(rec, text)
    else:
        raise Invalid("unknown syntax %r" % syntax)
    errors = sorted(Draft202012Validator(rec["schema"]).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        raise Invalid("%s at %s" % (e.message[:300], "/".join(map(str, e.path))))
    return value


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: validate_unique_keys.py IN.jsonl > OUT.jsonl")
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            Counter.keys = 0
            out = {"id": rec["id"], "ok": True}
            try:
                value = check(rec)
                out["keys"] = Counter.keys
                # Whether the listed top-level properties came in schema order (the property-order
                # test wants both answers under PropertyOrder::Any, only "yes" under Schema).
                listed = list(rec["schema"].get("properties", {}))
                written = [k for k in value if k in listed] if isinstance(value, dict) else []
                out["schema_order"] = written == sorted(written, key=listed.index)
            except Invalid as e:
                out = {"id": rec["id"], "ok": False, "error": str(e)}
            except Exception as e:  # a validator crash is a verdict too, never silence
                out = {"id": rec["id"], "ok": False, "error": "validator error: %r" % e}
            print(json.dumps(out))


if __name__ == "__main__":
    main()
