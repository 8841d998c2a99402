"""Views declared in ``.sql`` files (``lakeivm.sql.ddl``, ``registry.load_sql_specs``): every clause, errors
with file and line, REFRESH POLICY, clashes with YAML specs, a mixed folder, one refresh end to end."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from lakeivm.sql.ddl import declarations
from lakeivm.errors import SpecError
from lakeivm.fingerprint import fingerprint
from lakeivm.catalog.registry import load_specs, load_sql_specs, spec_from_dict

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "orders_by_status.sql"
SELECT = "SELECT g, COUNT(*) AS c FROM s GROUP BY g"


def write(folder: Path, text: str, name: str = "v.sql") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_every_clause_maps_to_the_spec_a_yaml_file_would_hold(tmp_path):
    path = write(tmp_path, "-- lakeivm: tick=2m headroom=1.5\n"
                           "CREATE OR REPLACE MATERIALIZED VIEW IF NOT EXISTS v1\n"
                           "  REFRESH POLICY FULL\n"
                           "  COMMENT 'per ' 'group'\n"
                           "  TBLPROPERTIES ('lakeivm.deadline' = '30s', 'lakeivm.nullable_keys' = '[g]',\n"
                           "                 'lakeivm.fit_costs' = false, 'delta.enableChangeDataFeed' = 'true')\n"
                           f"AS {SELECT};\n")
    (spec,) = load_sql_specs(path)
    assert (spec.name, spec.sql, spec.deadline_s, spec.tick_s, spec.refresh_policy) == ("v1", SELECT, 30.0, 120.0, "full")
    assert spec.nullable_keys == ("g",) and spec.options == {"headroom": 1.5, "fit_costs": False}
    assert spec.source == str(path)
    same = spec_from_dict({"name": "v1", "sql": SELECT, "deadline": "30s", "tick": "2m", "refresh_policy": "full",
                           "nullable_keys": ["g"], "headroom": 1.5, "fit_costs": False, "description": "per group"})
    assert fingerprint(spec) == fingerprint(same)


def test_the_select_is_kept_as_written_comments_semicolons_and_all(tmp_path):
    query = "SELECT g, `a;b` AS c -- not the end;\nFROM s\nWHERE h = ';' /* ; */\nGROUP BY g, `a;b`"
    (one, two) = declarations(f"CREATE MATERIALIZED VIEW a TBLPROPERTIES ('lakeivm.deadline'='1m') AS\n  {query}  -- done\n;\n"
                              "-- lakeivm: deadline=5s\nCREATE MATERIALIZED VIEW b AS SELECT 1 AS one", "f.sql")
    assert one.data["sql"] == query and one.sql_line == 2
    assert (two.name, two.line, two.data) == ("b", 8, {"name": "b", "deadline": "5s", "sql": "SELECT 1 AS one"})


@pytest.mark.parametrize(("policy", "expected"), [
    ("", ("auto", "rebuild")), ("REFRESH POLICY AUTO", ("auto", "rebuild")),
    ("REFRESH POLICY INCREMENTAL", ("incremental", "rebuild")),
    ("REFRESH POLICY INCREMENTAL STRICT", ("incremental", "fail")), ("refresh policy full", ("full", "rebuild")),
])
def test_refresh_policies(tmp_path, policy, expected):
    (spec,) = load_sql_specs(write(tmp_path, f"-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v {policy} AS {SELECT}"))
    assert (spec.refresh_policy, spec.on_unreadable_changes) == expected


def test_incremental_refuses_what_no_kind_maintains_auto_recomputes_it(tmp_path):
    from lakeivm.errors import UnsupportedQuery
    from lakeivm.catalog.registry import choose

    outer = "SELECT a FROM r INTERSECT SELECT a FROM t"
    schemas = {"r": {"a": "int"}, "s": {"a": "int", "g": "int"}, "t": {"a": "int"}}
    for policy in ("INCREMENTAL", "INCREMENTAL STRICT"):
        (spec,) = load_sql_specs(write(tmp_path, f"-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v REFRESH POLICY {policy} AS {outer}"))
        with pytest.raises(UnsupportedQuery, match="INTERSECT"):
            choose(spec, schemas)
    (spec,) = load_sql_specs(write(tmp_path, f"-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v AS {outer}"))
    assert choose(spec, schemas).kind == "full"


@pytest.mark.parametrize(("text", "message"), [
    (f"\n\nCREATE MATERIALIZED VIEW v AS {SELECT}", "line 3: view v: no deadline: add TBLPROPERTIES ('lakeivm.deadline'"),
    (f"-- lakeivm: deadline=1m\n\nCREATE MATERIALIZED VIEW v\nSCHEDULE EVERY 1 HOUR AS {SELECT}", "line 4: SCHEDULE is not read by lakeivm"),
    (f"CREATE TABLE v AS {SELECT}", "line 1: only CREATE MATERIALIZED VIEW statements"),
    (f"CREATE MATERIALIZED VIEW c.s.v TBLPROPERTIES ('lakeivm.deadline'='1m') AS {SELECT}", "line 1: a view is named without catalog"),
    (f"CREATE MATERIALIZED VIEW v REFRESH POLICY SOMETIMES AS {SELECT}", "line 1: REFRESH POLICY SOMETIMES: use AUTO"),
    (f"-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v\nTBLPROPERTIES ('lakeivm.deadline'='2m') AS {SELECT}",
     "line 3: deadline is given twice"),
    (f"-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v\nTBLPROPERTIES ('lakeivm.dedline'='2m') AS {SELECT}",
     "line 2: (top level): Additional properties are not allowed ('dedline' was unexpected)"),
    (f"CREATE MATERIALIZED VIEW v\nTBLPROPERTIES ('lakeivm.deadline'='soon') AS {SELECT}", "line 2: deadline: 'soon' is not valid"),
    ("-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v AS\nSELECT g,\n  rand() AS r FROM s", "line 4: non-deterministic function rand()"),
    ("-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW V AS SELECT 1 AS one", "name: 'V' does not match"),
    ("CREATE MATERIALIZED VIEW v AS", "line 1: view v: AS is not followed by a query"),
    (f"CREATE MATERIALIZED VIEW v\nTBLPROPERTIES ('lakeivm.sql' = 'SELECT 2') AS {SELECT}", "line 2: lakeivm.sql is the statement's own"),
])
def test_errors_name_the_file_and_the_line(tmp_path, text, message):
    path = write(tmp_path, text)
    (broken,) = load_sql_specs(path)
    assert broken.problem.startswith(f"{path}: ") and message in broken.problem, broken.problem


def test_a_broken_statement_leaves_the_file_s_others_and_a_broken_file_is_one_entry(tmp_path):
    path = write(tmp_path, f"CREATE MATERIALIZED VIEW a AS {SELECT};\n"
                           f"CREATE MATERIALIZED VIEW b TBLPROPERTIES ('lakeivm.deadline' = '1m') AS {SELECT};")
    specs = load_specs(tmp_path)
    assert list(specs) == ["b"] and [(b.path, b.names) for b in specs.broken] == [(str(path), ("a",))]
    write(tmp_path, "CREATE MATERIALIZED VIEW c AS SELECT 'unclosed", "c.sql")
    (entry,) = [b for b in load_specs(tmp_path).broken if b.path.endswith("c.sql")]
    assert entry.names == ("c",) and "malformed SQL" in entry.problem


def test_a_name_in_a_sql_and_a_yaml_file_is_a_clash(tmp_path):
    write(tmp_path, f"name: v1\nsql: {SELECT}\ndeadline: 30s\n", "a.yaml")
    sql = write(tmp_path, f"-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v2 AS {SELECT};\n\n"
                          f"CREATE MATERIALIZED VIEW v1 TBLPROPERTIES ('lakeivm.deadline' = '1m') AS {SELECT};", "b.sql")
    specs = load_specs(tmp_path)
    assert not specs  # a file with a clash loads none of its views
    assert [b.summary for b in specs.broken] == [
        f"{tmp_path / 'a.yaml'}: line 1: name: view 'v1' is also declared in {sql}; give each view its own name",
        f"{sql}: line 4: name: view 'v1' is also declared in {tmp_path / 'a.yaml'}; give each view its own name"]


def test_a_mixed_folder_loads_yaml_and_sql_views_and_a_view_over_a_sql_view(tmp_path):
    write(tmp_path, f"name: v1\nsql: {SELECT}\ndeadline: 30s\n", "a.yaml")
    write(tmp_path, "-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v2 AS SELECT c, COUNT(*) AS n FROM v1 GROUP BY c;\n"
                    "-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v3 AS SELECT g, SUM(c) AS c FROM (SELECT g, COUNT(*) AS c "
                    "FROM s GROUP BY g) AS per GROUP BY g;", "b.sql")
    specs = load_specs(tmp_path)
    assert sorted(specs) == ["v1", "v2", "v3", "v3__per"] and not specs.broken
    assert list(specs["v2"].upstreams) == ["v1"] and specs["v3__per"].source == str(tmp_path / "b.sql")


def test_the_spec_cache_sees_a_sql_file_change(tmp_path, monkeypatch):
    from lakeivm.catalog.spec_cache import cached_specs

    monkeypatch.setenv("LAKEIVM_SPEC_CACHE", str(tmp_path / "cache"))
    views = tmp_path / "views"
    views.mkdir()
    path = write(views, f"-- lakeivm: deadline=1m\nCREATE MATERIALIZED VIEW v AS {SELECT}")
    assert cached_specs(views)["v"].deadline_s == 60.0
    path.write_text(path.read_text().replace("deadline=1m", "deadline=2m"))
    assert cached_specs(views)["v"].deadline_s == 120.0


def test_the_documented_example_loads():
    (spec,) = load_sql_specs(EXAMPLE)
    assert (spec.name, spec.refresh_policy, spec.deadline_s, spec.tick_s) == ("orders_by_status", "incremental", 30.0, 60.0)
    assert re.match(r"SELECT o_orderstatus, .*\n +FROM orders\n +GROUP BY o_orderstatus$", spec.sql)


@pytest.mark.spark
def test_a_sql_view_refreshes_through_the_api_and_audits_against_its_sql(lake, tmp_path):
    import lakeivm
    from tests.helpers import sql

    folder = tmp_path / "views"
    folder.mkdir()
    write(folder, "-- lakeivm: deadline=60s\nCREATE MATERIALIZED VIEW by_g REFRESH POLICY INCREMENTAL STRICT\n"
                  "AS SELECT g, SUM(x) AS sx, COUNT(*) AS c FROM r JOIN s ON r.a = s.a GROUP BY g;", "by_g.sql")
    spark = lake.spark
    lake.create_table("r", spark.createDataFrame([(0, 1), (1, 2)], "a int, x int"))
    lake.create_table("s", spark.createDataFrame([(0, 0), (1, 1)], "a int, g int"))
    view = lakeivm.Views.open(spark, lake=lake.root, views=str(folder))["by_g"]
    assert view.refresh().mode == "bootstrap"
    sql(view.lake, "INSERT INTO {t} VALUES (1, 40)", "r")
    assert view.refresh().applied == ("r",)
    assert sorted(tuple(r) for r in view.read().collect()) == [(0, 1, 1), (1, 42, 2)]
    assert view.audit().ok


def test_the_sql_blocks_of_the_spec_reference_load(tmp_path):
    text = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "spec.md").read_text()
    blocks = re.findall(r"^```sql\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert blocks
    for i, block in enumerate(blocks):
        loaded = load_sql_specs(write(tmp_path, block, f"b{i}.sql"))
        assert loaded and all(not hasattr(one, "problem") for one in loaded), loaded
