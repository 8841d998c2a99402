"""Benchmark results as records: what a suite's result file carries, ``record`` and ``render`` (no Spark)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakeivm import bench
from lakeivm.bench.record import record
from lakeivm.bench.render import check_record, render, result_tables


@pytest.fixture()
def invoked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "_invocation", None)
    bench.invoked("fivm", ["--scales", "1", "--views", "revenue"])


def _result(folder: Path, plot: bool = True) -> Path:
    results = {"machine": bench.machine(), "repeats": 2,
               "runs": [{"scale": 1, "approach": "fivm_u", "seconds": [1.12, 1.13], "audit": {"ok": True}},
                        {"scale": 1, "approach": "first_order", "seconds": [1.46, 1.5]}]}
    return bench.save(folder, "fivm", results, (lambda _, path: path.write_bytes(b"png")) if plot else None)


def test_a_result_file_names_its_suite_command_date_commit_and_machine(tmp_path: Path, invoked: None):
    data = json.loads(_result(tmp_path).read_text())
    assert data["suite"] == "fivm" and data["command"] == "lakeivm bench fivm --scales 1 --views revenue"
    assert data["date"].endswith("Z") and data["commit"]  # this checkout is a git repository
    assert {"cores", "memory", "os"} <= set(data["machine"])
    assert check_record(data) == []


def test_record_copies_the_result_and_its_plot_and_replaces_the_previous_one(tmp_path: Path, invoked: None):
    records = tmp_path / "records"
    path = record(_result(tmp_path / "out"), records)
    assert path == records / "fivm.json" and (records / "fivm.png").read_bytes() == b"png"
    assert json.loads(path.read_text())["png"] == "fivm.png"
    record(_result(tmp_path / "again", plot=False), records)  # a result without a plot drops the old one
    assert not (records / "fivm.png").exists() and "png" not in json.loads(path.read_text())
    assert record(_result(tmp_path / "named"), records, "fivm-sf10") == records / "fivm-sf10.json"


@pytest.mark.parametrize("content, problem", [
    ("{not json", "not a readable JSON result"),
    ('{"runs": [{"seconds": 1}]}', "no 'command'"),
    ('{"suite": "x", "command": "c", "date": "d", "commit": "abc", "machine": {"cores": 2}, "n": 1}', "machine has no 'memory'"),
])
def test_record_refuses_what_is_not_a_result(tmp_path: Path, content: str, problem: str):
    path = tmp_path / "result.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=problem):
        record(path, tmp_path / "records")


def test_a_fresh_result_renders_as_tables_of_its_runs_and_settings(tmp_path: Path, invoked: None):
    data = json.loads(_result(tmp_path).read_text())
    settings, runs = result_tables(data)
    assert ["repeats", "2"] in settings["rows"]
    assert runs["columns"] == ["scale", "approach", "seconds", "audit.ok"]
    assert runs["rows"] == [["1", "fivm_u", "1.12 / 1.13", "yes"], ["1", "first_order", "1.46 / 1.5", "—"]]
    page = render({"fivm": data})
    assert "- **Command:** `lakeivm bench fivm --scales 1 --views revenue`" in page
    assert "| scale | approach | seconds | audit.ok |" in page


def test_suites_come_in_page_order_with_their_latest_result_first():
    def rec(suite: str, date: str) -> dict:
        return {"suite": suite, "command": f"lakeivm bench {suite}", "date": date, "commit": "abc1234",
                "machine": {"cores": 2, "memory": "24 GiB", "os": "Linux"},
                "tables": [{"columns": ["n"], "rows": [[date]]}]}

    page = render({"other-x": rec("other", "2026-01-01"), "zeta": rec("zeta", "2026-01-01"), "log": rec("log", "2026-01-01"),
                   "fivm-old": rec("fivm", "2026-01-01"), "fivm-new": rec("fivm", "2026-02-01"), "fivm": rec("fivm", "2025-01-01")})
    headings = [line for line in page.splitlines() if line.startswith("#")]
    assert headings == ["# Benchmarks", "## fivm", "### fivm", "### fivm-new", "### fivm-old", "## log", "### log",
                        "## zeta", "### zeta", "## Other measurements", "### other-x"]
