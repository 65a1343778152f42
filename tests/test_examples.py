#!/usr/bin/env python3
"""examples/picoclaw: both PicoClaw configs parse, use only fields PicoClaw's config structs have,
and lead the agent to picolm-provider.

  python3 tests/test_examples.py SOURCE_DIR

config.json is PicoClaw's current format (config "version": 3, model_list). The legacy file has no
version (0, the old "providers" format): current PicoClaw migrates it on load (V0 -> V1 -> V2 -> V3),
and the part of that migration which decides where requests go is re-enacted here, as PicoClaw's
pkg/config does it (migrateLegacyAgentDefaultsModel, then v0ProvidersMapToModelList: the entry is
named after the provider slot, "vllm"), so that the agent's model_name still finds the entry.
The field lists are PicoClaw's ModelConfig and AgentDefaults JSON tags (pkg/config/config.go).

With a provider binary (ctest passes it), PicoClaw's web-UI probe is re-enacted too: for a local
api_base its backend (web/backend/api/model_status.go) GETs {api_base}/models within 800 ms and
calls the model reachable when some data[].id equals, case-insensitively (Go's EqualFold), the
configured model after splitModel: trimmed, lower-cased, cut at the first "/" (the protocol,
"openai"). The provider is started as the README says (picolm-provider with no model: the
built-in demo model; then another GGUF file, since the ids must agree whatever file is served),
on a free port instead of 8080, which replaces the port of the config's api_base.

  python3 tests/test_examples.py SOURCE_DIR [PROVIDER_BIN OTHER_MODEL.gguf]
"""
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

MODEL_CONFIG_FIELDS = {
    "model_name", "provider", "model", "api_base", "proxy", "fallbacks", "auth_method", "connect_mode",
    "workspace", "rpm", "max_tokens_field", "request_timeout", "thinking_level", "tool_schema_transform",
    "streaming", "extra_body", "custom_headers", "api_keys", "enabled", "user_agent", "_comment",
}
AGENT_DEFAULTS_FIELDS = {
    "workspace", "restrict_to_workspace", "allow_read_outside_workspace", "provider", "model_name",
    "model_fallbacks", "image_model", "image_model_fallbacks", "max_tokens", "context_window", "temperature",
    "max_tool_iterations", "summarize_message_threshold", "summarize_token_percent", "max_media_size",
    "routing", "steering_mode", "max_parallel_turns", "subturn", "tool_feedback", "split_on_marker",
    "context_manager", "context_manager_config", "turn_profile", "max_llm_retries", "llm_retry_backoff_secs",
}
LEGACY_AGENT_DEFAULTS_FIELDS = AGENT_DEFAULTS_FIELDS | {"model"}  # V0 spelling of model_name
LEGACY_VLLM_FIELDS = {"api_key", "api_base", "proxy", "request_timeout"}  # what the V0 migration copies

# picolm-provider's defaults (tools/picolm_provider.cpp): --host 127.0.0.1 --port 8080, --timeout 110,
# context min(training context, 4096).
PROVIDER_API_BASE = "http://127.0.0.1:8080/v1"
PROVIDER_TIMEOUT_SEC = 110
PROVIDER_MAX_CTX = 4096

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def load(path):
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ValueError(f"{path}: duplicate keys {sorted(dup)} (Go's decoder keeps the last silently)")
        return dict(pairs)

    with open(path, encoding="utf-8") as f:
        return json.load(f, object_pairs_hook=no_duplicates)


def find_model(model_list, name):
    """PicoClaw's Config.GetModelConfig: entries whose model_name equals the agent's."""
    return [m for m in model_list if m.get("model_name") == name]


def check_entry_reaches_provider(entry, where, protocols):
    proto, _, model_id = entry.get("model", "").partition("/")
    check(proto in protocols and model_id, f"{where}: model {entry.get('model')!r} is not '<{'|'.join(protocols)}>/ID'")
    check(entry.get("api_base") == PROVIDER_API_BASE,
          f"{where}: api_base {entry.get('api_base')!r} is not the provider's {PROVIDER_API_BASE}")


def test_current(path):
    cfg = load(path)
    check(cfg.get("version") == 3, f"{path}: version {cfg.get('version')!r}, PicoClaw's current config is 3")
    models = cfg.get("model_list")
    check(isinstance(models, list) and models, f"{path}: no model_list")
    for i, m in enumerate(models or []):
        extra = set(m) - MODEL_CONFIG_FIELDS
        check(not extra, f"{path}: model_list[{i}] has fields PicoClaw does not know: {sorted(extra)}")
    defaults = cfg.get("agents", {}).get("defaults", {})
    extra = set(defaults) - AGENT_DEFAULTS_FIELDS
    check(not extra, f"{path}: agents.defaults has fields PicoClaw does not know: {sorted(extra)}")
    check(defaults.get("model_name") == "local-picolm", f"{path}: agents.defaults.model_name is not local-picolm")
    entries = find_model(models or [], defaults.get("model_name"))
    check(len(entries) == 1, f"{path}: agents.defaults.model_name matches {len(entries)} model_list entries")
    if entries:
        e = entries[0]
        check_entry_reaches_provider(e, f"{path}: local-picolm", {"openai"})
        # An entry without api_keys is not auto-enabled by PicoClaw's migration: say it.
        check(e.get("enabled") is True, f"{path}: local-picolm is not \"enabled\": true")
        check("api_keys" not in e, f"{path}: local-picolm carries api_keys (the provider needs none by default)")
        # PicoClaw's timeout must outlast the provider's, so a long generation ends with
        # finish_reason "length" instead of a client-side timeout.
        check(int(e.get("request_timeout", 120)) > PROVIDER_TIMEOUT_SEC,
              f"{path}: request_timeout {e.get('request_timeout')} is not above the provider's --timeout")
    cw = defaults.get("context_window")
    check(cw is None or 0 < cw <= PROVIDER_MAX_CTX, f"{path}: context_window {cw} exceeds the provider's context")
    check(0 < defaults.get("max_tokens", 0) < (cw or PROVIDER_MAX_CTX),
          f"{path}: max_tokens {defaults.get('max_tokens')} does not fit the context")


def migrate_v0(cfg):
    """The slice of PicoClaw's V0 migration that builds model_list from providers.vllm."""
    defaults = cfg.get("agents", {}).get("defaults", {})
    if "model" in defaults:  # migrateLegacyAgentDefaultsModel
        defaults.setdefault("model_name", defaults["model"])
        del defaults["model"]
    if "model_list" in cfg:
        return cfg
    vllm = cfg.get("providers", {}).get("vllm")
    if not isinstance(vllm, dict):
        return cfg
    entry = {k: v for k, v in vllm.items() if k in LEGACY_VLLM_FIELDS and v not in ("", None)}
    if not entry:
        return cfg
    entry["model_name"] = "vllm"
    user_provider, user_model = defaults.get("provider", ""), defaults.get("model_name", "")
    model = "vllm/auto"
    if user_provider == "vllm" and user_model:
        model = user_model if "/" in user_model else "vllm/" + user_model
    entry["model"] = model
    cfg["model_list"] = [entry]
    return cfg


def test_legacy(path):
    cfg = load(path)
    check("version" not in cfg, f"{path}: the legacy form has no version field")
    check(set(cfg.get("providers", {})) == {"vllm"}, f"{path}: providers should hold only the vllm slot")
    extra = set(cfg.get("providers", {}).get("vllm", {})) - LEGACY_VLLM_FIELDS
    check(not extra, f"{path}: providers.vllm has fields the migration drops: {sorted(extra)}")
    defaults = cfg.get("agents", {}).get("defaults", {})
    extra = set(defaults) - LEGACY_AGENT_DEFAULTS_FIELDS
    check(not extra, f"{path}: agents.defaults has unknown fields: {sorted(extra)}")
    check(defaults.get("provider") == "vllm", f"{path}: agents.defaults.provider is not vllm")
    migrated = migrate_v0(json.loads(json.dumps(cfg)))
    name = migrated.get("agents", {}).get("defaults", {}).get("model_name")
    entries = find_model(migrated.get("model_list", []), name)
    check(len(entries) == 1, f"{path}: after PicoClaw's migration, model_name {name!r} matches {len(entries)} entries")
    if entries:
        check_entry_reaches_provider(entries[0], f"{path} (migrated)", {"vllm"})


def picoclaw_split_model(model):
    """PicoClaw's splitModel: (protocol, model id), both lower-cased; no "/" means openai."""
    model = model.strip().lower()
    if "/" not in model:
        return "openai", model
    protocol, _, rest = model.partition("/")
    return protocol, rest.strip()


def picoclaw_probe(api_base, model, api_key=""):
    """PicoClaw's probeOpenAICompatibleModel for the configured `model`: True = reachable."""
    _, model_id = picoclaw_split_model(model)
    url = api_base.strip().rstrip("/") + "/models"
    req = urllib.request.Request(url)
    if api_key.strip():
        req.add_header("Authorization", "Bearer " + api_key.strip())
    try:
        with urllib.request.urlopen(req, timeout=0.8) as res:  # modelProbeTimeout
            if res.status != 200:
                return False
            data = json.load(res).get("data") or []
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return any(str(m.get("id", "")).strip().casefold() == model_id.casefold() for m in data)


class Provider:
    """picolm-provider on a free loopback port; args as the README gives them."""

    def __init__(self, binary, args):
        self.proc = subprocess.Popen([binary, "--port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()  # "listening on HOST:PORT", the only stdout line
        m = re.match(r"listening on ([^:]+):(\d+)", line)
        if not m:
            self.stop()
            raise RuntimeError(f"{binary} {args}: no 'listening on' line (got {line!r})")
        self.port = int(m.group(2))
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{binary} {args}: /health not 200 within 60 s")

    def api_base(self, configured):
        return re.sub(r":8080(?=/|$)", f":{self.port}", configured)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_probe(folder, binary, other_model):
    """PicoClaw's web UI must find the example's model on a provider started as the README says."""
    current = load(folder / "config.json")
    name = current["agents"]["defaults"]["model_name"]
    entry = find_model(current["model_list"], name)[0]
    legacy = migrate_v0(load(folder / "config.legacy-providers.json"))
    lname = legacy["agents"]["defaults"]["model_name"]
    lentry = find_model(legacy["model_list"], lname)[0]
    for label, args in (("demo model (picolm-provider)", []),
                        (f"-m {Path(other_model).name}", ["-m", str(other_model)]),
                        # examples/picoclaw/README.md: the legacy file's migrated entry asks for "vllm".
                        ("--model-id vllm", ["--model-id", "vllm"])):
        try:
            p = Provider(binary, args)
        except RuntimeError as e:
            check(False, str(e))
            continue
        try:
            base = p.api_base(entry["api_base"])
            check(picoclaw_probe(base, entry["model"]),
                  f"{label}: PicoClaw's probe does not find {entry['model']!r} in {base}/models")
            # Self-check: the re-enactment can say "unreachable".
            check(not picoclaw_probe(base, "openai/some-other-model"),
                  f"{label}: the probe found a model the provider does not serve")
            check(not picoclaw_probe(base.replace(str(p.port), "1"), entry["model"]),
                  f"{label}: the probe succeeded against a closed port")
            if args and args[0] == "--model-id":
                lbase = p.api_base(lentry["api_base"])
                check(picoclaw_probe(lbase, lentry["model"]),
                      f"{label}: the migrated legacy entry {lentry['model']!r} is not found in {lbase}/models")
        finally:
            p.stop()


def main():
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    folder = src / "examples" / "picoclaw"
    current, legacy = folder / "config.json", folder / "config.legacy-providers.json"
    for p in (current, legacy):
        if not p.is_file():
            print(f"missing {p}")
            return 1
    test_current(current)
    test_legacy(legacy)
    # The migration re-enactment must be able to fail: the entry named after the agent's model
    # (what older examples did) is not found after migration.
    broken = {"providers": {"vllm": {"api_base": PROVIDER_API_BASE}},
              "agents": {"defaults": {"provider": "vllm", "model": "picolm-demo"}}}
    m = migrate_v0(broken)
    check(not find_model(m["model_list"], m["agents"]["defaults"]["model_name"]),
          "self-check: a legacy model name other than the slot's should not resolve")
    if len(sys.argv) > 3:
        provider, other_model = Path(sys.argv[2]), Path(sys.argv[3])
        for p in (provider, other_model):
            if not p.is_file():
                print(f"missing {p}")
                return 1
        test_probe(folder, str(provider), str(other_model))
    else:
        print("test_examples: no provider binary given; PicoClaw's model probe not re-enacted")
    for f in failures:
        print("FAIL:", f)
    print(f"test_examples: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
