"""Round trips of the Codex code-mode host protocol, quickcell beside
Codex's own host (the `codex-code-mode-host` of the Codex CLI package,
which scripts/setup-tests installs into .npm-codex).

    python3 benches/codex/roundtrip.py [--rounds N] QUICKCELL [REFERENCE_HOST]

For each host, over one connection and session: a trivial execute (frame
sent to `execute/initialResponse`) and an execute whose cell makes one
nested tool call, answered at once (to its `Result`). The first 5 rounds
warm up; p50 and min of the rest are printed.
"""

import argparse
import json
import os
import statistics
import struct
import subprocess
import tempfile
import time

TOOL = {"name": "lookup", "tool_name": {"name": "lookup", "namespace": None},
        "description": "Looks things up", "kind": "function",
        "input_schema": None, "output_schema": None}


def measure(command, rounds):
    host = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)

    def send(message):
        payload = json.dumps(message).encode()
        host.stdin.write(struct.pack("<I", len(payload)) + payload)
        host.stdin.flush()

    def recv():
        (length,) = struct.unpack("<I", host.stdout.read(4))
        return json.loads(host.stdout.read(length))

    def execute(request_id, source, tools):
        send({"type": "operation/request", "id": request_id, "request": {
            "method": "session/execute", "sessionId": "bench", "request": {
                "tool_call_id": f"call-{request_id}", "enabled_tools": tools, "source": source,
                "yield_time_ms": 10000, "max_output_tokens": None}}})
        while True:
            message = recv()
            if message["type"] == "delegate/request":
                send({"type": "delegate/response", "id": message["id"], "result": {
                    "status": "ok", "value": {"type": "tool/result", "result": 7}}})
            elif message["type"] == "execute/initialResponse":
                assert "Result" in message["result"]["value"], message
                recv()  # its cell/closed
                return

    send({"type": "connection/hello", "supportedVersions": [1],
          "requiredCapabilities": [], "optionalCapabilities": []})
    assert recv()["type"] == "connection/ready"
    send({"type": "operation/request", "id": 1,
          "request": {"method": "session/open", "sessionId": "bench"}})
    recv()
    trivial, delegated = [], []
    request_id = 2
    for _ in range(rounds):
        started = time.perf_counter()
        execute(request_id, "text(1 + 1)", [])
        trivial.append(time.perf_counter() - started)
        started = time.perf_counter()
        execute(request_id + 1, "text(await tools.lookup({}))", [TOOL])
        delegated.append(time.perf_counter() - started)
        request_id += 2
    host.stdin.close()
    host.wait()
    return trivial[5:], delegated[5:]


def summary(samples):
    return f"p50 {statistics.median(samples) * 1000:.2f} ms, min {min(samples) * 1000:.2f} ms"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("quickcell")
    parser.add_argument("reference", nargs="?")
    parser.add_argument("--rounds", type=int, default=35)
    args = parser.parse_args()
    hosts = []
    if args.reference:
        hosts.append(("Codex's host", [args.reference]))
    state = tempfile.mkdtemp(prefix="quickcell-codex-bench-")
    hosts.append(("quickcell", [args.quickcell, "codex-host", "--state-dir", os.path.join(state, "state")]))
    for name, command in hosts:
        trivial, delegated = measure(command, args.rounds)
        print(f"{name:14} trivial execute: {summary(trivial)} | one nested tool call: {summary(delegated)}")


main()
