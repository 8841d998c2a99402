"""Benchmark suites (``lakeivm bench SUITE``): each module has ``main(argv, settings) -> int``.

Shared here: the machine description every result file carries, and writing a suite's results as
``<out>/<name>.json`` plus its plot ``<out>/<name>.png``.
"""
from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from pathlib import Path


def machine() -> dict:
    """Where a benchmark ran: platform, Python and CPU count."""
    return {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()}


def save(out: str | Path, name: str, results: dict, plot: Callable[[dict, Path], None] | None = None) -> Path:
    """Write ``results`` to ``<out>/<name>.json`` and, with ``plot``, ``<out>/<name>.png``; returns the JSON path."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    if plot is not None:
        plot(results, folder / f"{name}.png")
    return path


def use_agg() -> None:
    """Select matplotlib's file-only backend (benchmarks run headless)."""
    import matplotlib

    matplotlib.use("Agg")
