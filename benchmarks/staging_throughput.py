"""Staging throughput: one large file frontend -> worker file server on loopback, against raw baselines.

Measured in the same run, alternating rounds (these machines are noisy), median of each:

* transfer: ``stage_file`` (HEAD, sendfile PUT, worker writes + verifies sha256, sidecars) with the
  local hash already cached, vs ``curl -T`` of the same file to a minimal receiver that only writes
  the bytes to disk (no hashing, no protocol);
* verify hashing: ``corral.staging.hashing.sha256_file`` vs ``sha256sum`` (and ``openssl dgst``, which
  uses the CPU's SHA extensions where coreutils may not);
* first staging of a file never hashed before: local hash + transfer, vs ``sha256sum`` + ``curl -T``.

Prints MB/s and the ratios (ours / raw, higher is better; target >= 0.90), then for each side the
median, min, max and spread (max / min) of the rounds, and the CPU seconds each transfer cost (worker +
client process vs minimal receiver + curl): on a machine other work keeps busy, wall times follow the
CPU left over, so the CPU cost is the steadier figure.

    python benchmarks/staging_throughput.py [--size-mib 1024] [--rounds 4] [--transfer-only] [--phases]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from machine import touch_memory

from corral.staging.hashing import cached_sha256, hash_sidecar_path, sha256_file
from corral.staging.uploader import stage_file

TOKEN = "bench-token"
MiB = 1 << 20

WORKER_SCRIPT = """
import asyncio, sys
from pathlib import Path
from corral.staging.receiver import build_file_server
if len(sys.argv) > 4:
    exec(open(sys.argv[4]).read())  # --phases: the timing hooks below, writing one line per upload
async def main():
    server = build_file_server(Path(sys.argv[2]), sys.argv[3], readiness=lambda: None)
    await server.start("127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

# Where the receiving thread's time goes, per upload (--phases): receiving from the socket, writing to
# the file, and waiting for a free buffer while the hash thread is behind; and the process's CPU.
PHASE_HOOKS = """
import json, resource, time
from corral.staging import body_writer, buffer_hasher, http_body
_phases = {"recv_s": 0.0, "write_s": 0.0, "hash_wait_s": 0.0}
_cpu = [0.0]
def _timed(holder, name, key):
    original = getattr(holder, name)
    def timed(*args):
        started = time.perf_counter()
        try:
            return original(*args)
        finally:
            _phases[key] += time.perf_counter() - started
    setattr(holder, name, timed)
_timed(http_body.LengthBody, "readinto", "recv_s")
_timed(body_writer, "_write_all", "write_s")
_timed(buffer_hasher.BufferHasher, "take", "hash_wait_s")
_finish = buffer_hasher.BufferHasher.finish
def _report(self, size_bytes):
    digest = _finish(self, size_bytes)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    with open(PHASES_OUT, "a") as out:
        out.write(json.dumps({**_phases, "cpu_s": cpu - _cpu[0]}) + "\\n")
    _cpu[0] = cpu
    for key in _phases:
        _phases[key] = 0.0
    return digest
buffer_hasher.BufferHasher.finish = _report
"""

MINIMAL_RECEIVER_SCRIPT = """
import socket, sys
listener = socket.create_server(("127.0.0.1", int(sys.argv[1])))
print("ready", flush=True)
buffer = bytearray(1 << 20)
view = memoryview(buffer)
while True:
    conn, _ = listener.accept()
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        head += conn.recv(65536)
    head, _, rest = head.partition(b"\\r\\n\\r\\n")
    fields = dict(line.split(b":", 1) for line in head.split(b"\\r\\n")[1:] if b":" in line)
    fields = {k.strip().lower(): v.strip() for k, v in fields.items()}
    if fields.get(b"expect", b"").lower() == b"100-continue":
        conn.sendall(b"HTTP/1.1 100 Continue\\r\\n\\r\\n")
    length, got = int(fields[b"content-length"]), len(rest)
    with open(sys.argv[2], "wb", buffering=0) as out:
        out.write(rest)
        while got < length:
            count = conn.recv_into(view, min(len(view), length - got))
            if not count:
                break
            out.write(view[:count])
            got += count
    conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok")
    conn.close()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(script: str, *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        raise SystemExit(f"helper process failed to start: {args}")
    return proc


def _write_random(path: Path, size_bytes: int) -> None:
    block = os.urandom(8 * MiB)
    with open(path, "wb") as file:
        left = size_bytes
        while left > 0:
            file.write(block[: min(left, len(block))])
            left -= len(block)
            block = block[1:] + block[:1]  # no two blocks alike (no dedup anywhere)


def _settle(worker_dir: Path) -> None:
    shutil.rmtree(worker_dir / "bench", ignore_errors=True)
    os.sync()


def _process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class CpuMeter:
    """CPU seconds of a server process plus this process (``RUSAGE_SELF``) or its children (curl)."""

    def __init__(self, server_pid: int, who: int) -> None:
        self.server_pid, self.who = server_pid, who

    def now(self) -> float:
        return _process_cpu_s(self.server_pid) + _own_cpu_s(self.who)


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _curl(port: int, path: Path) -> None:
    subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-T", str(path), f"http://127.0.0.1:{port}/upload"], check=True
    )


def _sha256sum(path: Path) -> None:
    subprocess.run(["sha256sum", str(path)], check=True, stdout=subprocess.DEVNULL)


def _openssl(path: Path) -> None:
    subprocess.run(["openssl", "dgst", "-sha256", str(path)], check=True, stdout=subprocess.DEVNULL)


async def _stage(client: httpx.AsyncClient, port: int, path: Path, worker_dir: Path, key: str) -> float:
    shutil.rmtree(worker_dir / "bench", ignore_errors=True)
    start = time.perf_counter()
    remote = await stage_file(client, f"http://127.0.0.1:{port}", key, path, TOKEN)
    elapsed = time.perf_counter() - start
    if os.stat(remote).st_size != path.stat().st_size:
        raise SystemExit("staged file has the wrong size")
    return elapsed


def _spread(values: list[float]) -> str:
    """Median and range of the rounds, and the range as a factor (max / min): how steady it is."""
    return (
        f"median {statistics.median(values):5.2f}s  min {min(values):5.2f}s  max {max(values):5.2f}s  "
        f"spread {max(values) / min(values):4.2f}x"
    )


def _line(label: str, ours: list[float], raw: list[float], size_bytes: int) -> None:
    """Median MB/s and ratio (raw time / our time; higher is better), then each side's rounds spread."""
    ours_s, raw_s = statistics.median(ours), statistics.median(raw)
    ours_mbs, raw_mbs = size_bytes / ours_s / 1e6, size_bytes / raw_s / 1e6
    ratio, best_ratio = raw_s / ours_s, min(raw) / min(ours)
    verdict = "ok" if ratio >= 0.9 else "BELOW TARGET"
    print(
        f"{label:<34} ours {ours_mbs:6.0f} MB/s  raw {raw_mbs:6.0f} MB/s  ratio {ratio:5.2f} "
        f"(best-of-rounds {best_ratio:4.2f})  [{verdict}]"
    )
    print(f"{'':<34} ours: {_spread(ours)}")
    print(f"{'':<34} raw:  {_spread(raw)}")


def _report(args: argparse.Namespace, results: dict[str, list[float]], size_bytes: int) -> None:
    print(
        f"\n{args.size_mib} MiB on loopback, median of {args.rounds} rounds, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    _line("transfer (stage_file vs curl -T)", results["stage"], results["curl"], size_bytes)
    print(
        f"{'transfer CPU seconds':<34} ours (worker + client) median {statistics.median(results['stage_cpu']):5.2f}s"
        f"  raw (receiver + curl) median {statistics.median(results['curl_cpu']):5.2f}s  ratio "
        f"{statistics.median(results['curl_cpu']) / statistics.median(results['stage_cpu']):4.2f}"
    )
    if not args.transfer_only:
        _line("verify hash (ours vs sha256sum)", results["hash"], results["sha256sum"], size_bytes)
        if results["openssl"]:
            _line("verify hash (ours vs openssl dgst)", results["hash"], results["openssl"], size_bytes)
        _line("first staging (hash + transfer)", results["first"], results["raw_first"], size_bytes)
    for key, values in results.items():
        if not values:
            continue
        print(f"  {key:<10} " + " ".join(f"{v:6.2f}s" for v in values))


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--transfer-only", action="store_true", help="only the transfer rows (no hash rounds)"
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="time the worker's receiving thread per upload (recv, write, waiting for the hash)",
    )
    args = parser.parse_args()
    if shutil.which("curl") is None or shutil.which("sha256sum") is None:
        raise SystemExit("benchmark needs curl and sha256sum on PATH")
    size_bytes = args.size_mib * MiB
    root = Path(tempfile.mkdtemp(prefix="corral-bench-staging-", dir="/var/tmp"))
    source = root / "frontend" / "model.bin"
    source.parent.mkdir(parents=True)
    worker_dir = root / "worker" / "models"
    worker_dir.mkdir(parents=True)
    worker_port, raw_port = _free_port(), _free_port()
    print(f"writing a {args.size_mib} MiB test file in {root} ...", flush=True)
    _write_random(source, size_bytes)
    touch_memory(
        root, max(2048, 2 * args.size_mib)
    )  # the rounds write into memory used before (see machine.py)
    phases_out = root / "phases.jsonl"
    hooks = root / "phase_hooks.py"
    hooks.write_text(f"PHASES_OUT = {str(phases_out)!r}\n" + PHASE_HOOKS)
    worker = _start(
        WORKER_SCRIPT, str(worker_port), str(worker_dir), TOKEN, *([str(hooks)] if args.phases else [])
    )
    uploads: list[str] = []  # what each upload the worker timed was, in order
    raw = _start(MINIMAL_RECEIVER_SCRIPT, str(raw_port), str(root / "raw-received.bin"))
    keys = ("stage", "curl", "stage_cpu", "curl_cpu", "hash", "sha256sum", "openssl", "first", "raw_first")
    stage_cpu, curl_cpu = (
        CpuMeter(worker.pid, resource.RUSAGE_SELF),
        CpuMeter(raw.pid, resource.RUSAGE_CHILDREN),
    )
    results: dict[str, list[float]] = {k: [] for k in keys}
    has_openssl = shutil.which("openssl") is not None
    try:
        async with httpx.AsyncClient(timeout=600) as client:
            # Warm the page cache the same way for everyone, and record the source's hash: a transfer round
            # measures the transfer only (before this, round 1 also hashed the 1 GiB source, which made
            # the first round 2-3x slower than the others and the spread look like the transfer's).
            cached_sha256(source)
            for round_index in range(args.rounds):
                # Each transfer starts with no dirty pages left by the previous one (writeback throttling
                # would otherwise penalise whoever runs second), and the order alternates.
                for name in ("curl", "stage") if round_index % 2 == 0 else ("stage", "curl"):
                    _settle(worker_dir)
                    if name == "curl":
                        cpu_before = curl_cpu.now()
                        results["curl"].append(_timed(lambda: _curl(raw_port, source)))
                        results["curl_cpu"].append(curl_cpu.now() - cpu_before)
                    else:
                        cpu_before = stage_cpu.now()
                        results["stage"].append(
                            await _stage(client, worker_port, source, worker_dir, "models/bench/m.bin")
                        )
                        uploads.append("transfer")
                        results["stage_cpu"].append(stage_cpu.now() - cpu_before)
                if args.transfer_only:
                    continue
                results["sha256sum"].append(_timed(lambda: _sha256sum(source)))
                results["hash"].append(_timed(lambda: sha256_file(source)))
                if has_openssl:
                    results["openssl"].append(_timed(lambda: _openssl(source)))
                hash_sidecar_path(source).unlink(missing_ok=True)  # a file never hashed before
                _settle(worker_dir)
                results["first"].append(
                    await _stage(client, worker_port, source, worker_dir, "models/bench/m.bin")
                )
                uploads.append("first")
                results["raw_first"].append(results["curl"][-1] + results["sha256sum"][-1])
        phases = [json.loads(line) for line in phases_out.read_text().splitlines()] if args.phases else []
    finally:
        for proc in (worker, raw):
            proc.terminate()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        shutil.rmtree(root, ignore_errors=True)
    _report(args, results, size_bytes)
    if phases:
        _report_phases(list(zip(uploads, phases, strict=False)))


def _report_phases(timed: list[tuple[str, dict[str, float]]]) -> None:
    """The worker's receiving thread per upload: a thread that waits for free buffers is held by the hash."""
    print(
        "\nworker, per upload (seconds): receiving thread in recv / write / waiting for the hash; process CPU"
    )
    for label, phase in timed:
        print(
            f"  {label:<9} recv {phase['recv_s']:5.2f}  write {phase['write_s']:5.2f}  "
            f"hash wait {phase['hash_wait_s']:5.2f}  cpu {phase['cpu_s']:5.2f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
