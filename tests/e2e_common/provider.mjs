// Shared by the npm end-to-end tests (tests/e2e_*/): the command line, and a picolm-provider child
// process on a free loopback port. Each run.sh copies this file into its work folder as
// e2e_common/provider.mjs, beside the test scripts and their node_modules.
import { spawn } from "node:child_process";
import assert from "node:assert/strict";

// "--name value" pairs of the command line; asserts that every name in `required` is there.
export function parseArgs(usage, required = ["provider", "model"]) {
  const args = Object.fromEntries(
    process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
  );
  for (const name of required) assert.ok(args[name], `usage: ${usage}`);
  return args;
}

// Starts `provider -m model` on 127.0.0.1 with an OS-chosen port, one slot and no prompt-cache
// directory, and resolves once /health answers 200. `ctx` is the context size, `extra` more flags.
// Resolves to { child, port }; the caller ends the child (child.kill("SIGTERM")).
export async function startProvider({ provider, model, ctx = 2048, extra = [] }) {
  const child = spawn(
    provider,
    ["-m", model, "--host", "127.0.0.1", "--port", "0", "-c", String(ctx), "-j", "1", "--cache-dir", "none", ...extra],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const port = await new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d.toString();
      const m = out.match(/listening on ([\d.]+):(\d+)/);
      if (m) resolve(Number(m[2]));
    });
    child.on("exit", (code) => reject(new Error(`provider exited with ${code}`)));
  });
  try {
    await waitHealthy(port);
  } catch (e) {
    child.kill("SIGTERM");
    throw e;
  }
  return { child, port };
}

// Polls GET /health for up to 60 s: the port is open before the model has finished loading.
async function waitHealthy(port) {
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/health`);
      if (r.status === 200) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("provider never became healthy");
}
