"""View specs: YAML + JSON-schema validation with file and field in every error; classification."""
from __future__ import annotations

import json
import re

import pytest

from lakeivm.errors import SpecError, UnknownView, UnsupportedQuery
from lakeivm.config import SCHEMAS
from lakeivm.catalog.registry import (NAME_PATTERN, SCHEMA_PATH, ViewSpec, classify, find_spec, load_spec, load_specs,
                              parse_duration, spec_from_dict)

GOOD = "name: v1\nsql: SELECT g, COUNT(*) AS c FROM s GROUP BY g\ndeadline: 30s\ntick: 1m\n"


def write(tmp_path, text, name="v.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_spec(tmp_path):
    spec = load_spec(write(tmp_path, GOOD))
    assert (spec.name, spec.deadline_s, spec.tick_s, spec.on_unreadable_changes) == ("v1", 30.0, 60.0, "rebuild")


def test_malformed_yaml_names_the_file(tmp_path):
    path = write(tmp_path, "name: [unclosed\nsql: x")
    with pytest.raises(SpecError, match=f"{re.escape(str(path))}: line 1: malformed YAML"):
        load_spec(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: v1\nsql: SELECT 1\n", r"\(top level\): 'deadline' is a required property"),
        (GOOD.replace("30s", "thirty"), "line 3: deadline: 'thirty' is not valid"),
        (GOOD.replace("v1", "Bad-Name"), "name: 'Bad-Name' does not match"),
        (GOOD + "kind: magic\n", "kind: 'magic' is not one of"),
        (GOOD + "colour: blue\n", "Additional properties are not allowed \\('colour' was unexpected\\)"),
        (GOOD + "epsilon: 2\n", "epsilon: 2 is greater than the maximum of 1"),
        ("- a\n- b\n", "a view spec must be a mapping"),
    ],
)
def test_schema_violations_name_file_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SpecError, match=message) as err:
        load_spec(path)
    assert str(path) in str(err.value)


def test_duplicate_names_and_unknown_view(tmp_path):
    write(tmp_path, GOOD, "a.yaml")
    specs = load_specs(tmp_path)
    with pytest.raises(UnknownView, match="unknown view 'nope'; registered views: v1$"):
        find_spec(specs, "nope")
    write(tmp_path, GOOD, "b.yaml")
    write(tmp_path, GOOD.replace("v1", "v2"), "c.yaml")
    specs = load_specs(tmp_path)  # neither file of v1 is the view: both are reported, v2 still loads
    assert list(specs) == ["v2"] and [b.path for b in specs.broken] == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    assert specs.broken[0].summary == f"{tmp_path / 'a.yaml'}: line 1: name: view 'v1' is also declared in " \
                                      f"{tmp_path / 'b.yaml'}; give each view its own name"
    with pytest.raises(SpecError, match="view 'v1' cannot run: its spec does not load"):
        find_spec(specs, "v1")


BROKEN = "name: broken\nsql: [\ndeadline: 1m\n"  # the issue's `sql: [`: an unclosed flow sequence


def test_one_malformed_spec_does_not_stop_the_others(tmp_path):
    write(tmp_path, GOOD, "good.yaml")
    broken = write(tmp_path, BROKEN, "broken.yaml")
    wrong = write(tmp_path, GOOD.replace("v1", "v3").replace("30s", "soon"), "wrong.yml")
    specs = load_specs(tmp_path)
    assert list(specs) == ["v1"] and find_spec(specs, "v1").name == "v1"
    assert [b.path for b in specs.broken] == [str(broken), str(wrong)]
    first, second = (b.summary for b in specs.broken)
    assert first.startswith(f"{broken}: line 2: malformed YAML: while parsing a flow sequence") and "\n" not in first
    assert "(noticed at line 4)" in first and "write SQL as a block (`sql: |`" in first
    assert second.startswith(f"{wrong}: line 3: deadline: 'soon' is not valid") and "\n" not in second
    with pytest.raises(SpecError) as err:
        find_spec(specs, "broken")  # by its name: line, or by its file name
    assert f"{broken}: line 2: malformed YAML" in str(err.value) and f"Fix {broken}" in str(err.value)
    with pytest.raises(SpecError, match=f"view 'v3' cannot run.*\n{re.escape(str(wrong))}: line 3: deadline"):
        find_spec(specs, "v3")
    with pytest.raises(UnknownView, match=f"registered views: v1; spec files that do not load: {re.escape(str(broken))}"):
        find_spec(specs, "nope")


def test_several_problems_of_one_spec_are_summarized_on_one_line(tmp_path):
    path = write(tmp_path, "name: Bad-Name\nsql: SELECT 1\ndeadline: soon\n")
    (entry,) = load_specs(tmp_path).broken
    assert entry.summary == f"{path}: line 3: deadline: 'soon' is not valid under any of the given schemas (and 1 more problems)"
    assert entry.names == ("Bad-Name", "v")


@pytest.mark.parametrize("name", ["Bad-Name", "v'; DROP TABLE x; --", "", "1v", "v" * 64, "v\n", "v x"])
def test_a_view_spec_built_in_python_checks_its_name(name):
    with pytest.raises(SpecError, match=r"<spec>: name: .* is not a view name: use lower-case letters"):
        ViewSpec(name=name, sql="SELECT 1", deadline_s=1.0)


def test_the_name_pattern_is_the_schema_s():
    assert json.loads(SCHEMA_PATH.read_text())["properties"]["name"]["pattern"] == f"^{NAME_PATTERN.pattern}$"


def test_durations():
    assert parse_duration("2h") == 7200 and parse_duration("250ms") == 0.25 and parse_duration(3) == 3.0


def test_classify_first_order_and_rejections():
    schemas = {"s": {"g": "string", "b": "int"}}
    kind, query = classify(spec_from_dict({"name": "v", "sql": "SELECT g, SUM(b) AS sb FROM s GROUP BY g", "deadline": 5}), schemas)
    assert kind == "fivm" and query.tables == ("s",)  # acyclic join + SUM/COUNT/AVG: F-IVM by default
    kind, _ = classify(spec_from_dict({"name": "v", "sql": "SELECT g, SUM(b) AS sb FROM s GROUP BY g", "deadline": 5,
                                       "kind": "first_order"}), schemas)
    assert kind == "first_order"
    kind, query = classify(spec_from_dict({"name": "v", "sql": "SELECT g FROM s", "deadline": 5, "refresh_policy": "incremental"}), schemas)
    assert kind == "first_order" and query.implicit_keys == "projection"  # rows with multiplicities
    with pytest.raises(UnsupportedQuery, match="kind triangle needs aggregates"):
        classify(spec_from_dict({"name": "v", "sql": "SELECT g FROM s", "deadline": 5, "kind": "triangle"}), schemas)
    kind, query = classify(spec_from_dict({"name": "v", "sql": "SELECT g, MIN(b) AS m FROM s GROUP BY g", "deadline": 5,
                                           "kind": "first_order"}), schemas)
    assert kind == "first_order" and [a.func for a in query.extrema] == ["MIN"]
    with pytest.raises(UnsupportedQuery, match="kind triangle needs a triangle count"):
        classify(spec_from_dict({"name": "v", "sql": "SELECT COUNT(*) AS c FROM s", "deadline": 5, "kind": "triangle"}), schemas)


def test_every_shipped_spec_loads_and_calls_only_vetted_functions():
    import sqlglot

    from lakeivm.sql import DIALECT
    from lakeivm.sql.functions import check_functions

    folders = sorted(SCHEMA_PATH.parent.glob("views*"))
    assert len(folders) >= 3
    for folder in folders:
        specs = load_specs(folder)
        assert specs and not specs.broken, [b.summary for b in specs.broken]
        for spec in specs.values():
            check_functions(sqlglot.parse_one(spec.sql, dialect=DIALECT), spec.sql, spec.source)
            for feature in spec.options.get("features", ()):
                check_functions(sqlglot.parse_one(f"SELECT {feature}", dialect=DIALECT), feature, spec.source)


def test_an_aggregate_over_an_aggregate_is_a_view_over_its_own_derived_view(tmp_path):
    inner = "SELECT a, COUNT(*) AS n FROM t GROUP BY a"
    write(tmp_path, f"name: dist\nsql: SELECT n, COUNT(*) AS k FROM ({inner}) AS per_a GROUP BY n\ndeadline: 30s\n")
    specs = load_specs(tmp_path)
    assert set(specs) == {"dist", "dist__per_a"} and not specs.broken
    assert specs["dist"].sql == "SELECT n, COUNT(*) AS k FROM dist__per_a AS per_a GROUP BY n"
    assert specs["dist"].upstreams == {"dist__per_a": specs["dist__per_a"]}
    assert specs["dist__per_a"].sql == inner and specs["dist__per_a"].derived_from == "dist"
    assert specs["dist__per_a"].source == specs["dist"].source and specs["dist__per_a"].deadline_s == 30
    whole = load_spec(write(tmp_path, f"name: d2\nsql: SELECT n FROM ({inner}) AS x\ndeadline: 30s\nrefresh_policy: full\n", "d2.yaml"))
    assert not whole.upstreams and "GROUP BY a" in whole.sql  # recomputed in full as written
    clash = "name: dist__per_a\nsql: SELECT 1 AS one FROM t\ndeadline: 30s\n"
    write(tmp_path, clash, "clash.yaml")
    specs = load_specs(tmp_path)  # declared twice: neither loads, nor the view that would read its split view
    assert "dist" not in specs and "dist__per_a" not in specs and "d2" in specs
    assert {b.names for b in specs.broken} == {("dist__per_a",), ("dist__per_a", "dist")}
    with pytest.raises(SpecError, match=r"(?s)view 'dist' cannot run.*view 'dist__per_a' \(split off the SQL of view 'dist'\) is also declared in"):
        find_spec(specs, "dist")


def test_an_aggregating_in_subquery_that_names_an_outer_column_unqualified_is_refused_with_the_fix(tmp_path):
    from lakeivm.catalog.registry import choose

    sql = "SELECT a, COUNT(*) AS n FROM t WHERE a IN (SELECT k FROM u GROUP BY k HAVING SUM(x) > b) GROUP BY a"
    write(tmp_path, f"name: v\nsql: {sql}\ndeadline: 30s\n")
    specs = load_specs(tmp_path)
    assert specs["v"].sql.endswith("IN (SELECT k FROM v__in1) GROUP BY a") and specs["v__in1"].derived_from == "v"
    schemas = {"t": {"a": "int", "b": "int"}, "u": {"k": "int", "x": "int"}}
    with pytest.raises(UnsupportedQuery, match=r"Column 'b' could not be resolved.*split off the SQL of view v: .*qualify it"):
        choose(specs["v__in1"], schemas)
    qualified = load_spec(write(tmp_path, f"name: w\nsql: {sql.replace('> b', '> t.b')}\ndeadline: 30s\n", "w.yaml"))
    assert not qualified.upstreams and choose(qualified, schemas).kind == "full"  # correlated: kept whole, recomputed


def test_a_subquery_is_decorrelated_only_when_the_lake_has_every_table_its_view_reads(tmp_path):
    """TPC-H Q17's correlated AVG is RPAI's (the nested kind) when its tables are there; with one of
    them missing, nothing says so, and the view loads exactly as without the lake (no split view)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from lakeivm.config import SHIPPED_VIEWS

    lake = tmp_path / "lake"
    write_deltalake(str(lake / "tables" / "lineitem"), pa.table({"l_partkey": [1], "l_quantity": [2.0], "l_extendedprice": [3.0]}))
    assert sorted(load_specs(SHIPPED_VIEWS, str(lake))) == sorted(load_specs(SHIPPED_VIEWS))
    assert sorted(load_specs(SHIPPED_VIEWS, str(tmp_path / "no-lake"))) == sorted(load_specs(SHIPPED_VIEWS))


def test_a_folder_s_specs_are_kept_between_commands_and_a_hit_parses_no_sql(tmp_path, monkeypatch):
    """``cached_specs``: a folder's specs as ``load_specs`` gives them (split views, broken files),
    read back by a process that then imports neither sqlglot nor jsonschema, fingerprints included;
    an edited file is loaded again."""
    import os
    import subprocess
    import sys

    from lakeivm.fingerprint import fingerprint
    from lakeivm.catalog.spec_cache import cached_specs

    monkeypatch.setenv("LAKEIVM_SPEC_CACHE", str(tmp_path / "cache"))
    views = tmp_path / "views"
    views.mkdir()
    (views / "a.yaml").write_text("name: a\ndeadline: 30s\nsql: SELECT g, SUM(x) AS s FROM t GROUP BY g\n")
    (views / "b.yaml").write_text("name: b\ndeadline: 30s\nsql: SELECT COUNT(*) AS n FROM (SELECT g, COUNT(*) AS c FROM t GROUP BY g) d\n")
    (views / "c.yaml").write_text("name: c\nsql: [\n")
    fresh = load_specs(views)
    assert cached_specs(views) == fresh and set(fresh) == {"a", "b", "b__d"}  # the first: loaded, then kept
    probe = ("import sys\nfrom lakeivm.catalog.spec_cache import cached_specs\nfrom lakeivm.fingerprint import fingerprint\n"
             f"specs = cached_specs({str(views)!r})\n"
             "print(sorted(specs), [fingerprint(s) for _, s in sorted(specs.items())], sorted(specs['b'].upstreams),\n"
             "      [b.path for b in specs.broken], 'sqlglot' in sys.modules, 'jsonschema' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], env=dict(os.environ), capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[0] == (f"{sorted(fresh)} {[fingerprint(s) for _, s in sorted(fresh.items())]} ['b__d'] "
                                   f"{[str(views / 'c.yaml')]} False False")
    (views / "a.yaml").write_text("name: a\ndeadline: 30s\nsql: SELECT g, SUM(x) AS s FROM t WHERE x > 0 GROUP BY g\n")
    assert "x > 0" in cached_specs(views)["a"].sql


def test_kept_specs_that_read_the_lake_are_loaded_again_when_its_tables_change(tmp_path, monkeypatch):
    """TPC-H Q20's correlated subquery is split off by the columns of the lake's tables: the kept
    specs hold while those columns are what they were, and follow them when they change."""
    import shutil

    import pyarrow as pa
    from deltalake import write_deltalake

    from lakeivm.catalog.spec_cache import cached_specs

    monkeypatch.setenv("LAKEIVM_SPEC_CACHE", str(tmp_path / "cache"))
    views, lake = tmp_path / "views", tmp_path / "lake"
    views.mkdir()
    shutil.copy(SCHEMAS / "views-tpch" / "tpch_q20.yaml", views)
    (lake / "tables").mkdir(parents=True)
    assert sorted(cached_specs(views, str(lake))) == sorted(load_specs(views, str(lake))) == ["tpch_q20"]
    columns = {"part": {"p_partkey": 1, "p_name": "forest green"}, "partsupp": {"ps_partkey": 1, "ps_suppkey": 1, "ps_availqty": 5},
               "lineitem": {"l_partkey": 1, "l_suppkey": 1, "l_quantity": 2.0, "l_shipdate": "1994-02-01"},
               "supplier": {"s_suppkey": 1, "s_name": "s", "s_address": "a", "s_nationkey": 1},
               "nation": {"n_nationkey": 1, "n_name": "CANADA"}}
    for table, row in columns.items():
        write_deltalake(str(lake / "tables" / table), pa.table({column: [value] for column, value in row.items()}))
    split = sorted(load_specs(views, str(lake)))
    assert len(split) > 1 and sorted(cached_specs(views, str(lake))) == split
