"""Fuzz the HTTP API with schemathesis against a private local stack.

Run by infra/fuzz-api.sh inside its virtualenv (.local/venv-fuzz, with
schemathesis and PyMySQL). Steps: create a fresh database on the MariaDB/MySQL
of the DSN, start cmd/meshlocal on a free port with that database, embedded
Kafka (kfake) and a private state directory (so it never meets a running
`make run`), create agents with the admin API, exchange one agent's API key
for a JWT, run schemathesis over openapi.yaml with infra/schemathesis.toml,
and stop and drop what it started. Credentials go to schemathesis through its environment only
and are never printed. Exit status: schemathesis's (0: no failure).
"""

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pymysql

READY_TIMEOUT = 90  # seconds for meshlocal to serve (migrations included)
STOP_TIMEOUT = 20  # seconds for meshlocal's clean shutdown before SIGKILL
FUZZ_TIMEOUT = 600  # seconds for the whole schemathesis run (about 20 s is usual)
REQUEST_TIMEOUT = 10  # seconds for one request: a hung route fails, not the clock


def say(msg):
    print(f"fuzz: {msg}", flush=True)


def parse_dsn(dsn):
    """Reads a go-sql-driver DSN: user:pass@tcp(host:port)/db?params."""
    m = re.fullmatch(r"(?:([^:@]*)(?::(.*))?@)?(?:tcp\(([^)]*)\))?/([^?]*)(?:\?(.*))?", dsn)
    if not m:
        raise SystemExit("fuzz: MYSQL_DSN is not a user:pass@tcp(host:port)/db DSN")
    user, password, addr, db, params = m.groups()
    host, _, port = (addr or "127.0.0.1:3306").rpartition(":")
    return {"user": user or "root", "password": password or "", "host": host or "127.0.0.1",
            "port": int(port or 3306), "db": db, "params": params or ""}


def with_db(dsn, name):
    """The DSN with another database name."""
    head, _, tail = dsn.partition("/")
    _, q, params = tail.partition("?")
    return f"{head}/{name}{q}{params}"


class API:
    def __init__(self, base):
        self.base = base

    def call(self, method, path, body=None, bearer=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if bearer:
            req.add_header("Authorization", "Bearer " + bearer)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def must(self, method, path, body=None, bearer=None):
        status, out = self.call(method, path, body, bearer)
        if status // 100 != 2:
            code = out.get("code") if isinstance(out, dict) else out
            raise SystemExit(f"fuzz: setup {method} {path}: HTTP {status} {code}")
        return out


def seed(api, admin_key):
    """Agents and data for the fuzzer to meet: its agent (fuzz-a) has a
    friend (fuzz-b) with tasks both ways, a group, and a pending friend
    request from fuzz-c. Returns fuzz-a's JWT."""
    keys = {}
    for agent in ("fuzz-a", "fuzz-b", "fuzz-c"):
        keys[agent] = api.must("POST", "/v1/admin/agents", {"agent_id": agent, "name": agent}, admin_key)["api_key"]
    api.must("POST", "/v1/admin/friendships", {"a": "fuzz-a", "b": "fuzz-b"}, admin_key)
    api.must("POST", "/v1/admin/groups", {"name": "fuzz group", "owner": "fuzz-a", "members": ["fuzz-b"]}, admin_key)
    tokens = {a: api.must("POST", "/v1/auth/token", {"api_key": k})["token"] for a, k in keys.items()}
    text = [{"kind": "text", "text": "hello"}]
    api.must("POST", "/v1/messages", {"to": "fuzz-a", "parts": text}, tokens["fuzz-b"])
    api.must("POST", "/v1/messages", {"to": "fuzz-b", "parts": text}, tokens["fuzz-a"])
    api.must("POST", "/v1/friends/requests", {"to": "fuzz-a"}, tokens["fuzz-c"])
    return tokens["fuzz-a"]


def start_meshlocal(binary, root, dsn, state, admin_key):
    # None of the caller's mesh settings (keys, brokers, limits): the stack is
    # the defaults plus what is set here, the same on every machine.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MESH_", "KAFKA_", "MYSQL_"))}
    env.update(MYSQL_DSN=dsn, MESH_STATE_DIR=state, MESH_KFAKE_PORT="0",
               MESH_HTTP_ADDR="127.0.0.1:0", MESH_ADMIN_KEY=admin_key)
    proc = subprocess.Popen([binary, "-demo=false"], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    found = {}
    ready = threading.Event()

    def read():
        # meshlocal prints credentials after it is up: read them, never echo.
        for line in proc.stdout:
            m = re.search(r"serving template\.yaml routes on (http://\S+)", line)
            if m:
                found["url"] = m.group(1)
            if "meshlocal is up" in line:
                ready.set()
            if line.startswith("meshlocal:"):  # its one-line fatal error
                found["error"] = line.strip()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(READY_TIMEOUT) or proc.poll() is not None or "url" not in found:
        stop_meshlocal(proc)
        raise SystemExit(f"fuzz: meshlocal did not come up: {found.get('error', 'see ' + state + '/meshlocal/meshlocal.log')}")
    return proc, found["url"]


def stop_meshlocal(proc):
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)  # its clean shutdown
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# The gate: no 5xx, every status and body (and Content-Type, and required
# headers such as Retry-After) as documented, valid requests not refused as
# malformed, and no secured operation served without valid credentials
# (ignored_auth: a route that skips authentication passes every other check).
# Left out, with the reason (MESH_FUZZ_CHECKS=all shows them):
# negative_data_rejection: the server reads an empty query value, an empty
# optional id and a JSON null as absent, which the document does not allow
# (a document stricter than the server is safe for clients);
# ensure_resource_availability: a friend request to an unknown id answers as
# created and stores nothing, by design (no enumeration);
# allow_header_conformance: API Gateway routes DELETE /v1/friends/requests to
# DELETE /v1/friends/{id}, so Allow lists a method the path does not declare;
# unsupported_method: on AWS, API Gateway answers an undeclared method (404),
# not our code, so it would test only the local router's emulation.
GATE_CHECKS = ",".join(["not_a_server_error", "status_code_conformance", "response_schema_conformance",
                        "content_type_conformance", "response_headers_conformance", "positive_data_acceptance",
                        "ignored_auth"])


def run_schemathesis(venv_bin, spec, config, url, examples, seed_value, checks, env, log_path, workdir):
    cmd = [os.path.join(venv_bin, "schemathesis"), "--config-file", config, "run", spec, "--url", url,
           "--max-examples", str(examples), "--seed", str(seed_value), "--workers", "1",
           "--generation-database", "none", "--no-color", "--checks", checks,
           "--request-timeout", str(REQUEST_TIMEOUT)]
    # In the private state directory: whatever it writes there goes with it.
    proc = subprocess.Popen(cmd, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(FUZZ_TIMEOUT, proc.kill)
    timer.start()
    generated = failures = None
    in_warnings = False
    with open(log_path, "w") as log:
        for line in proc.stdout:
            log.write(line)
            # Progress and results as they come, without the advice section
            # about missing test data (it is in the log).
            if re.match(r"=+ \w", line):
                in_warnings = "WARNINGS" in line
            if not in_warnings:
                sys.stdout.write(line)
                sys.stdout.flush()
            m = re.search(r"(\d+) generated", line)
            if m:
                generated = int(m.group(1))
            m = re.search(r"(\d+) failures?[, ]", line)
            if m:
                failures = int(m.group(1))
    rc = proc.wait()
    if not timer.is_alive():
        say(f"schemathesis did not finish within {FUZZ_TIMEOUT} s and was killed")
    timer.cancel()
    return rc, generated, failures if failures is not None else (0 if rc == 0 else None)


def answer_counts(log_path):
    """Counts meshlocal's answers by status class from its request log: how
    many cases got past validation and state checks (2xx) tells whether the
    fuzzing reaches the routes' logic."""
    counts = {}
    try:
        with open(log_path) as f:
            for line in f:
                try:
                    status = json.loads(line).get("status")
                except ValueError:
                    continue
                if isinstance(status, int):
                    key = "404" if status == 404 else f"{status // 100}xx"
                    counts[key] = counts.get(key, 0) + 1
    except OSError:
        return "?"
    return ", ".join(f"{k} {counts[k]}" for k in sorted(counts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--meshlocal", required=True)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--examples", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--checks", default="")
    ap.add_argument("--log", required=True)
    a = ap.parse_args()

    started = time.monotonic()
    server = parse_dsn(a.dsn)
    # mesh_ prefix: the local MariaDB grants the mesh user mesh_* databases.
    db_name = "mesh_fuzz_" + secrets.token_hex(6)
    try:
        admin = pymysql.connect(host=server["host"], port=server["port"], user=server["user"],
                                password=server["password"], connect_timeout=10, autocommit=True)
    except pymysql.MySQLError as e:
        raise SystemExit(f"fuzz: cannot reach the database at {server['host']}:{server['port']}: {e}; "
                         "start it (infra/mariadb.sh up) or set MYSQL_DSN")
    state = tempfile.mkdtemp(prefix="mesh-fuzz-")
    proc = None
    ok = False
    try:
        with admin.cursor() as c:
            c.execute(f"CREATE DATABASE {db_name} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        say(f"database {db_name} on {server['host']}:{server['port']}; starting meshlocal (embedded Kafka, state {state})")
        admin_key = "amadm_" + secrets.token_urlsafe(32)
        proc, url = start_meshlocal(a.meshlocal, a.root, with_db(a.dsn, db_name), state, admin_key)
        api = API(url)
        token = seed(api, admin_key)
        say(f"meshlocal on {url}; agents fuzz-a, fuzz-b, fuzz-c; running schemathesis "
            f"({a.examples} examples per operation, seed {a.seed})")
        env = dict(os.environ, MESH_FUZZ_AGENT_TOKEN=token, MESH_FUZZ_ADMIN_KEY=admin_key,
                   NO_COLOR="1")
        fuzz_start = time.monotonic()
        rc, generated, failures = run_schemathesis(
            os.path.dirname(sys.executable), os.path.join(a.root, "openapi.yaml"),
            os.path.join(a.root, "infra", "schemathesis.toml"), url, a.examples, a.seed,
            a.checks or GATE_CHECKS, env, a.log, state)
        took = time.monotonic() - fuzz_start
        ok = rc == 0
        verdict = "PASS" if ok else "FAIL"
        say(f"{verdict}: {generated if generated is not None else '?'} cases, "
            f"{failures if failures is not None else '?'} failures, schemathesis {took:.0f} s, "
            f"whole step {time.monotonic() - started:.0f} s (full output: {a.log})")
        say(f"answers: {answer_counts(os.path.join(state, 'meshlocal', 'meshlocal.log'))}")
        return rc
    finally:
        if proc is not None:
            stop_meshlocal(proc)
        with admin.cursor() as c:
            c.execute(f"DROP DATABASE IF EXISTS {db_name}")
        admin.close()
        if ok:
            shutil.rmtree(state, ignore_errors=True)
        else:
            say(f"meshlocal's log kept in {state}/meshlocal/meshlocal.log")


if __name__ == "__main__":
    sys.exit(main())
