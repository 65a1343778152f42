#!/usr/bin/python3
"""Independent validator for the grammar property test.

Reads a JSON-lines file; each record is one generated instance:
  {"id": 7, "kind": "schema", "schema": {...}, "text_hex": "7b7d"}
  {"id": 8, "kind": "tools", "tools": [...], "format": "object|array|hermes|envelope",
   "parallel": false, "allow_text": false, "text_hex": "..."}
("decimal": true parses the numbers of schema and instance as exact decimals; "draft": 7 validates
with Draft7Validator instead of Draft202012Validator; "formats": true asserts `format` with
jsonschema's FormatChecker plus a date-time checker: date part by datetime.date, time part by
jsonschema's own "time" checker)
and prints one JSON line per record: {"id": 7, "ok": true} or {"id": 7, "ok": false, "error": "..."}.

The instance must be valid UTF-8, parse as JSON with no duplicate object keys and nothing after
the value (Python's extensions NaN/Infinity are refused), and validate with jsonschema's
Draft202012Validator. Tool calls: the wrapper must have the format's exact shape, every call
names a listed tool and its arguments validate against that tool's "parameters".
Usage: validate_instances.py IN.jsonl > OUT.jsonl
"""
import datetime
import json
import re
import sys
from decimal import Decimal

from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker

# jsonschema's 2020-12 format checkers (date by datetime.date, ipv4/ipv6 by ipaddress, uuid, email)
# plus RFC 3339 time and date-time, which jsonschema checks only with the optional
# rfc3339-validator package: the date part by datetime.date (leap years), the time by RFC 3339's
# grammar (leap second 60 allowed, as RFC 3339 does).
FORMATS = FormatChecker(
    [f for f in Draft202012Validator.FORMAT_CHECKER.checkers if f not in ("time", "date-time")])
RFC3339_TIME = re.compile(
    r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])", re.ASCII)


@FORMATS.checks("time")
def is_time(instance):
    return not isinstance(instance, str) or RFC3339_TIME.fullmatch(instance) is not None


@FORMATS.checks("date-time", raises=ValueError)
def is_date_time(instance):
    if not isinstance(instance, str):
        return True
    m = re.fullmatch(r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt](.+)", instance, re.ASCII)
    if not m:
        return False
    datetime.date.fromisoformat(m.group(1))
    return is_time(m.group(2))


class Invalid(Exception):
    pass


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        dup = sorted({k for k in keys if keys.count(k) > 1})
        raise Invalid("duplicate object key(s): %r" % dup)
    return dict(pairs)


def refuse_constant(name):
    raise Invalid("non-JSON number %s" % name)


def parse_json(text, decimal=False):
    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=refuse_constant,
                          parse_float=Decimal if decimal else float)
    except json.JSONDecodeError as e:
        raise Invalid("not JSON: %s" % e)


def validate(schema, instance, what, draft=2020, formats=False):
    validator = Draft7Validator if draft == 7 else Draft202012Validator
    checker = FORMATS if formats else None
    errors = sorted(validator(schema, format_checker=checker).iter_errors(instance), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        raise Invalid("%s: %s at %s" % (what, e.message[:300], "/".join(map(str, e.path))))


def check_call(call, tools_by_name):
    if not isinstance(call, dict):
        raise Invalid("tool call is not an object")
    if set(call.keys()) != {"name", "arguments"}:
        raise Invalid("tool call keys are %r, want name and arguments" % sorted(call.keys()))
    name = call["name"]
    if name not in tools_by_name:
        raise Invalid("unknown tool %r" % (name,))
    args = call["arguments"]
    if not isinstance(args, dict):
        raise Invalid("arguments of %s is not an object" % name)
    params = tools_by_name[name].get("parameters", {"type": "object"})
    validate(params, args, "arguments of " + name)


HERMES_BLOCK = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)


def split_hermes(text):
    """The JSON bodies of `<tool_call>\\n{...}\\n</tool_call>` blocks, separated by whitespace only."""
    bodies, pos = [], 0
    for m in HERMES_BLOCK.finditer(text):
        if text[pos:m.start()].strip():
            raise Invalid("text outside <tool_call> blocks: %r" % text[pos:m.start()][:80])
        bodies.append(m.group(1))
        pos = m.end()
    if text[pos:].strip():
        raise Invalid("text outside <tool_call> blocks: %r" % text[pos:][:80])
    if not bodies:
        raise Invalid("no <tool_call> block")
    return bodies


def check_tools(rec, text):
    tools_by_name = {t["function"]["name"]: t["function"] for t in rec["tools"]}
    fmt, parallel = rec["format"], rec.get("parallel", False)
    if fmt == "object":
        v = parse_json(text)
        calls = v if (parallel and isinstance(v, list)) else [v]
    elif fmt == "array":
        calls = parse_json(text)
        if not isinstance(calls, list):
            raise Invalid("not an array")
    elif fmt == "hermes":
        calls = [parse_json(b) for b in split_hermes(text)]
    elif fmt == "envelope":
        v = parse_json(text)
        if not isinstance(v, dict):
            raise Invalid("envelope is not an object")
        if rec.get("allow_text") and set(v.keys()) == {"content"}:
            if not isinstance(v["content"], str):
                raise Invalid("content is not a string")
            return
        if set(v.keys()) != {"tool_calls"} or not isinstance(v["tool_calls"], list):
            raise Invalid("envelope keys are %r, want tool_calls (array)" % sorted(v.keys()))
        calls = v["tool_calls"]
    else:
        raise Invalid("unknown format %r" % fmt)
    if not calls:
        raise Invalid("no tool call")
    if not parallel and len(calls) != 1:
        raise Invalid("%d calls without parallel" % len(calls))
    forced = rec.get("forced_tool")
    for c in calls:
        check_call(c, tools_by_name)
        if forced and c["name"] != forced:
            raise Invalid("called %s, forced %s" % (c["name"], forced))


def check(rec):
    try:
        text = bytes.fromhex(rec["text_hex"]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid("not UTF-8: %s" % e)
    if rec["kind"] == "schema":
        validate(rec["schema"], parse_json(text, rec.get("decimal", False)), "instance", rec.get("draft", 2020),
                 rec.get("formats", False))
    else:
        check_tools(rec, text)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: validate_instances.py IN.jsonl > OUT.jsonl")
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            rec = json.loads(line)
            # "decimal": numbers of schema and instance as exact decimals (a fractional multipleOf
            # is exact in decimal; jsonschema divides floats: 0.07 / 0.01 = 7.000000000000001).
            if rec.get("decimal"):
                rec = json.loads(line, parse_float=Decimal)
            out = {"id": rec["id"], "ok": True}
            try:
                check(rec)
            except Invalid as e:
                out = {"id": rec["id"], "ok": False, "error": str(e)}
            except Exception as e:  # a validator crash is a verdict too, never silence
                out = {"id": rec["id"], "ok": False, "error": "validator error: %r" % e}
            print(json.dumps(out), flush=False)


if __name__ == "__main__":
    main()
