"""``lakeivm`` commands as real processes that skip the console script's ~3 s of imports.

They are forked from multiprocessing's forkserver, a clean interpreter that imported lakeivm and
the Spark Connect client once. Each child runs ``lakeivm.cli.main`` in its own session (process
group) with its own environment, writes its output to files, and can be SIGKILLed by its group like
``subprocess.Popen([... "lakeivm", ...], start_new_session=True)``. The fault suite starts ~150 of
them; the import cost was most of a kill's.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PRELOAD = ["lakeivm.cli", "lakeivm.run.engine", "lakeivm.catalog.registry", "lakeivm.spark", "pyspark.sql.connect.session",
           "lakeivm.views.first_order.maintainer", "lakeivm.views.fivm.maintainer", "lakeivm.views.triangle.maintainer",
           "lakeivm.views.nested.maintainer", "lakeivm.views.join_sample.maintainer", "lakeivm.views.full.maintainer"]
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _run(args: list[str], env: dict[str, str], out: str, err: str) -> None:
    os.setsid()  # first: the parent kills this process group
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.stdout.reconfigure(line_buffering=True)
    from lakeivm.cli import run

    run(args)


class Forked:
    """One ``lakeivm`` command; the parts of ``subprocess.Popen`` the fault suite uses."""

    def __init__(self, env: dict[str, str], folder: Path, *args: str):
        stem = folder / f"run-{time.monotonic_ns()}"
        self._out, self._err = f"{stem}.out", f"{stem}.err"
        self._process = _context.Process(target=_run, args=(list(args), env, self._out, self._err), daemon=False)
        self._process.start()
        self.pid = self._process.pid
        self._read = 0

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def readline(self, timeout: float = 300) -> str:
        """The first line of the output not read yet, once written (or what is there when it ends)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self._text(self._out)[self._read:]
            if "\n" in text or not self._process.is_alive() or time.monotonic() > deadline:
                line = text.split("\n", 1)[0] + ("\n" if "\n" in text else "")
                self._read += len(line)
                return line
            time.sleep(0.02)

    def communicate(self, timeout: float) -> tuple[str, str]:
        """(stdout, stderr) once it ended; ``subprocess.TimeoutExpired`` if it runs past ``timeout``."""
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"lakeivm (pid {self.pid})", timeout)
        return self._text(self._out), self._text(self._err)

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # not in its own group yet (setsid is its first step), or already ended
            with contextlib.suppress(ProcessLookupError):  # it ended on its own between the timeout and the kill
                os.kill(self.pid, signal.SIGKILL)
        self._process.join()

    @staticmethod
    def _text(path: str) -> str:
        try:
            return Path(path).read_text()
        except FileNotFoundError:
            return ""
