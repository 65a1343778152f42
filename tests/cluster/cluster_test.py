#!/usr/bin/env python3
"""Three picolm-provider replicas behind HAProxy (examples/cluster), on loopback (issue 22).

  cluster_test.py PROVIDER MODEL WORKDIR AGENTBENCH SESSION_MODEL

1. Routing: 3 system prompts x 20 requests. Every prompt is served, and prefilled, by exactly one
   replica: each response names its replica (X-Picolm-Instance); each replica's /metrics (read through
   the proxy's /replica/NAME/metrics) counts exactly the requests attributed to it, so no other
   replica saw the prompt; its prefilled-token counter equals the prefill the responses report; after
   the first request of each prompt >= 90% of the requests reuse the cached system prompt.
2. Failover: one replica is killed (SIGKILL) mid-run: every request that had not started streaming
   completes, on another replica.
3. Rolling restart: while 60 requests run, each replica in turn gets SIGTERM (drains, exits 0) and
   is started again: all 60 complete, none with an error.
4. examples/cluster/haproxy.cfg is the generator's output and valid; scripts/cluster.sh 3 comes up,
   serves a chat through its proxy and stops on SIGINT.
5. PicoClaw's 8-turn agent session (issue 27: one system message whose clock line moves 3 minutes a
   turn; picolm-agentbench's session, SESSION_MODEL with a real Qwen3 vocabulary) through the proxy of
   scripts/cluster.sh 3: picolm-agentbench --url puts turns 2-8 on one replica; then the session again,
   and the replica holding it is killed (-9) between turns 4 and 5: every later turn is answered by
   another replica, and the script keeps the proxy and the other replicas running.

Only the Python standard library; everything listens on 127.0.0.1.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
MAKE_CFG = os.path.join(SOURCE, "examples", "cluster", "make-haproxy-cfg.sh")

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Replica:
    def __init__(self, name, provider, model, workdir, cache_dir):
        self.name, self.provider, self.model = name, provider, model
        self.workdir, self.cache_dir = workdir, cache_dir
        self.port = 0  # the first start asks for any free port; restarts reuse it
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(os.path.join(self.workdir, "%s.%d.log" % (self.name, self.starts)), "wb")
        self.proc = subprocess.Popen(
            [self.provider, "-m", self.model, "--host", HOST, "--port", str(self.port), "-j", "1",
             "--instance-id", self.name, "--cache-dir", self.cache_dir, "--drain-timeout", "30",
             "--max-queue", "16"],
            stdout=subprocess.PIPE, stderr=log)
        line = self.proc.stdout.readline().decode()
        m = re.match(r"listening on .*:(\d+)", line)
        if not m:
            raise RuntimeError("%s did not start: %r (see %s)" % (self.name, line, log.name))
        self.port = int(m.group(1))

    def wait_healthy(self, timeout=60):
        until = time.time() + timeout
        while time.time() < until:
            try:
                status, _, _ = request(self.port, "GET", "/health", timeout=5)
                if status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False


def request(port, method, path, body=None, headers=None, timeout=120):
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode("utf-8", "replace")
    finally:
        c.close()


def system_prompt(k):
    # Long and distinct from the first word on: about 600-700 tokens of the demo vocabulary each.
    topics = ["kitchen lights and the heating schedule", "a weekly shopping list with prices",
              "train times between three cities"]
    # The proxy keys on the prompt without its digits (examples/cluster): the assistant's name spells
    # k in letters, so the 12 prompts of the rolling restart stay 12 keys.
    name = "".join("abcdefghij"[int(d)] for d in str(k))
    words = ("You are assistant %s. You help with %s. " % (name, topics[k % 3])) * 12
    return words + "Answer in one short sentence. Rules: %s" % ", ".join("rule %d-%d" % (k, i) for i in range(30))


def chat_body(k, user, stream=False, max_tokens=4):
    return json.dumps({"model": "demo", "temperature": 0, "max_tokens": max_tokens, "stream": stream,
                       "messages": [{"role": "system", "content": system_prompt(k)},
                                    {"role": "user", "content": user}]})


class Result:
    def __init__(self, k, stream):
        self.k, self.stream = k, stream
        self.status = None
        self.instance = None
        self.error = None
        self.usage = None
        self.started_streaming = False  # a stream's 200 and headers arrived (the response has begun)
        self.finished = False


def calibrate(port):
    """Reply length (tokens) that takes about 0.25 s on this build and host: long enough for a kill
    or a SIGTERM to find it running, short enough for a sanitizer build on a loaded host."""
    t = time.time()
    r = chat(port, 99, "calibration", max_tokens=64)  # a prompt of its own: not one the test routes
    if r.status != 200:
        raise RuntimeError("calibration request failed: %s" % r.error)
    elapsed = max(time.time() - t, 1e-3)
    return max(24, min(600, int(64 * 0.25 / elapsed)))


def chat(proxy_port, k, user, stream=False, max_tokens=4):
    """One request through the proxy, read to the end."""
    r = Result(k, stream)
    c = http.client.HTTPConnection(HOST, proxy_port, timeout=120)
    try:
        c.request("POST", "/v1/chat/completions", body=chat_body(k, user, stream, max_tokens),
                  headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        r.status = resp.status
        r.instance = resp.getheader("X-Picolm-Instance")
        if resp.status != 200:
            r.error = "HTTP %d: %s" % (resp.status, resp.read()[:300])
            return r
        if not stream:
            raw = resp.read()
            try:
                body = json.loads(raw)
            except ValueError as e:
                r.error = "%s: %d bytes from %s, Content-Length %s: %r" % (
                    e, len(raw), r.instance, resp.getheader("Content-Length"), raw[-200:])
                return r
            r.usage = body.get("usage")
            r.finished = body["choices"][0].get("finish_reason") in ("stop", "length")
            return r
        # The 200 and its headers reached the client: the response has started, so no proxy may
        # replay it elsewhere (the provider sends them with the first token; a kill can still fall
        # between the headers and the first event).
        r.started_streaming = r.status == 200
        while True:
            line = resp.readline()  # through the chunked decoding: the proxy may split events across chunks
            if not line:
                r.error = "stream ended without [DONE]"
                return r
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                r.finished = True
                return r
            ev = json.loads(data)
            if "error" in ev:
                r.error = "error event: %s" % data[:300]
                return r
            r.started_streaming = True
    except (OSError, http.client.HTTPException, ValueError) as e:
        r.error = "%s: %s" % (type(e).__name__, e)
        return r
    finally:
        c.close()


def metrics(proxy_port, name):
    status, _, text = request(proxy_port, "GET", "/replica/%s/metrics" % name, timeout=10)
    if status != 200:
        raise RuntimeError("metrics of %s: HTTP %d" % (name, status))
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def proxy_counters(proxy_port):
    """Retries and redispatches of the replicas backend, from HAProxy's own exporter."""
    _, _, text = request(proxy_port, "GET", "/haproxy/metrics", timeout=10)
    out = 0
    for line in text.splitlines():
        if re.match(r'haproxy_backend_(retry|redispatch)_warnings_total\{proxy="replicas"\}', line):
            out += int(float(line.rsplit(" ", 1)[1]))
    return out


def wait_busy(replica, timeout=10):
    """Polls the replica's own /metrics until a generation runs there; True if one did in time."""
    until = time.time() + timeout
    while time.time() < until:
        try:
            status, _, text = request(replica.port, "GET", "/metrics", timeout=5)
            if status == 200 and "\npicolm_engine_busy 1\n" in text:
                return True
        except OSError:
            pass
        time.sleep(0.005)
    return False


def drained_count(replica):
    """The number of requests the replica's last drain started with (its log line)."""
    with open(os.path.join(replica.workdir, "%s.%d.log" % (replica.name, replica.starts))) as f:
        m = re.search(r"draining: (\d+) request", f.read())
    return int(m.group(1)) if m else -1


def chat_200(m):
    return m.get('picolm_requests_total{endpoint="chat_completions",status="200"}', 0)


def run_parallel(jobs, workers):
    """jobs: list of callables; runs them on `workers` threads in order; returns their results."""
    results = [None] * len(jobs)
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(jobs):
                return
            results[i] = jobs[i]()

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    return threads, results


def free_port_run(n):
    """A port p with p+1..p+n free too (scripts/cluster.sh numbers its ports from one base)."""
    for _ in range(50):
        base = free_port()
        socks = []
        try:
            for p in range(base, base + n + 1):
                s = socket.socket()
                socks.append(s)
                s.bind((HOST, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of %d free ports" % (n + 1))


def check_example_config():
    """examples/cluster/haproxy.cfg is the generator's output for its three replicas, and valid."""
    made = subprocess.run(["bash", MAKE_CFG, "127.0.0.1:8081", "127.0.0.1:8082", "127.0.0.1:8083"],
                          check=True, capture_output=True, text=True).stdout
    with open(os.path.join(SOURCE, "examples", "cluster", "haproxy.cfg")) as f:
        check(f.read() == made, "examples/cluster/haproxy.cfg is make-haproxy-cfg.sh's output")
    valid = subprocess.run(["haproxy", "-c", "-f", os.path.join(SOURCE, "examples", "cluster", "haproxy.cfg")],
                           capture_output=True, text=True)
    check(valid.returncode == 0, "haproxy -c accepts examples/cluster/haproxy.cfg: %s" % valid.stderr.strip()[-300:])


def post_raw(port, body, timeout=120):
    """POST a chat body through the proxy and read the whole answer (JSON or SSE): (status, instance, text)."""
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request("POST", "/v1/chat/completions", body=body.encode("utf-8"),
                  headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        return resp.status, resp.getheader("X-Picolm-Instance"), resp.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        return None, None, "%s: %s" % (type(e).__name__, e)
    finally:
        c.close()


def wait_proxy_idle(proxy_port, timeout=10):
    """Until the proxy counts no request on any replica. Bounded-load hashing (hash-balance-factor 150)
    rightly passes a request on when its replica still counts the previous one as active, which a
    client can see finished a moment before the proxy does; a chat's turns are minutes apart."""
    until = time.time() + timeout
    while time.time() < until:
        _, _, text = request(proxy_port, "GET", "/haproxy/metrics", timeout=10)
        busy = [line for line in text.splitlines()
                if line.startswith('haproxy_server_current_sessions{proxy="replicas"') and not line.endswith(" 0")]
        if "haproxy_server_current_sessions" in text and not busy:
            return True
        time.sleep(0.01)
    return False


def play(proxy_port, body):
    """One turn after the previous one has left the proxy: (status, replica, uncached share or None, text)."""
    wait_proxy_idle(proxy_port)
    st, inst, text = post_raw(proxy_port, body)
    share = None
    prompt = re.findall(r'"prompt_tokens":(\d+)', text)
    cached = re.findall(r'"cached_tokens":(\d+)', text)
    if prompt and cached:
        share = round((int(prompt[-1]) - int(cached[-1])) / int(prompt[-1]), 3)
    return st, inst, share, text


def check_agent_session(proc, base, log_name, agentbench, pids):
    """Issue 27: PicoClaw's session through the proxy of scripts/cluster.sh (its clock line moves every
    turn), then the replica holding it killed between two turns."""
    bodies = subprocess.run([agentbench, "--print-requests", "--max-tokens", "4"], check=True,
                            capture_output=True, text=True).stdout.splitlines()
    check(len(bodies) == 8 and all('"content":"# picoclaw' in b for b in bodies),
          "agent session: picolm-agentbench --print-requests gives 8 PicoClaw bodies")
    turns = [play(base, b) for b in bodies]
    print("agent session: replicas %s, uncached shares %s" % ([t[1] for t in turns], [t[2] for t in turns]))
    check(all(st == 200 and "data: [DONE]" in text for st, _, _, text in turns),
          "agent session: 8 turns answered through the proxy (%s)" %
          [(st, text[-200:]) for st, _, _, text in turns if st != 200])
    later = {t[1] for t in turns[1:]}
    check(len(later) == 1, "agent session: turns 2-8 on one replica although the clock line changes: %s" %
          sorted(map(str, later)))
    holder = turns[-1][1]

    # picolm-agentbench itself through the proxy (back to back: it does not wait for the proxy's
    # accounting, so its turns may spill; only that every turn is answered is checked).
    bench = subprocess.run([agentbench, "--url", "http://%s:%d" % (HOST, base), "--json", "--max-tokens", "4"],
                           capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in bench.stdout.splitlines() if line.startswith('{"turn"')]
    print("picolm-agentbench --url: replicas %s" % [t["replica"] for t in lines])
    check(bench.returncode == 0 and len(lines) == 8 and all(t["ok"] and t["replica"] for t in lines),
          "picolm-agentbench --url through the proxy: 8 turns answered, each naming its replica (rc %d: %s)" %
          (bench.returncode, bench.stderr[-300:]))

    # The same session again (as a user who keeps chatting), the holder killed between turns 4 and 5.
    first = [play(base, b) for b in bodies[:4]]
    check(all(st == 200 and "data: [DONE]" in text for st, _, _, text in first),
          "agent session: turns 1-4 answered (%s)" % [(st, text[-200:]) for st, _, _, text in first if st != 200])
    check({t[1] for t in first} == {holder}, "agent session: turns 1-4 again on %s: %s" %
          (holder, [t[1] for t in first]))
    victim = pids.get(holder)
    check(victim is not None, "agent session: the pid of %s from the banner (%s)" % (holder, pids))
    if victim is None:
        return
    wait_proxy_idle(base)
    os.kill(victim, signal.SIGKILL)
    # No waiting for the proxy's health check: a refused connection is retried on another replica.
    rest = [post_raw(base, b) for b in bodies[4:]]
    print("agent session: after killing %s (pid %d), turns 5-8 on %s" % (holder, victim, [i for _, i, _ in rest]))
    check(all(st == 200 and "data: [DONE]" in text for st, _, text in rest),
          "agent session: every turn after the kill answered (%s)" %
          [(st, text[-200:]) for st, _, text in rest if st != 200 or "data: [DONE]" not in text])
    check(all(inst not in (None, holder) for _, inst, _ in rest),
          "agent session: turns 5-8 answered by another replica than %s" % holder)
    check(proc.poll() is None, "scripts/cluster.sh still runs after %s was killed" % holder)
    until = time.time() + 10
    reported = False
    while time.time() < until and not reported:
        with open(log_name) as f:
            reported = "replica %s (pid %d) exited" % (holder, victim) in f.read()
        time.sleep(0.05)
    check(reported, "scripts/cluster.sh reports the exit of %s and goes on" % holder)
    st, inst, _ = post_raw(base, json.dumps({"messages": [{"role": "user", "content": "still there?"}],
                                             "max_tokens": 2}))
    check(st == 200 and inst != holder, "the proxy still answers after the kill (%s from %s)" % (st, inst))


def check_cluster_script(provider, workdir, agentbench, session_model):
    """scripts/cluster.sh 3 brings up three replicas and the proxy, serves a chat and the agent session
    (a replica killed in between), and stops on SIGINT."""
    base = free_port_run(3)
    env = dict(os.environ, PROVIDER=provider, PROXY_PORT=str(base), BASE_PORT=str(base), TMPDIR=workdir)
    log = open(os.path.join(workdir, "cluster_sh.log"), "wb")
    proc = subprocess.Popen(["bash", os.path.join(SOURCE, "scripts", "cluster.sh"), "3", "--cache-dir", "none",
                             "-j", "1", "-m", session_model, "-c", "8192"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        up = False
        until = time.time() + 60
        while time.time() < until and proc.poll() is None and not up:
            with open(log.name) as f:
                up = "cluster up" in f.read()
            time.sleep(0.1)
        check(up, "scripts/cluster.sh 3: cluster up (log %s)" % log.name)
        with open(log.name) as f:
            pids = {m.group(1): int(m.group(2)) for m in re.finditer(r"\b(r\d)=(\d+)", f.read())}
        time.sleep(1.2)  # the proxy's first health checks
        r = chat(base, 0, "hello", max_tokens=4)
        check(r.status == 200 and r.finished and r.instance in ("r1", "r2", "r3"),
              "scripts/cluster.sh 3: a chat through its proxy (%s, %s)" % (r.status, r.instance or r.error))
        status, _, text = request(base, "GET", "/replica/r2/metrics", timeout=10)
        check(status == 200 and 'picolm_instance_info{instance_id="r2"} 1' in text,
              "scripts/cluster.sh 3: /replica/r2/metrics")
        check_agent_session(proc, base, log.name, agentbench, pids)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "hung"
    check(rc == 0, "scripts/cluster.sh stopped on SIGINT (rc %s)" % rc)
    leftovers = []
    for port in range(base, base + 4):
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                leftovers.append(port)
    check(not leftovers, "scripts/cluster.sh left nothing listening (%s)" % leftovers)


def main():
    # ctest's timeout sends SIGTERM: unwind through the finally below, which stops every process.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("cluster test: terminated"))
    provider, model, workdir, agentbench, session_model = sys.argv[1:6]
    for path in (provider, model, agentbench, session_model):
        if not os.path.exists(path):
            sys.exit("cluster test: %s is missing" % path)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    check_example_config()
    cache_dir = os.path.join(workdir, "cache")  # one prompt-cache directory shared by the replicas
    replicas = [Replica("r%d" % (i + 1), provider, model, workdir, cache_dir) for i in range(3)]
    haproxy = None
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            check(r.wait_healthy(), "%s healthy on port %d" % (r.name, r.port))
        proxy_port = free_port()
        cfg = subprocess.run(["bash", MAKE_CFG, "--listen", "%s:%d" % (HOST, proxy_port)] +
                             ["%s=%s:%d" % (r.name, HOST, r.port) for r in replicas],
                             check=True, capture_output=True, text=True).stdout
        cfg_path = os.path.join(workdir, "haproxy.cfg")
        with open(cfg_path, "w") as f:
            f.write(cfg)
        hlog = open(os.path.join(workdir, "haproxy.log"), "wb")
        haproxy = subprocess.Popen(["haproxy", "-db", "-f", cfg_path], stdout=hlog, stderr=hlog)
        until = time.time() + 20
        up = False
        while time.time() < until and not up:
            try:
                up = request(proxy_port, "GET", "/v1/models", timeout=5)[0] == 200
            except OSError:
                time.sleep(0.1)
        check(up, "proxy answers on port %d" % proxy_port)
        time.sleep(1.5)  # first health checks (inter 1s) done: all servers UP
        long_reply = calibrate(replicas[0].port)
        print("long replies: %d tokens" % long_reply)

        # ---- 1. routing and the prompt cache ----
        # One request at a time, 30 ms apart: the bounded-load hashing (hash-balance-factor 150)
        # rightly spills a prompt to a second replica when its own is busier than 1.5x the average,
        # and at this tiny load one request the proxy has not yet counted as done is enough.
        before = {r.name: metrics(proxy_port, r.name) for r in replicas}
        results = []
        t0 = time.time()
        for i in range(20):
            for k in range(3):
                results.append(chat(proxy_port, k, "question %d about item %d" % (i, 7 * i + k)))
                time.sleep(0.03)
        print("routing: 60 requests in %.1f s" % (time.time() - t0))
        check(all(r.status == 200 and r.finished for r in results),
              "routing: all 60 requests answered (%s)" % [r.error for r in results if r.error][:3])
        after = {r.name: metrics(proxy_port, r.name) for r in replicas}
        served = {}
        for k in range(3):
            where = {r.instance for r in results if r.k == k}
            check(len(where) == 1, "prompt %d served by exactly one replica: %s" % (k, sorted(map(str, where))))
            served[k] = next(iter(where))
            of_k = [r for r in results if r.k == k and r.usage]
            first, rest = of_k[0], of_k[1:]
            uncached = [r.usage["prompt_tokens"] - r.usage["prompt_tokens_details"]["cached_tokens"] for r in of_k]
            # A hit reuses the whole system prompt (the prompt cache stores it in 64-token blocks,
            # the KV slot to the token), so at most the new user turn and one block are prefilled.
            hits = sum(1 for u in uncached[1:] if u <= 100)
            check(first.usage["prompt_tokens"] > 400 and uncached[0] > 400,
                  "prompt %d: first request prefilled the system prompt (%d of %d tokens)" %
                  (k, uncached[0], first.usage["prompt_tokens"]))
            check(hits >= 0.9 * len(rest), "prompt %d: cache hits %d/%d after the first (prefilled: %s)" %
                  (k, hits, len(rest), uncached[1:]))
            check(sum(1 for u in uncached if u > 100) == 1, "prompt %d prefilled once in the cluster" % k)
        for r in replicas:
            mine = [x for x in results if x.instance == r.name]
            d_req = chat_200(after[r.name]) - chat_200(before[r.name])
            d_pre = after[r.name]["picolm_prompt_tokens_total"] - before[r.name]["picolm_prompt_tokens_total"]
            want_pre = sum(x.usage["prompt_tokens"] - x.usage["prompt_tokens_details"]["cached_tokens"] for x in mine)
            check(d_req == len(mine), "%s /metrics counts %d chat requests, responses name it %d times "
                  "(no other prompt reached it)" % (r.name, d_req, len(mine)))
            check(d_pre == want_pre, "%s /metrics prefilled %d tokens = %d reported by its responses" %
                  (r.name, d_pre, want_pre))
            check(after[r.name].get('picolm_instance_info{instance_id="%s"}' % r.name) == 1,
                  "%s /metrics names its instance" % r.name)

        # ---- 2. failover: SIGKILL the replica of prompt 0 while it generates ----
        # Long replies (calibrate()) so that the kill finds requests running and queued there.
        victim = next(r for r in replicas if r.name == served[0])
        retries_before = proxy_counters(proxy_port)
        jobs = []
        for i in range(30):
            k = i % 3
            stream = i % 5 == 4
            jobs.append(lambda k=k, i=i, stream=stream: chat(proxy_port, k, "failover %d" % i, stream, long_reply))
        threads, fres = run_parallel(jobs, 6)
        until = time.time() + 30
        while time.time() < until and sum(1 for r in fres if r and r.instance == victim.name) < 2:
            time.sleep(0.01)  # mid-run: the victim has answered some requests already
        check(wait_busy(victim), "failover: %s generating when killed" % victim.name)
        victim.proc.kill()
        victim.proc.wait()
        for t in threads:
            t.join()
        lost = [r for r in fres if r.status != 200 or not r.finished]
        not_streaming_lost = [r for r in lost if not r.started_streaming]
        retried = proxy_counters(proxy_port) - retries_before
        check(not not_streaming_lost, "failover: every request not yet streaming completed (%d of 30 lost, "
              "all mid-stream: %s)" % (len(lost), [r.error for r in not_streaming_lost][:3]))
        check(retried + len(lost) > 0, "failover: the kill hit requests (%d retried by the proxy, %d cut "
              "mid-stream)" % (retried, len(lost)))
        after_kill = [r for r in fres if r.k == 0 and r.status == 200 and r.instance != victim.name]
        check(len(after_kill) > 0, "failover: prompt 0 went on on another replica (%d requests)" % len(after_kill))
        print("failover: %d retried, %d lost mid-stream, served by %s" %
              (retried, len(lost), {n: sum(1 for r in fres if r.instance == n) for n in ("r1", "r2", "r3")}))
        victim.start()  # same port, same name; it restores prompts from the shared cache directory
        check(victim.wait_healthy(), "%s back after the kill" % victim.name)
        time.sleep(1.5)

        # ---- 3. rolling restart while 60 requests run ----
        # 20 requests are released per replica restart (12 system prompts, so every replica owns
        # some), long enough (calibrate()) that the SIGTERM, sent once the replica generates, finds
        # work to drain.
        roll_start = time.time()
        released = threading.Semaphore(0)

        def gated(k, i):
            released.acquire()
            return chat(proxy_port, k, "rolling %d" % i, i % 2 == 1, long_reply)

        jobs = [lambda k=i % 12, i=i: gated(k, i) for i in range(60)]
        threads, rres = run_parallel(jobs, 4)
        rc = {}
        drained = {}
        for r in replicas:
            for _ in range(20):
                released.release()
            check(wait_busy(r), "rolling: %s generating when it gets SIGTERM" % r.name)
            t = time.time()
            r.proc.send_signal(signal.SIGTERM)
            try:
                rc[r.name] = r.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                rc[r.name] = "hung"
                r.proc.kill()
            drained[r.name] = drained_count(r)
            print("rolling: %s drained %d request(s) and exited in %.2f s" % (r.name, drained[r.name], time.time() - t))
            r.start()
            check(r.wait_healthy(), "rolling: %s healthy again" % r.name)
            time.sleep(1.2)  # the proxy sees it UP (inter 1s, rise 1) before the next one goes
        for t in threads:
            t.join()
        print("rolling: 60 requests and 3 restarts in %.1f s; served by %s" %
              (time.time() - roll_start, {n: sum(1 for r in rres if r.instance == n) for n in ("r1", "r2", "r3")}))
        check(all(v == 0 for v in rc.values()), "rolling: every replica exited 0 after SIGTERM: %s" % rc)
        check(sum(drained.values()) > 0, "rolling: the drains had requests to finish: %s" % drained)
        bad = [r.error or r.status for r in rres if r.status != 200 or not r.finished]
        check(not bad, "rolling restart: all 60 requests completed without an error (%d failed: %s)" %
              (len(bad), bad[:3]))
        still_running = sum(1 for r in rres if r is None)
        check(still_running == 0, "rolling: no request left over")

        # ---- 4, 5. the try-it-out script, PicoClaw's session through it ----
        check_cluster_script(provider, workdir, agentbench, session_model)
    finally:
        for r in replicas:
            if r.proc and r.proc.poll() is None:
                r.proc.send_signal(signal.SIGTERM)
        for r in replicas:
            if r.proc:
                try:
                    r.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    r.proc.kill()
        if haproxy:
            haproxy.terminate()
            haproxy.wait()
    if failures:
        print("%d check(s) failed; logs in %s" % (len(failures), workdir))
        return 1
    print("all cluster checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
