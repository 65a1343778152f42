#!/usr/bin/python3
"""Independent check of Gemma 4 tool calls: the oracle of tests/test_gemma4_calls.cpp.

Reads a JSON-lines file; each record is one generated reply and what the provider read from it:
  {"id": 3, "tools": [...], "parallel": false, "forced_tool": "", "text_hex": "...",
   "parsed": [{"name": "f", "arguments": "{...}"}, ...]}
and prints one JSON line per record: {"id": 3, "ok": true} or {"id": 3, "ok": false, "error": "..."}.

The reply must be nothing but calls <|tool_call>call:NAME{...}<tool_call|> side by side (one
unless parallel), read here by a recursive-descent reader of its own (written from the Gemma 4
template's format_argument macro, not from the provider's code), which refuses a key repeated in
an object. The provider's reading must equal this one value for value (booleans told from
numbers); every call names a listed tool (the forced one, if any) and its arguments validate
against the tool's "parameters" with jsonschema's Draft202012Validator.
Usage: validate_gemma4_calls.py IN.jsonl > OUT.jsonl
"""
import json
import re
import sys

from jsonschema import Draft202012Validator

OPEN = "<|tool_call>call:"
CLOSE = "<tool_call|>"
QUOTE = '<|"|>'
NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


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


class Reader:
    def __init__(self, text):
        self.s = text
        self.i = 0

    def expect(self, lit):
        if not self.s.startswith(lit, self.i):
            raise Invalid("expected %r at %d: %r" % (lit, self.i, self.s[self.i:self.i + 20]))
        self.i += len(lit)

    def value(self):
        s, i = self.s, self.i
        if s.startswith(QUOTE, i):
            end = s.find(QUOTE, i + len(QUOTE))
            if end < 0:
                raise Invalid("unterminated string at %d" % i)
            self.i = end + len(QUOTE)
            return s[i + len(QUOTE):end]
        if s.startswith("{", i):
            return self.obj()
        if s.startswith("[", i):
            self.i += 1
            out = []
            if s.startswith("]", self.i):
                self.i += 1
                return out
            while True:
                out.append(self.value())
                if s.startswith(",", self.i):
                    self.i += 1
                    continue
                self.expect("]")
                return out
        for lit, v in (("true", True), ("false", False), ("null", None), ("None", None)):
            if s.startswith(lit, i):
                self.i += len(lit)
                return v
        m = NUMBER.match(s, i)
        if not m or m.end() == i:
            raise Invalid("no value at %d: %r" % (i, s[i:i + 20]))
        self.i = m.end()
        t = m.group(0)
        return float(t) if any(c in t for c in ".eE") else int(t)

    def obj(self):
        self.expect("{")
        out = {}
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            colon = self.s.find(":", self.i)
            if colon < 0:
                raise Invalid("no ':' after a key at %d" % self.i)
            key = self.s[self.i:colon]
            if not key or re.search(r'[\s,{}\[\]"<>]', key):
                raise Invalid("bad key %r at %d" % (key, self.i))
            if key in out:
                raise Invalid("repeated key %r" % key)
            self.i = colon + 1
            out[key] = self.value()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            self.expect("}")
            return out


def read_calls(text):
    r = Reader(text)
    calls = []
    while r.i < len(text):
        r.expect(OPEN)
        brace = text.find("{", r.i)
        if brace <= r.i:
            raise Invalid("no function name at %d" % r.i)
        name = text[r.i:brace]
        r.i = brace
        args = r.obj()
        r.expect(CLOSE)
        calls.append((name, args))
    return calls


def check(rec):
    text = bytes.fromhex(rec["text_hex"]).decode("utf-8")
    calls = read_calls(text)
    if not calls:
        raise Invalid("no call")
    if len(calls) > 1 and not rec["parallel"]:
        raise Invalid("%d calls without parallel" % len(calls))
    parsed = rec["parsed"]
    if len(parsed) != len(calls):
        raise Invalid("provider read %d calls, oracle %d" % (len(parsed), len(calls)))
    tools = {t["function"]["name"]: t["function"] for t in rec["tools"]}
    for (name, args), p in zip(calls, parsed):
        if p["name"] != name:
            raise Invalid("provider read name %r, oracle %r" % (p["name"], name))
        mine = json.loads(p["arguments"])
        if not same(mine, args):
            raise Invalid("provider read %s, oracle %s" % (p["arguments"], json.dumps(args)))
        if rec["forced_tool"] and name != rec["forced_tool"]:
            raise Invalid("called %r, forced %r" % (name, rec["forced_tool"]))
        if name not in tools:
            raise Invalid("unknown tool %r" % name)
        schema = tools[name].get("parameters", {"type": "object"})
        errors = sorted(Draft202012Validator(schema).iter_errors(args), key=str)
        if errors:
            raise Invalid("%s: %s" % (name, errors[0].message))


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            try:
                check(rec)
                out = {"id": rec["id"], "ok": True}
            except Invalid as e:
                out = {"id": rec["id"], "ok": False, "error": str(e)}
            print(json.dumps(out))


if __name__ == "__main__":
    main()
