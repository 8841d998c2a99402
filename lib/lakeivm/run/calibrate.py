"""``lakeivm calibrate VIEW``: seed a view's cost models by timing batches of 2^j changes per table.

Time the real delta-propagation job per source table over a geometric grid of batch sizes
(docs/design/planner.md#its-inputs-from-the-log), fit f(k) = a·k + b (robust, clamped monotone and
subadditive; a line per read path once two batches pass the lake's ``limits.small_delta_rows``: by
default 2^15 and 2^16 changes time Spark's), store it in
``_system/costs``, with the shared seconds of a run (row ``(run)``). The view's own data is never touched: its tables are copied as of the view's
watermarks into a scratch lake, the view is built there, and each batch re-inserts 2^j rows sampled
from the table itself (so they join like real rows) and is applied alone, as a tick would. Then, for
a view over several tables, three runs apply every table's batch at once, as a refresh does: what
they take beyond the tables' lines and the shared seconds is stored as row ``(joint)``, the joint
excess a refresh's prediction charges until the view's own log has such runs (``planning.tick``).
"""
from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence

from lakeivm.store import commit
from lakeivm.errors import StateError
from lakeivm.store.lake import Lake
from lakeivm.planning.costs import Calibration, fit_cost_model
from lakeivm.planning.tick import DEFAULT_PRIOR, JOINT_COST, RUN_COST, run_seconds
from lakeivm.catalog.registry import ViewSpec


def calibrate(lake: Lake, spec: ViewSpec, max_exponent: int | Mapping[str, int] = 10, tables: Sequence[str] | None = None,
              progress: Callable[[str], None] = print) -> dict[str, Calibration]:
    """Time batches of 1, 2, 4, ..., 2^max_exponent changes per table (an int, or one per table);
    store and return {table: Calibration}."""
    from lakeivm.run.engine import prepare, run_view
    from lakeivm.store.lake import open_lake

    last = commit.last_committed(lake, spec.name)
    if last is None:
        raise StateError(f"view {spec.name!r} has never run; run `lakeivm refresh {spec.name}` before calibrating it.")
    ctx, _ = prepare(lake, spec)
    chosen = tuple(tables or ctx.query.tables)
    unknown = sorted(set(chosen) - set(ctx.query.tables))
    if unknown:
        raise StateError(f"tables {unknown} are not sources of view {spec.name!r} (its tables: {list(ctx.query.tables)})")
    scratch_root = tempfile.mkdtemp(prefix=f"lakeivm-calibrate-{spec.name}-")
    try:
        scratch = open_lake(lake.spark, _settings(scratch_root, lake))
        for table in ctx.query.tables:
            scratch.create_table(table, lake.read(lake.table_path(table), last.watermarks[table]))
        run_view(scratch, spec)
        models, runs, fitted, tops = {}, [], {}, {}
        sources = {t: lake.read(lake.table_path(t), last.watermarks[t]) for t in chosen}
        sizes = {t: max(1, frame.count()) for t, frame in sources.items()}

        def insert(table: str, j: int) -> None:  # 2^j rows sampled from the table itself (so they join like real rows)
            fraction = 1.2 * max(1.0, 2 ** j / sizes[table])  # with replacement: enough rows even for small tables
            batch = sources[table].sample(withReplacement=True, fraction=fraction, seed=j).limit(2 ** j)
            batch.write.format("delta").mode("append").save(scratch.table_path(table))

        for table in chosen:
            points = []
            tops[table] = top = max_exponent.get(table, 10) if isinstance(max_exponent, Mapping) else max_exponent
            for j in range(top + 1):
                insert(table, j)
                row = run_view(scratch, spec, mode="tick", tables=(table,))
                if row is not None and table in row.table_seconds:
                    points.append((row.delta_rows[table], row.table_seconds[table]))
                    runs.append(row)
                    progress(f"calibrate {spec.name}: {table} {row.delta_rows[table]:>6} changes {row.table_seconds[table]:.3f}s")
            fitted[table] = fit_cost_model(points, DEFAULT_PRIOR, min_observations=2, threshold=lake.limits.small_delta_rows)
            models[table] = Calibration.of(fitted[table])
            progress(f"calibrate {spec.name}: {table}: {describe(models[table])}")
        if runs:  # what every applying run pays once besides its tables (see planning.tick)
            models[RUN_COST] = Calibration(0.0, run_seconds(runs), len(runs))
            progress(f"calibrate {spec.name}: a run's shared seconds (writing state and result): {models[RUN_COST].b:.3f} s")
        if runs and len(fitted) > 1:  # a refresh applies every table at once: what that costs beyond the tables alone
            excess = []
            for step in JOINT_STEPS:
                for table in fitted:
                    insert(table, max(0, tops[table] - step))
                row = run_view(scratch, spec, mode="tick", tables=tuple(fitted))
                if row is not None:
                    excess.append(row.seconds - models[RUN_COST].b - sum(fitted[t](row.delta_rows.get(t, 0)) for t in fitted))
                    progress(f"calibrate {spec.name}: every table at once {dict(row.delta_rows)}: {row.seconds:.3f}s, "
                             f"{excess[-1]:+.3f}s beyond the tables alone")
            if excess:
                models[JOINT_COST] = Calibration(0.0, max(0.0, float(statistics.median(excess))), len(excess))
        commit.record_costs(lake, spec.name, models)
        return models
    finally:
        shutil.rmtree(scratch_root, ignore_errors=True)


JOINT_STEPS = (2, 1, 0)  # the joint runs: every table's 2^(top - step) changes at once


def describe(model: Calibration) -> str:
    """``f(k) = ... ms·k + ... s (n batches)``, per read path when both were measured."""
    line = f"f(k) = {model.a * 1000:.4f} ms·k + {model.b:.3f} s ({model.samples} batches)"
    if model.above is None:
        return line
    return (f"{line} up to {model.above} changes; above: {model.a_large * 1000:.4f} ms·k + {model.b_large:.3f} s "
            f"({model.samples_large} batches; Spark reads them)")


def _settings(root: str, lake: Lake):
    """The scratch lake's settings: the calibrated lake's limits, so it times the same read paths."""
    from lakeivm.config import load_settings

    return load_settings().with_(lake=root, limits=lake.limits)
