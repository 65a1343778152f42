#!/usr/bin/python3
"""Independent validator of tool-call arguments for the server tests (test_slots, test_jump_forward).

Reads a JSON-lines file; each record is one call:
  {"tools": "/path/tools.json", "name": "set_light", "arguments_text": "{\"room\":\"hall\",\"on\":true}"}
where tools.json is the request's OpenAI tool list. The arguments must parse as a JSON object and
validate with jsonschema's Draft202012Validator against the named tool's "parameters", closed
(additionalProperties false unless the schema says otherwise), as the provider compiles them.
Prints one line per invalid call and a summary; exits 1 if any call is invalid or there is none.
Usage: validate_tool_args.py IN.jsonl
"""
import json
import sys

from jsonschema import Draft202012Validator

tool_lists = {}
bad = 0
n = 0
for n, line in enumerate(open(sys.argv[1], encoding="utf-8"), 1):
    rec = json.loads(line)
    try:
        if rec["tools"] not in tool_lists:
            tool_lists[rec["tools"]] = {t["function"]["name"]: t["function"].get("parameters", {})
                                        for t in json.load(open(rec["tools"], encoding="utf-8"))}
        params = dict(tool_lists[rec["tools"]][rec["name"]])
        params.setdefault("additionalProperties", False)  # the provider closes tool parameters
        args = json.loads(rec["arguments_text"])
        if not isinstance(args, dict):
            raise ValueError("arguments are not an object")
        Draft202012Validator(params).validate(args)
    except Exception as e:
        bad += 1
        print("call %d invalid: %s: %s" % (n, e, line.strip()[:300]))
print("checked", n, "bad", bad)
sys.exit(1 if bad or n == 0 else 0)
