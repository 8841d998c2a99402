"""``lakeivm bench record RESULT.json``: keep a fresh result as a record of docs/benchmarks/.

A suite's result file already names its command, date, commit and machine (``lakeivm.bench.save``),
so it is copied as it is, to ``docs/benchmarks/<name>.json`` (``--name``, by default the suite's
name: the suite's latest result replaces the previous one, which git keeps), with its plot
``RESULT.png`` beside it if there is one. ``lakeivm bench render`` then rewrites the page.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from lakeivm.bench.render import RECORDS, check_record


def main(argv: Sequence[str] = (), settings: object = None) -> int:
    """``lakeivm bench record RESULT.json [--name NAME] [--records DIR]``."""
    parser = argparse.ArgumentParser(prog="lakeivm bench record", description=__doc__.splitlines()[0])
    parser.add_argument("result", help="a result file a suite wrote (bench-results/<suite>.json)")
    parser.add_argument("--name", default=None, help="the record's name (default: the suite's); letters, digits, '-' and '_'")
    parser.add_argument("--records", default=str(RECORDS), help="the folder of records (default docs/benchmarks)")
    args = parser.parse_args(list(argv))
    try:
        path = record(Path(args.result), Path(args.records), args.name)
    except ValueError as err:
        print(f"lakeivm bench record: {err}", file=sys.stderr)
        return 1
    print(f"recorded {path}; now run `lakeivm bench render` and commit both")
    return 0


def record(result: Path, folder: Path, name: str | None = None) -> Path:
    """Copy ``result`` (and its PNG) into ``folder`` as ``<name>.json``; returns the record's path.

    Raises ValueError for a file that is not a result with its provenance.
    """
    try:
        data = json.loads(result.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{result}: not a readable JSON result ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{result}: a result is a JSON object")
    problems = check_record(data)
    if problems:
        raise ValueError(f"{result}: {'; '.join(problems)} (was it written by `lakeivm bench SUITE`?)")
    name = name or str(data["suite"])
    if not re.fullmatch(r"[\w-]+", name):
        raise ValueError(f"record name {name!r}: use letters, digits, '-' and '_'")
    folder.mkdir(parents=True, exist_ok=True)
    plot = result.with_suffix(".png")
    if plot.exists():
        shutil.copyfile(plot, folder / f"{name}.png")
        data["png"] = f"{name}.png"
    else:
        data.pop("png", None)
        (folder / f"{name}.png").unlink(missing_ok=True)  # the replaced result's plot
    target = folder / f"{name}.json"
    target.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return target


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
