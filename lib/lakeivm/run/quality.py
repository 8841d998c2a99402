"""Great Expectations suites generated from a view's spec, run on the stored view.

The suite of a grouped view: every GROUP BY key not null (unless listed in ``nullable_keys``),
the keys unique together, each group's row count (``_lakeivm_count``) positive, every COUNT
output non-negative. A failed expectation fails the DAG's validate task, naming it
(``docs/design/run.md#7-publish``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakeivm.errors import LakeIVMError
from lakeivm.limits import Limits
from lakeivm.catalog.registry import ViewSpec
from lakeivm.sql import COUNT, Query

if TYPE_CHECKING:
    import pandas
    from pyspark.sql import DataFrame

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


class ExpectationFailed(LakeIVMError):
    """The stored view violates its expectation suite."""


@dataclass(frozen=True)
class Validation:
    """The outcome of one suite run: how many expectations ran, and the failed ones, described."""

    view: str
    evaluated: int
    failures: tuple[str, ...]

    @property
    def success(self) -> bool:
        return not self.failures

    def raise_if_failed(self) -> None:
        if self.failures:
            raise ExpectationFailed(f"view {self.view!r} failed {len(self.failures)} of {self.evaluated} expectations: "
                                    + "; ".join(self.failures))


def build_suite(spec: ViewSpec, query: Query):
    """The expectation suite ``lakeivm__<view>`` for the stored result of ``spec``."""
    gx = import_gx()
    import great_expectations.expectations as gxe

    gx.get_context(mode="ephemeral")  # suites need an active context
    suite = gx.ExpectationSuite(name=f"lakeivm__{spec.name}")
    keys = [k.name for k in query.group_keys]
    # A DISTINCT or projected column may hold NULL; so may a split-off derived table's key (SQL groups NULLs).
    required = () if query.implicit_keys or spec.derived_from else keys
    for key in required:
        if key not in spec.nullable_keys:
            suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=key))
    if len(keys) == 1:
        suite.add_expectation(gxe.ExpectColumnValuesToBeUnique(column=keys[0]))
    elif keys:
        suite.add_expectation(gxe.ExpectCompoundColumnsToBeUnique(column_list=keys))
    if keys and query.aggregates:
        suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column=COUNT, min_value=1))
    for output in query.outputs:
        if output.finalize_sql == COUNT or output.finalize_sql.startswith("_lakeivm_n"):
            suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column=output.name, min_value=0))
    return suite




def validate(df: DataFrame | pandas.DataFrame, spec: ViewSpec, query: Query, rows: int | None = None,
             pandas_rows: int = Limits.pandas_rows) -> Validation:
    """Run the view's suite on its stored rows (hidden state columns included): with GX's pandas
    engine on a pandas frame (rows read in this process), or on the collected rows when ``rows``
    (e.g. from the table's statistics) is at most ``pandas_rows`` (the lake's ``limits``); else with
    its Spark engine."""
    gx = import_gx()
    import pandas as pd
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    if isinstance(df, pd.DataFrame):
        source = context.data_sources.add_pandas(name=f"lakeivm_{spec.name}")
    elif rows is not None and rows <= pandas_rows:
        source, df = context.data_sources.add_pandas(name=f"lakeivm_{spec.name}"), df.toPandas()
    else:
        source = context.data_sources.add_spark(name=f"lakeivm_{spec.name}")
    batch_definition = source.add_dataframe_asset(name="result").add_batch_definition_whole_dataframe("all rows")
    batch = batch_definition.get_batch(batch_parameters={"dataframe": df})
    result = batch.validate(build_suite(spec, query), result_format="SUMMARY")
    failures = tuple(_describe(r) for r in result.results if not r.success)
    return Validation(spec.name, len(result.results), failures)


def import_gx():
    """GX, imported without its INFO logging: the import alone logs ~250 lines ("Skipping registering
    function ...") into every Airflow task log, and one module sets its own logger to INFO."""
    import logging

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    import great_expectations as gx
    import great_expectations.data_context.types.base  # noqa: F401  (sets its logger to INFO when imported)

    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.ERROR)
    return gx


def _describe(result) -> str:
    config = result.expectation_config
    kwargs = {k: v for k, v in config.kwargs.items() if k in ("column", "column_list", "min_value")}
    observed = result.result.get("unexpected_count", result.result.get("observed_value"))
    examples = result.result.get("partial_unexpected_list") or []
    return f"{config.type}({', '.join(f'{k}={v}' for k, v in kwargs.items())}): {observed} unexpected, e.g. {examples[:3]}"
