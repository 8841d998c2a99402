"""Benchmark suites (``lakeivm bench SUITE``): each module has ``main(argv, settings) -> int``.

Shared here: where a result came from (``provenance``: the command line, the UTC date, the commit
and the machine, which every result file carries so that it can be recorded as it is, see
``lakeivm.bench.record``), and writing a suite's results as ``<out>/<name>.json`` plus its plot
``<out>/<name>.png``.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

_invocation: tuple[str, str] | None = None  # (suite, command line) of the suite ``lakeivm bench`` is running


def invoked(suite: str, options: Sequence[str]) -> None:
    """Note the suite the CLI is about to run and its options: ``save`` records them as the command."""
    global _invocation
    _invocation = (suite, shlex.join(["lakeivm", "bench", suite, *options]))


def machine() -> dict:
    """Where a benchmark ran: cores, memory, operating system, platform and Python."""
    return {"cores": os.cpu_count(), "memory": _memory(), "os": f"{platform.system()} {platform.release()}".strip(),
            "platform": platform.platform(), "python": platform.python_version()}


def provenance() -> dict:
    """The command line, the UTC date and time, the commit (None outside a git checkout) and the machine."""
    command = _invocation[1] if _invocation else shlex.join(["lakeivm", *sys.argv[1:]])
    return {"command": command, "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **_commit(), "machine": machine()}


def save(out: str | Path, name: str, results: dict, plot: Callable[[dict, Path], None] | None = None) -> Path:
    """Write ``results`` to ``<out>/<name>.json`` and, with ``plot``, ``<out>/<name>.png``; returns the JSON path.

    The file starts with the suite's name and ``provenance()``, so ``lakeivm bench record`` can take
    it as it is.
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    suite = _invocation[0] if _invocation else name.replace("_", "-")
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"suite": suite, **provenance(), **results}, indent=2, default=str))
    if plot is not None:
        plot(results, folder / f"{name}.png")
    return path


def use_agg() -> None:
    """Select matplotlib's file-only backend (benchmarks run headless)."""
    import matplotlib

    matplotlib.use("Agg")


def _memory() -> str | None:
    """The machine's physical memory, e.g. ``"24 GiB"`` (None where the OS does not say)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    return f"{total / 2**30:.0f} GiB"


def _commit() -> dict:
    """``commit``: the short hash of the checkout lakeivm runs from, and ``dirty`` when it has
    uncommitted changes (a result measured on them names a commit that did not run)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if commit is None:
        return {"commit": None}
    return {"commit": commit, **({"dirty": True} if git("status", "--porcelain", "--untracked-files=no") else {})}
