"""Airflow's constraints file without the packages lakeivm pins itself (both images install with it).

    python airflow_constraints.py CONSTRAINTS_URL_OR_FILE PYPROJECT > constraints.txt

Airflow documents its constraints file as the way to install Airflow reproducibly. lakeivm pins
exact versions in pyproject.toml (numpy, pandas, pyarrow, deltalake, duckdb, asyncpg, jsonschema,
pyyaml, the Spark provider, ...), and Airflow's constraints pin many of the same packages to other
versions (constraints-3.0's file has numpy==1.26.4, pandas==2.1.4, pyarrow==16.1.0): pip cannot honour
both and stops (ResolutionImpossible). Airflow's maintainers' answer is to change the constraints
file; this drops exactly the packages lakeivm pins, so lakeivm's pins win for those and everything
else -- Airflow's own dependencies and the transitive ones -- stays at the versions Airflow was
released with. The dropped lines go to stderr (the build log), the rest to stdout.
"""
from __future__ import annotations

import re
import sys
import tomllib
import urllib.request
from pathlib import Path

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalize(name: str) -> str:
    """PEP 503's normal form: ``PyYAML`` and ``pyyaml``, ``foo_bar`` and ``foo-bar`` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(pyproject: str) -> set[str]:
    """The normalized names of lakeivm's runtime dependencies and those of its extras (but lakeivm itself:
    an extra naming others, ``lakeivm[airflow,bench]``)."""
    project = tomllib.loads(pyproject)["project"]
    deps = [*project["dependencies"], *(dep for extra in project.get("optional-dependencies", {}).values() for dep in extra)]
    return {normalize(_NAME.match(dep).group(1)) for dep in deps} - {normalize(project["name"])}


def without(constraints: str, names: set[str]) -> tuple[str, list[str]]:
    """``constraints`` with the lines naming one of ``names`` removed, and the removed lines."""
    kept, dropped = [], []
    for line in constraints.splitlines():
        match = _NAME.match(line)
        if match and not line.lstrip().startswith("#") and normalize(match.group(1)) in names:
            dropped.append(line.strip())
        else:
            kept.append(line)
    return "\n".join(kept) + "\n", dropped


def read(source: str) -> str:
    if source.startswith(("https://", "http://")):
        with urllib.request.urlopen(source, timeout=60) as response:
            return response.read().decode()
    return Path(source).read_text()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    text, dropped = without(read(argv[0]), pinned(Path(argv[1]).read_text()))
    if not any(_NAME.match(line) and not line.lstrip().startswith("#") for line in text.splitlines()):
        print(f"{argv[0]}: no constraints left -- not an Airflow constraints file?", file=sys.stderr)
        return 1
    print(f"airflow_constraints: lakeivm's own pins replace {len(dropped)} constraint(s): {' '.join(dropped)}",
          file=sys.stderr)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
