"""Child processes of a deployment: each the leader of its own process group, logging to a file,
stopped by its pid and group (and any descendant that left the group), killed if it lingers."""
from __future__ import annotations

import contextlib
import glob
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lakeivm.errors import LakeIVMError


@dataclass
class Service:
    """One process of the stack (the leader of its own process group) and its log file."""

    name: str
    process: subprocess.Popen
    log: Path
    stop_signal: int = signal.SIGTERM
    started: float = field(default_factory=time.perf_counter)

    def stop(self, timeout: float = 30.0) -> None:
        """Signal the process group (and any descendant that left it), then kill what is left."""
        pids = {self.process.pid, *descendants(self.process.pid)}
        signal_all(self.process.pid, pids, self.stop_signal)
        deadline = time.time() + timeout
        while time.time() < deadline and any(alive(pid) for pid in pids):
            self.process.poll()
            time.sleep(0.2)
        left = {pid for pid in pids if alive(pid)}
        if left:
            signal_all(self.process.pid, left, signal.SIGKILL)
        self.process.wait(timeout=10)


def spawn(name: str, command: list[str], log: Path, env: dict[str, str], stop_signal: int = signal.SIGTERM,
          **as_user: int) -> Service:
    """Start ``command`` in a session of its own, output to ``log``; ``as_user``: Popen's user/group."""
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                   start_new_session=True, cwd=log.parent, **as_user)
    return Service(name, process, log, stop_signal)


def run(command: list[str], log: Path, env: dict[str, str] | None = None, **as_user: int) -> None:
    """Run ``command`` to its end, output to ``log``; a failure raises with the log's tail."""
    with log.open("ab") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=log.parent, **as_user)
    if result.returncode:
        raise LakeIVMError(f"`{' '.join(command[:3])} ...` failed ({result.returncode}); its log ({log}) ends:\n{tail(log)}")


def wait_for(check: Callable[[], bool], what: str, service: Service, timeout: float = 240.0) -> None:
    """Poll ``check`` (a health check) until it is true; raise if ``service`` exits or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if service.process.poll() is not None:
            raise LakeIVMError(f"{service.name} exited ({service.process.returncode}) while starting; "
                               f"its log ({service.log}) ends:\n{tail(service.log)}")
        with contextlib.suppress(OSError, ValueError):
            if check():
                return
        time.sleep(0.5)
    raise LakeIVMError(f"{what} was not healthy within {timeout:.0f} s; see {service.log}:\n{tail(service.log)}")


def tail(log: Path, lines: int = 25) -> str:
    """The last lines of a log file, for an error message."""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc), so a child that started its own session is stopped too."""
    children: dict[int, list[int]] = {}
    for stat_file in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(stat_file).read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(Path(stat_file).parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def signal_all(group: int, pids: set[int], sig: int) -> None:
    """Send ``sig`` to the process group ``group`` and to each of ``pids`` (gone ones are skipped)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except (OSError, IndexError):
        return False


def listening(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at ``host``:``port`` within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
