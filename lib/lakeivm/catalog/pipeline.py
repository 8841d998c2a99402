"""Spark Declarative Pipelines: a pipeline's materialized views, maintained as lakeivm views.

``spark-pipelines run`` refreshes every materialized view by recomputing it; pointed at the same
pipeline (``--views path/to/spark-pipeline.yml``, or the folder holding it), lakeivm maintains those
definitions incrementally. The spec is read and validated by pyspark's own loader
(``pyspark.pipelines.cli.load_pipeline_spec``) and its SQL definition files registered by pyspark's
own ``register_definitions``, into a registry that keeps their text. Each ``CREATE MATERIALIZED VIEW``
becomes a view (``lakeivm.sql.ddl``); every other name it reads -- a streaming table, a source -- is
a lake table (``<lake>/tables/<name>``).

Not taken, and said so (``Pipeline.not_taken``): Python definition files (their views are DataFrames
built in code, not SQL), streaming tables, flows, temporary views and other statements, and the
spec's ``storage``, ``catalog`` and ``database``. lakeivm's fields -- above all the deadline, which a
pipeline does not have -- come from each statement (``TBLPROPERTIES ('lakeivm.deadline' = '5m')`` or
a ``-- lakeivm: deadline=5m`` line) or, for every view, from the spec's ``configuration``
(``lakeivm.deadline: 5m``).
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from pathlib import Path

from lakeivm.errors import SpecError

FILE_NAMES = ("spark-pipeline.yml", "spark-pipeline.yaml")  # pyspark.pipelines.cli.PIPELINE_SPEC_FILE_NAMES
PREFIX = "lakeivm."


@dataclass
class Pipeline:
    """A pipeline spec's SQL definition files (``{file: text}``), the lakeivm fields its configuration
    gives every view (``defaults``), and what of it lakeivm does not take (``not_taken``)."""

    spec_path: Path
    name: str
    sql_files: dict[Path, str] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=dict)
    not_taken: list[str] = field(default_factory=list)


def spec_file(path: str | Path) -> Path | None:
    """The pipeline spec ``path`` names: the file itself, or the one in the folder ``path``; else None."""
    path = Path(path)
    if path.is_file() and path.name in FILE_NAMES:
        return path
    found = [path / name for name in FILE_NAMES if (path / name).is_file()] if path.is_dir() else []
    if len(found) > 1:
        raise SpecError(f"{path}: both spark-pipeline.yml and spark-pipeline.yaml: keep one")
    return found[0] if found else None


def read_pipeline(path: str | Path) -> Pipeline:
    """The pipeline at ``path`` (its spec file), its definition files found as ``spark-pipelines`` finds them."""
    from pyspark.errors import PySparkException
    from pyspark.pipelines.cli import LibrariesGlob, PipelineSpec, load_pipeline_spec, register_definitions

    path = Path(path).resolve()
    try:
        spec = load_pipeline_spec(path)
    except (PySparkException, OSError, ValueError, KeyError, TypeError) as err:
        raise SpecError(f"{path}: not a pipeline spec spark-pipelines reads: {err}") from err
    pipeline = Pipeline(path, spec.name, defaults={key[len(PREFIX):]: value for key, value in spec.configuration.items()
                                                     if key.startswith(PREFIX)})
    root = path.parent
    files = sorted({file for library in spec.libraries for file in root.glob(library.include)
                    if file.is_file() and "__pycache__" not in file.parts})
    for file in files:
        if file.suffix != ".sql":
            pipeline.not_taken.append(f"{file.relative_to(root)}: a {file.suffix or 'extensionless'} definition file (lakeivm "
                                      "maintains views declared in SQL; declare this one with CREATE MATERIALIZED VIEW)")
    sql_only = PipelineSpec(spec.name, spec.storage, spec.catalog, spec.database, spec.configuration,
                            [LibrariesGlob(str(file.relative_to(root))) for file in files if file.suffix == ".sql"])
    collected = _sql_registry()
    with contextlib.redirect_stdout(io.StringIO()):  # its "Loading definitions..." lines are not ours to print
        register_definitions(path, collected, sql_only, None, "lakeivm")  # SQL files only: no Spark session needed
    pipeline.sql_files = {root / relative: text for relative, text in collected.sql.items()}
    for key in ("catalog", "database"):
        if getattr(spec, key):
            pipeline.not_taken.append(f"{key}: {getattr(spec, key)} (lakeivm reads tables from the lake's tables/ folder)")
    return pipeline


def _sql_registry():
    """A pyspark GraphElementRegistry that keeps the SQL text of each file registered with it (made
    here, on first use: pyspark.pipelines is imported only when a pipeline is read)."""
    from pyspark.pipelines.graph_element_registry import GraphElementRegistry

    class SqlRegistry(GraphElementRegistry):
        def __init__(self) -> None:
            self.sql: dict[Path, str] = {}

        def register_sql(self, sql_text: str, file_path: Path) -> None:
            self.sql[Path(file_path)] = sql_text

        def register_output(self, output) -> None:  # only Python definitions register outputs: none is imported
            raise SpecError(f"a Python definition ({output.name}) reached lakeivm's SQL registry")

        register_flow = register_auto_cdc_flow = register_output

    return SqlRegistry()
