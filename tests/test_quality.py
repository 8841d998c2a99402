"""Expectation suites generated from the spec, validated on stored views with Great Expectations."""
from __future__ import annotations

import pytest

from lakeivm.run.quality import ExpectationFailed, build_suite, validate
from lakeivm.catalog.registry import spec_from_dict
from lakeivm.sql import parse_query

SPEC = spec_from_dict({"refresh_policy": "incremental", "name": "by_g", "deadline": 60,
                       "sql": "SELECT g, SUM(x) AS sx, COUNT(*) AS c FROM r JOIN s ON r.a = s.a GROUP BY g"})
QUERY = parse_query(SPEC.sql, {"r": {"a": "int", "x": "int"}, "s": {"a": "int", "g": "int"}})
LAYOUT = "g int, sx bigint, c bigint, _lakeivm_count bigint, _lakeivm_s0 bigint, _lakeivm_n0 bigint"


def test_suite_is_generated_from_the_spec():
    names = [(e.expectation_type, getattr(e, "column", None)) for e in build_suite(SPEC, QUERY).expectations]
    assert names == [("expect_column_values_to_not_be_null", "g"), ("expect_column_values_to_be_unique", "g"),
                     ("expect_column_values_to_be_between", "_lakeivm_count"), ("expect_column_values_to_be_between", "c")]


@pytest.mark.parametrize("engine", ["spark", "pandas", "local"])
def test_good_rows_pass_and_bad_rows_are_named(spark, engine):
    """``spark``: GX's Spark engine; ``pandas``: the rows collected from Spark (few, by ``rows``);
    ``local``: rows read in this process, handed over as a pandas frame."""
    rows = {"spark": None, "pandas": 2, "local": None}[engine]

    def frame(data, layout):
        df = spark.createDataFrame(data, layout)
        return df.toPandas() if engine == "local" else df

    good = frame([(0, 3, 2, 2, 3, 2), (1, 5, 1, 1, 5, 1)], LAYOUT)
    report = validate(good, SPEC, QUERY, rows)
    assert report.success and report.evaluated == 4
    duplicated = frame([(0, 3, 2, 2, 3, 2), (0, 5, 1, 1, 5, 1)], LAYOUT)
    with pytest.raises(ExpectationFailed, match=r"expect_column_values_to_be_unique\(column=g\): 2 unexpected"):
        validate(duplicated, SPEC, QUERY, rows).raise_if_failed()
    null_key = frame([(None, 3, 2, 2, 3, 2)], LAYOUT)
    with pytest.raises(ExpectationFailed, match=r"expect_column_values_to_not_be_null\(column=g\)"):
        validate(null_key, SPEC, QUERY, rows).raise_if_failed()
    nullable = spec_from_dict({"refresh_policy": "incremental", "name": "by_g", "deadline": 60, "sql": SPEC.sql, "nullable_keys": ["g"]})
    assert validate(null_key, nullable, QUERY, rows).success
    empty_group = frame([(0, 0, 0, 0, 0, 0)], LAYOUT)
    with pytest.raises(ExpectationFailed, match=r"column=_lakeivm_count, min_value=1"):
        validate(empty_group, SPEC, QUERY, rows).raise_if_failed()
