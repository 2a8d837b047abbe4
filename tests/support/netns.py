"""Hosts in Linux network namespaces on one bridge, for multi-host tests on one machine.

`Network` creates a switch namespace holding a bridge, one namespace per host with its own address
on that bridge (veth pair, `eth0` in the host), and a leg from the root namespace (the test process)
at `.1`. Nothing is reached over loopback: every service listens on its host's bridge address.
Names carry a per-run id; `close()` kills what runs in the run's namespaces and deletes them (also
after a failure), which takes the veth pairs and the bridge with them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.cluster import Proc


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def unavailable_reason() -> str | None:
    """Why namespaces cannot be created here (None: they can); tries `ip netns add` once."""
    if os.geteuid() != 0:
        return f"network namespaces need root (id -u is {os.geteuid()})"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed: run scripts/install-system-deps.sh"
    probe = f"cfprobe{secrets.token_hex(3)}"
    added = _ip("netns", "add", probe, check=False)
    if added.returncode != 0:
        return f"`ip netns add` failed: {added.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _free_subnet() -> str:
    """`10.77.N` for an N no route of this machine uses (concurrent runs pick different ones)."""
    routes = _ip("-4", "route", "show").stdout
    for _ in range(100):
        prefix = f"10.77.{secrets.randbelow(250) + 1}"
        if f"{prefix}." not in routes:
            return prefix
    raise RuntimeError("no free 10.77.N.0/24 subnet")


@dataclass
class Host:
    role: str
    ns: str
    ip: str
    port: str  # its veth end on the bridge (in the switch namespace)


@dataclass
class Network:
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    prefix: str = ""
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"cf{self.run_id}sw"

    @property
    def subnet(self) -> str:
        return f"{self.prefix}.0/24"

    @property
    def root_leg(self) -> str:
        return f"cf{self.run_id}r"

    def create(self) -> Network:
        self.prefix = _free_subnet()
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        _ip("link", "add", self.root_leg, "type", "veth", "peer", "name", "up0", "netns", self.switch)
        _ip("-n", self.switch, "link", "set", "up0", "master", "br0", "up")
        _ip("addr", "add", f"{self.prefix}.1/24", "dev", self.root_leg)
        _ip("link", "set", self.root_leg, "up")
        return self

    def add_host(self, role: str, octet: int) -> Host:
        ns, port = f"cf{self.run_id}{role}", f"h{octet}"
        _ip("netns", "add", ns)
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{self.prefix}.{octet}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")  # a host's own loopback (a worker dials its backends on it)
        host = Host(role, ns, f"{self.prefix}.{octet}", port)
        self.hosts[role] = host
        return host

    def cut(self, role: str) -> None:
        """Unplug a host: delete its veth pair (both ends go); its processes keep running, unreachable."""
        _ip("-n", self.switch, "link", "del", self.hosts[role].port)

    def spawn(
        self,
        role: str,
        name: str,
        argv: list[str],
        log_dir: Path,
        env: dict[str, str] | None = None,
        python: bool = True,
    ) -> Proc:
        """Start `python -m corral …` (or any argv) inside a host's namespace; `ip netns exec` execs, so
        the Popen pid is the process itself."""
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        command = [sys.executable, "-m", "corral", *argv] if python else argv
        with open(log_path, "wb") as handle:
            popen = subprocess.Popen(
                ["ip", "netns", "exec", self.hosts[role].ns, *command],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def run(self, role: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.hosts[role].ns, *argv], capture_output=True, text=True, timeout=60
        )

    def close(self) -> None:
        """Stop everything started in this run's namespaces, then delete them (idempotent)."""
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.stop(timeout_s=10)
        namespaces = [h.ns for h in self.hosts.values()] + [self.switch]
        for ns in namespaces:
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
            _ip("netns", "pids", ns, check=False).stdout.strip() for ns in namespaces
        ):
            time.sleep(0.1)
        for ns in namespaces:
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.root_leg, check=False)


def start_postgres(net: Network, role: str, data_dir: Path, port: int = 5432) -> str:
    """PostgreSQL listening only on the host's bridge address; trusts the run's subnet. Returns its base URL."""
    from corral.up.embedded import embedded_postgres

    pg = embedded_postgres(data_dir, port=port)  # finds the binaries and the OS user to run as
    host = net.hosts[role]
    data_dir.mkdir(parents=True, exist_ok=True)
    if pg.run_as:
        import pwd

        user = pwd.getpwnam(pg.run_as)
        os.chown(data_dir, user.pw_uid, user.pw_gid)
    os.chmod(data_dir, 0o700)
    initdb = subprocess.run(
        pg._cmd(
            str(pg.bin_dir / "initdb"),
            "-D",
            str(data_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ),
        capture_output=True,
        text=True,
    )
    if initdb.returncode != 0:
        raise RuntimeError(f"initdb failed: {initdb.stderr[-800:]}")
    with open(data_dir / "pg_hba.conf", "a") as hba:
        hba.write(f"host all all {net.subnet} trust\n")
    started = net.run(
        role,
        *pg._cmd(
            str(pg.bin_dir / "pg_ctl"),
            "-D",
            str(data_dir),
            "-w",
            "-t",
            "60",
            "-l",
            str(data_dir / "server.log"),
            "-o",
            f"-h {host.ip} -p {port} -k {data_dir} -c fsync=off",
            "start",
        ),
    )
    if started.returncode != 0:
        log = (
            (data_dir / "server.log").read_text(errors="replace")[-1500:]
            if (data_dir / "server.log").exists()
            else ""
        )
        raise RuntimeError(f"PostgreSQL in {host.ns} failed to start: {started.stderr} {log}")
    return f"postgresql://postgres@{host.ip}:{port}"
