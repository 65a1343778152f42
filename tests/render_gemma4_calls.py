#!/usr/bin/python3
"""Past tool calls as the Gemma 4 template writes them (tests/test_gemma4_calls.cpp).

Reads a JSON file [{"name": "f", "arguments": {...}}, ...], renders one assistant turn holding
each call through the template given (python3-jinja2, the environment Hugging Face renders chat
templates in) and prints, per call, one JSON line {"text": "<|tool_call>...<tool_call|>",
"expected": "..."}: the call's text cut from the rendered prompt, and its arguments as JSON with
every object's members in the template's dictsort order (case-insensitive by key), which is what
reading the text back must give.
Usage: render_gemma4_calls.py TEMPLATE.jinja CALLS.json
"""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def dictsorted(v):
    if isinstance(v, dict):
        return {k: dictsorted(v[k]) for k in sorted(v, key=lambda k: k.lower())}
    if isinstance(v, list):
        return [dictsorted(x) for x in v]
    return v


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
    with open(sys.argv[1], encoding="utf-8") as f:
        tmpl = env.from_string(f.read())
    with open(sys.argv[2], encoding="utf-8") as f:
        calls = json.load(f)
    for c in calls:
        messages = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}]},
        ]
        text = tmpl.render(messages=messages, bos_token="<bos>", add_generation_prompt=False)
        b = text.index("<|tool_call>")
        e = text.index("<tool_call|>", b) + len("<tool_call|>")
        expected = json.dumps(dictsorted(c["arguments"]), ensure_ascii=False, separators=(",", ":"))
        print(json.dumps({"text": text[b:e], "expected": expected}, ensure_ascii=False))


if __name__ == "__main__":
    main()
