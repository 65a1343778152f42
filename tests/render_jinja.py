#!/usr/bin/python3
"""Reference renderer for chat templates: the oracle for tests/test_chat_template.cpp.

Renders each case with python3-jinja2 configured the way Hugging Face transformers renders
`tokenizer.chat_template` (transformers/utils/chat_template_utils.py), because that is how the
prompts the models were trained and evaluated on were produced:
  - ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) + loopcontrols and
    transformers' AssistantTracker extension (the `{% generation %}` tag, rendered as its body);
  - `tojson` replaced by json.dumps(ensure_ascii=False, sort_keys=False): jinja2's own tojson sorts
    keys and HTML-escapes <, >, &, ' (as \\u003c ...), which no chat runtime does (HF overrides
    it; llama.cpp's minja keeps key order and escapes nothing);
  - globals raise_exception(msg) and strftime_now(fmt); bos_token / eos_token as plain strings.

Usage: render_jinja.py [--now SECONDS] < cases.json   (--now: strftime_now renders that UTC time)

Input (stdin): a JSON list of cases
  {"template_file": path | "template": text,
   "messages": [...],                # OpenAI-style dicts, passed to the template as they are,
                                     # except tool_calls[].function.arguments (below)
   "tools": [...] | null,            # passed only when a non-empty list; otherwise undefined
   "arguments_as_string": false,     # true: keep tool-call arguments as JSON text (DeepSeek R1
                                     # concatenates them); false: json.loads them into a dict, as
                                     # HF and llama.cpp give them to templates that apply tojson
   "add_generation_prompt": true, "bos_token": "...", "eos_token": "...",
   "date_string": "26 Jul 2024" | absent,
   "enable_thinking": true | false | absent,     # chat_template_kwargs, defined only when given
   "reopen_turn": [after, open] | absent,        # with add_generation_prompt, a render ending
                                                 # with `after` gets `open` appended (Gemma 4, as
                                                 # llama.cpp 3f545be does: <turn|>\n, <|turn>model\n)
   "calls_in_content": "python" | "json" | absent,  # LFM2 / LFM2.5 ("python"), Phi-4-mini ("json"):
                                                 # their templates render no tool_calls; a turn's
                                                 # calls are written into its content as the model
                                                 # writes them: python, after a </think>:
                                                 # <|tool_call_start|>[f(a=1)]<|tool_call_end|>;
                                                 # json, after the content: call_tags[0] +
                                                 # [{"name": "f", "arguments": {"a": 1}}] + call_tags[1]
   "call_tags": [open, close] | absent,          # with "json"
   "tools_in_system_message": true | absent}     # Phi-4-mini: its template reads no `tools` but the
                                                 # system message's "tools" field: json.dumps of the
                                                 # tools' functions goes there (into the first
                                                 # message if it is a system message, else into an
                                                 # empty system message put first)
Output (stdout, binary-safe, no JSON re-escaping): for each case, in order,
  "OK <n>\\n" + n bytes of UTF-8 text + "\\n"   or   "ERR <n>\\n" + n bytes of message + "\\n".
"""
import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def make_strftime_now(fixed_now):
    """strftime_now(fmt) at the local time now, or at the UTC time `fixed_now` (seconds since the
    epoch) when given, so that a test's two renderers cannot see different days."""
    def strftime_now(fmt):
        if fixed_now is None:
            return datetime.datetime.now().strftime(fmt)
        return datetime.datetime.fromtimestamp(fixed_now, tz=datetime.timezone.utc).strftime(fmt)
    return strftime_now


class AssistantTracker(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}` tag (it marks the assistant's tokens
    for return_assistant_tokens_mask); rendering it outputs the body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_env(fixed_now=None):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = make_strftime_now(fixed_now)
    return env


def py_literal(v):
    """A JSON value as a Python literal, json.dumps spelling for strings and numbers."""
    if v is None:
        return "None"
    if v is True or v is False:
        return "True" if v else "False"
    if isinstance(v, list):
        return "[" + ", ".join(py_literal(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(json.dumps(k, ensure_ascii=False) + ": " + py_literal(x) for k, x in v.items()) + "}"
    return json.dumps(v, ensure_ascii=False)


def python_calls(calls):
    out = []
    for tc in calls:
        fn = tc["function"]
        args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
        if not isinstance(args, dict):
            raise jinja2.exceptions.TemplateError("arguments are not an object")
        out.append(fn["name"] + "(" + ", ".join("%s=%s" % (k, py_literal(x)) for k, x in args.items()) + ")")
    return "<|tool_call_start|>[" + ", ".join(out) + "]<|tool_call_end|>"


def json_calls(calls, tags):
    out = []
    for tc in calls:
        fn = tc["function"]
        args = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) else fn["arguments"]
        out.append({"name": fn["name"], "arguments": args})
    return tags[0] + json.dumps(out, ensure_ascii=False) + tags[1]


def put_tools_in_system_message(messages, tools):
    text = json.dumps([t["function"] if isinstance(t, dict) and isinstance(t.get("function"), dict) else t
                       for t in tools], ensure_ascii=False)
    if messages and messages[0].get("role") == "system":
        messages[0]["tools"] = text
    else:
        messages.insert(0, {"role": "system", "content": "", "tools": text})


def prepare_messages(messages, arguments_as_string, calls_in_content=None, call_tags=None):
    out = []
    for m in messages:
        m = dict(m)
        if calls_in_content == "python" and m.get("tool_calls"):
            content = m.get("content") or ""
            think = content.rfind("</think>")
            at = 0 if think < 0 else think + len("</think>")
            m["content"] = content[:at] + python_calls(m["tool_calls"]) + content[at:]
        if calls_in_content == "json" and m.get("tool_calls"):
            m["content"] = (m.get("content") or "") + json_calls(m["tool_calls"], call_tags)
        if "tool_calls" in m:
            calls = []
            for tc in m["tool_calls"]:
                tc = dict(tc)
                fn = dict(tc["function"])
                if not arguments_as_string and isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.loads(fn["arguments"])
                tc["function"] = fn
                calls.append(tc)
            m["tool_calls"] = calls
        out.append(m)
    return out


def render(env, case, compiled):
    if "template_file" in case:
        with open(case["template_file"], encoding="utf-8") as f:
            text = f.read()
    else:
        text = case["template"]
    template = compiled.get(text)
    if template is None:
        template = compiled[text] = env.from_string(text)
    ctx = {
        "messages": prepare_messages(case["messages"], case.get("arguments_as_string", False),
                                     case.get("calls_in_content"), case.get("call_tags")),
        "add_generation_prompt": case.get("add_generation_prompt", True),
        "bos_token": case.get("bos_token", ""),
        "eos_token": case.get("eos_token", ""),
    }
    tools = case.get("tools")
    if tools:
        ctx["tools"] = tools
        if case.get("tools_in_system_message"):
            put_tools_in_system_message(ctx["messages"], tools)
    if "date_string" in case:
        ctx["date_string"] = case["date_string"]
    if "enable_thinking" in case:
        ctx["enable_thinking"] = case["enable_thinking"]
    text = template.render(**ctx)
    reopen = case.get("reopen_turn")
    if reopen and ctx["add_generation_prompt"] and text.endswith(reopen[0]):
        text += reopen[1]
    return text


def main():
    fixed_now = None
    if len(sys.argv) == 3 and sys.argv[1] == "--now":
        fixed_now = int(sys.argv[2])
    elif len(sys.argv) != 1:
        sys.exit("usage: render_jinja.py [--now SECONDS_SINCE_EPOCH] < cases.json")
    cases = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    env = make_env(fixed_now)
    out = sys.stdout.buffer
    compiled = {}  # template text -> compiled template
    for case in cases:
        try:
            data = render(env, case, compiled).encode("utf-8", "surrogatepass")
            tag = b"OK"
        except Exception as e:  # every failure of the template is an answer, not a crash
            data = ("%s: %s" % (type(e).__name__, e)).encode("utf-8", "replace")
            tag = b"ERR"
        out.write(tag + b" " + str(len(data)).encode() + b"\n" + data + b"\n")
    out.flush()


if __name__ == "__main__":
    main()
