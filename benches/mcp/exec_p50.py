"""The p50 of a trivial `exec` over streamable HTTP, with the official
Python MCP SDK (`mcp`, from .venv-mcp), under MCP 2025-11-25 (a session
opened with `initialize`) and 2026-07-28 (stateless), against one
`quickcell serve --http` it starts.

    .venv-mcp/bin/python benches/mcp/exec_p50.py QUICKCELL [--calls N]

Each call is `exec {code: "return 1 + 1"}` from one client, one at a
time; the first 10 warm up. Prints p50, p90 and min per revision.
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import tempfile
import time

from mcp import Client


async def measure(url: str, mode: str, calls: int) -> list[float]:
    samples = []
    async with Client(url, mode=mode) as client:
        for _ in range(calls + 10):
            started = time.perf_counter()
            result = await client.call_tool("exec", {"title": "bench", "code": "return 1 + 1"})
            samples.append(time.perf_counter() - started)
            assert result.structured_content["value"] == 2, result
        version = client.protocol_version
    return version, samples[10:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("quickcell")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = tempfile.mkdtemp(prefix="quickcell-mcp-bench-")
    server = subprocess.Popen(
        [args.quickcell, "serve", "--http", f"127.0.0.1:{port}", "--state-dir", os.path.join(state, "state")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/mcp"
        for mode in ["legacy", "2026-07-28"]:
            version, samples = asyncio.run(measure(url, mode, args.calls))
            samples.sort()
            p90 = samples[int(len(samples) * 0.9)]
            print(f"{version}: p50 {statistics.median(samples) * 1000:.2f} ms, "
                  f"p90 {p90 * 1000:.2f} ms, min {samples[0] * 1000:.2f} ms ({len(samples)} calls)")
    finally:
        server.kill()
        server.wait()


main()
