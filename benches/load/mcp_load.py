#!/usr/bin/env python3
"""Load on `quickcell serve --http`: many concurrent MCP clients, each
running cells that park and resume.

Each client opens its own MCP session (streamable HTTP, `initialize`, then
`notifications/initialized`), then runs CELLS cells one after another: an
`exec` whose cell parks at once (`await yield_control()`), then the `wait`
that resumes it to completion. Every client runs at the same time; the
server is started here on a free loopback port with a scratch state
directory and caps raised to hold them all.

Reports, as one JSON object on stdout: clients, cells completed, failures
(with the first few errors), wall time, throughput (cells per second),
p50 / p99 of the `exec` and `wait` latencies and of a whole cell, and the
server's peak RSS (VmHWM). Bounded: CLIENTS at most 5,000, CELLS at most
100, and the whole run stops after --deadline seconds (default 300).

    python3 benches/load/mcp_load.py --binary target/release/quickcell \
        --clients 1000 --cells 2

Standard library only; loopback only.
"""

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

MAX_CLIENTS = 5000
MAX_CELLS = 100
CELL = "await yield_control(); return 1;"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def post(port, body, session=None, method="POST"):
    """One request on a fresh connection (`Connection: close`): status,
    headers (lower-case names) and the JSON-RPC message of the body (an
    SSE `data:` line or plain JSON), or None when the body has none."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = json.dumps(body).encode() if body is not None else b""
    head = [
        f"{method} /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {len(data)}",
        "Connection: close",
    ]
    if session:
        head.append(f"Mcp-Session-Id: {session}")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    text = raw.decode("utf-8", "replace")
    head, _, body_text = text.partition("\r\n\r\n")
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    message = None
    for line in body_text.splitlines():
        line = line.strip()
        if line.startswith("data:") and "jsonrpc" in line:
            message = json.loads(line[5:])
            break
        if line.startswith("{") and "jsonrpc" in line:
            message = json.loads(line)
            break
    return status, headers, message


def call(id_, name, arguments):
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def structured(message):
    if not message or "result" not in message:
        raise RuntimeError(f"no result: {message}")
    return message["result"]["structuredContent"]


async def client(port, cells, stats, start_gate):
    await start_gate.wait()
    status, headers, message = await post(
        port,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "mcp_load", "version": "1"},
            },
        },
    )
    session = headers.get("mcp-session-id")
    if status != 200 or not session:
        raise RuntimeError(f"initialize: HTTP {status} {message}")
    await post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    next_id = 2
    for _ in range(cells):
        started = time.monotonic()
        _, _, message = await post(port, call(next_id, "exec", {"title": "load", "code": CELL}), session)
        next_id += 1
        parked = structured(message)
        if parked.get("status") != "waiting":
            raise RuntimeError(f"exec: {parked}")
        parked_at = time.monotonic()
        _, _, message = await post(port, call(next_id, "wait", {"runId": parked["runId"]}), session)
        next_id += 1
        done = structured(message)
        if done.get("status") != "completed" or done.get("value") != 1:
            raise RuntimeError(f"wait: {done}")
        ended = time.monotonic()
        stats["exec"].append(parked_at - started)
        stats["wait"].append(ended - parked_at)
        stats["cell"].append(ended - started)
    await post(port, None, session, method="DELETE")


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))
    return round(ordered[index] * 1000, 2)


def peak_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


async def run(args):
    port = free_port()
    scratch = tempfile.mkdtemp(prefix="quickcell-load-")
    config = os.path.join(scratch, "config.toml")
    with open(config, "w") as f:
        f.write(
            "[host]\n"
            f"max_suspended_runs = {max(64, args.clients * 2)}\n"
            "[http]\n"
            f"max_sessions = {max(1024, args.clients * 2)}\n"
        )
    server = subprocess.Popen(
        [args.binary, "serve", "--http", f"127.0.0.1:{port}", "--config", config,
         "--state-dir", os.path.join(scratch, "state")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        stats = {"exec": [], "wait": [], "cell": []}
        gate = asyncio.Event()
        tasks = [asyncio.create_task(client(port, args.cells, stats, gate)) for _ in range(args.clients)]
        started = time.monotonic()
        gate.set()
        done, pending = await asyncio.wait(tasks, timeout=args.deadline)
        wall = time.monotonic() - started
        for task in pending:
            task.cancel()
        errors = [repr(t.exception()) for t in done if t.exception() is not None]
        report = {
            "binary": args.binary,
            "clients": args.clients,
            "cellsPerClient": args.cells,
            "cellsCompleted": len(stats["cell"]),
            "clientsFailed": len(errors) + len(pending),
            "firstErrors": errors[:3],
            "wallSeconds": round(wall, 2),
            "cellsPerSecond": round(len(stats["cell"]) / wall, 1) if wall else None,
            "execMs": {"p50": percentile(stats["exec"], 50), "p99": percentile(stats["exec"], 99)},
            "waitMs": {"p50": percentile(stats["wait"], 50), "p99": percentile(stats["wait"], 99)},
            "cellMs": {"p50": percentile(stats["cell"], 50), "p99": percentile(stats["cell"], 99)},
            "serverPeakRssMiB": round((peak_rss_kib(server.pid) or 0) / 1024, 1),
        }
        print(json.dumps(report))
        return 0 if not errors and not pending else 1
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="target/release/quickcell")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--cells", type=int, default=2)
    parser.add_argument("--deadline", type=float, default=300.0)
    args = parser.parse_args()
    if not 1 <= args.clients <= MAX_CLIENTS:
        parser.error(f"--clients must be 1 to {MAX_CLIENTS}")
    if not 1 <= args.cells <= MAX_CELLS:
        parser.error(f"--cells must be 1 to {MAX_CELLS}")
    if not 1 <= args.deadline <= 3600:
        parser.error("--deadline must be 1 to 3600 seconds")
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
