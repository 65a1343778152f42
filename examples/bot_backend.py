#!/usr/bin/env python3
"""A minimal bot back end on picolm-provider (python3 standard library only).

Each chat message is sent to POST /tool_call with the bot's tools; the provider returns a tool call
whose arguments are guaranteed to match the tool's JSON Schema (the grammar engine constrains the
model), so the back end can execute it without defensive parsing.

    build/bin/picolm-provider --port 8080 &
    examples/bot_backend.py "turn the kitchen light on"       # one message
    examples/bot_backend.py                                  # interactive
Options: --url http://127.0.0.1:8080
"""
import argparse
import json
import sys
import urllib.error
import urllib.request

# The toy house the tools act on.
HOUSE = {"lights": {"kitchen": False, "bedroom": False, "hall": False}, "volume": 3}

TOOLS = [
    {"type": "function", "function": {
        "name": "set_light", "description": "Switch the light of a room on or off",
        "parameters": {"type": "object", "properties": {
            "room": {"type": "string", "enum": ["kitchen", "bedroom", "hall"]},
            "on": {"type": "boolean"}}, "required": ["room", "on"]}}},
    {"type": "function", "function": {
        "name": "set_volume", "description": "Set the speaker volume (0-10)",
        "parameters": {"type": "object", "properties": {
            "level": {"type": "integer", "minimum": 0, "maximum": 10}}, "required": ["level"]}}},
    {"type": "function", "function": {
        "name": "status", "description": "Report the state of the house",
        "parameters": {"type": "object", "properties": {}}}},
]


def set_light(room, on):
    HOUSE["lights"][room] = on
    return f"{room} light {'on' if on else 'off'}"


def set_volume(level):
    HOUSE["volume"] = level
    return f"volume {level}"


def status():
    return json.dumps(HOUSE)


HANDLERS = {"set_light": set_light, "set_volume": set_volume, "status": status}


def tool_call(url, message):
    body = json.dumps({
        "system": "You control a smart home. Answer with exactly one tool call.",
        "prompt": message,
        "tools": TOOLS,
        "max_tokens": 256,
    }).encode()
    req = urllib.request.Request(url + "/tool_call", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


def handle(url, message):
    try:
        reply = tool_call(url, message)
    except urllib.error.HTTPError as e:
        return "provider error: " + e.read().decode(errors="replace")
    except urllib.error.URLError as e:
        return f"provider unreachable at {url}: {e.reason}"
    results = []
    for call in reply.get("tool_calls", []):
        fn = HANDLERS[call["name"]]          # always one of TOOLS
        results.append(fn(**call["arguments"]))  # arguments already match the schema
    if not results:
        return reply.get("content") or f"(no tool call; finish_reason {reply.get('finish_reason')})"
    return "; ".join(results)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("message", nargs="*")
    args = ap.parse_args()
    if args.message:
        print(handle(args.url, " ".join(args.message)))
        return
    for line in sys.stdin:
        if line.strip():
            print(handle(args.url, line.strip()), flush=True)


if __name__ == "__main__":
    main()
