"""Which functions a view may call (``lakeivm.sql.functions``): Spark's built-ins, from Spark's own
registry, less the non-deterministic, JVM-reflecting and file-reading ones.

Without Spark: verdicts and their reasons, a refusal when the spec loads (and of every view over it).
On Spark: ``lakeivm.sql.spark_builtins`` is the registry of the Spark lakeivm runs on; each built-in's
verdict agrees with Spark's (Catalyst's ``deterministic`` on its documented examples, its documentation's
"non-deterministic"); views calling md5, sha2, regexp_like and date functions are maintained
incrementally and equal their SQL after random batches.

``python -m tests.test_sql_functions > lib/lakeivm/sql/spark_builtins.py`` regenerates the registry's copy.
"""
from __future__ import annotations

import random
import re
import textwrap

import pytest
import sqlglot
from sqlglot import exp

from lakeivm.errors import SpecError, UnknownView, UnsupportedQuery
from lakeivm.catalog.registry import choose, load_specs, spec_from_dict
from lakeivm.sql.spark_builtins import BUILTINS, GROUPS, SPARK_VERSION
from lakeivm.spec import find_spec
from lakeivm.sql.functions import DENIED, check_functions, spark_name
from tests.helpers import random_batch, refresh_and_audit

SCHEMAS = {"t": {"k": "int", "v": "int", "s": "string", "d": "date"}}


@pytest.mark.parametrize("call", [
    "md5(s)", "sha1(s)", "sha2(s, 256)", "crc32(s)", "hash(k, s)", "xxhash64(s)", "regexp_like(s, '^a')", "s RLIKE 'a'",
    "regexp_extract(s, '(a+)', 1)", "regexp_replace(s, 'a', 'b')", "split_part(s, ',', 1)", "lpad(s, 5, '0')",
    "date_format(d, 'yyyy-MM')", "date_add(d, 1)", "make_date(2020, 1, k)", "to_date(s, 'yyyy-MM-dd')", "unix_timestamp(s)",
    "transform(array(k, v), x -> x + 1)", "get_json_object(s, '$.a')", "try_divide(k, v)", "last_day(d)",
    "last_value(v) IGNORE NULLS OVER (PARTITION BY k ORDER BY d)", "first_value(v) OVER (PARTITION BY k ORDER BY d)",
    "collect_list(v) OVER (PARTITION BY k ORDER BY d ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
    "listagg(s, ',') WITHIN GROUP (ORDER BY s)", "mode(v, true)", "aes_encrypt(s, '0000111122223333', 'ECB')",
])
def test_deterministic_built_ins_are_admitted(call):
    sql = f"SELECT {call} AS x FROM t"
    check_functions(sqlglot.parse_one(sql, dialect="spark"), sql, "v.yaml")


def test_a_named_window_orders_as_the_window_it_names():
    """``OVER w`` with ``WINDOW w AS (... ORDER BY ...)`` is an ordered window (the TPC-DI pipeline's SCD2
    dimensions); a named window without ORDER BY is not."""
    from lakeivm.sql.functions import check_sql

    ordered = "SELECT LAST_VALUE(v) IGNORE NULLS OVER w AS x FROM t WINDOW w AS (PARTITION BY k ORDER BY d)"
    check_sql(ordered, "v.sql")
    check_sql(ordered.replace("OVER w", "OVER (w ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)"), "v.sql")
    with pytest.raises(SpecError, match=r"last_value\(\) is not allowed .*order of the rows"):
        check_sql(ordered.replace("ORDER BY d", ""), "v.sql")


@pytest.mark.parametrize("call, name, reason", [
    ("rand()", "rand", "Spark marks it non-deterministic"),
    ("uuid()", "uuid", "Spark marks it non-deterministic"),
    ("shuffle(array(k, v))", "shuffle", "Spark marks it non-deterministic"),
    ("first(v)", "first", "order of the rows"),
    ("collect_list(v) OVER (PARTITION BY k)", "collect_list", "order of the rows"),
    ("listagg(s, ',')", "listagg", "order of the rows"),
    ("max_by(s, v)", "max_by", "order of the rows"),
    ("mode(v)", "mode", "order of the rows"),
    ("current_date", "current_date", "reads the clock"),
    ("now()", "now", "reads the clock"),
    ("date_add(current_date(), 1)", "current_date", "reads the clock"),
    ("current_user()", "current_user", "reads the session"),
    ("version()", "version", "reads the session"),
    ("aes_encrypt(s, '0000111122223333')", "aes_encrypt", "random initialization vector"),
    ("reflect('java.lang.System', 'getenv', 'HOME')", "reflect", "arbitrary JVM method"),
    ("from_protobuf(s, 'Person', '/tmp/p.desc')", "from_protobuf", "descriptor file"),
    ("my_udf(s)", "my_udf", "not a Spark built-in"),
    ("db.md5(s)", "db.md5", "not a Spark built-in"),
])
def test_the_rest_is_refused_naming_the_function_and_why(call, name, reason):
    sql = f"SELECT k,\n  {call} AS x FROM t"
    with pytest.raises(UnsupportedQuery, match=rf"v\.yaml: line 2: (non-deterministic )?function {re.escape(name)}\(\) is not "
                                               rf"allowed in a view: .*{reason}"):
        check_functions(sqlglot.parse_one(sql, dialect="spark"), sql, "v.yaml")


def test_md5_and_regexp_like_keep_a_view_incremental():
    view = spec_from_dict({"name": "keys", "deadline": 60, "sql": "SELECT md5(CAST(k AS STRING)) AS key, COUNT(*) AS n, "
                           "SUM(v) AS sv FROM t WHERE regexp_like(s, '^a') GROUP BY md5(CAST(k AS STRING))"})
    choice = choose(view, SCHEMAS)
    assert choice.mode == "incremental", choice.why_full


def write(folder, name: str, sql: str, **more: str) -> None:
    fields = "".join(f"{key}: {value}\n" for key, value in more.items())
    (folder / f"{name}.yaml").write_text(f"name: {name}\ndeadline: 30s\n{fields}sql: |\n  {sql}\n")


def test_a_refused_call_breaks_its_spec_at_load_and_each_view_over_it(tmp_path):
    """Under every policy (the full kind runs the same SQL); a view over it, directly or not, cannot run
    either and says which view and why, so `explain` never shows it incremental."""
    write(tmp_path, "keys", "SELECT md5(s) AS key, k FROM t WHERE rand() > 0.5", refresh_policy="full")
    write(tmp_path, "dim", "SELECT key, COUNT(*) AS n FROM keys GROUP BY key")
    write(tmp_path, "top", "SELECT MAX(n) AS m FROM dim")
    write(tmp_path, "fine", "SELECT sha2(s, 256) AS h, COUNT(*) AS n FROM t GROUP BY sha2(s, 256)")
    specs = load_specs(tmp_path)
    assert list(specs) == ["fine"]
    problems = {entry.names[0]: entry.problem for entry in specs.broken}
    assert re.match(r".*keys\.yaml: line 1: non-deterministic function rand\(\) is not allowed in a view: Spark marks it",
                    problems["keys"])
    assert "dim.yaml: sql: reads view 'keys', whose spec does not load (" in problems["dim"] and "rand()" in problems["dim"]
    assert "top.yaml: sql: reads view 'dim', which reads view 'keys', whose spec does not load" in problems["top"]
    with pytest.raises(SpecError, match="view 'top' cannot run: its spec does not load"):
        find_spec(specs, "top")
    with pytest.raises(UnknownView):
        find_spec(specs, "nope")


# -- Spark's registry ----------------------------------------------------------------------------


def spark_registry(spark) -> dict[str, object]:
    """{name: Spark's ExpressionInfo} of every built-in function of ``spark``'s registry."""
    registry = spark._jsparkSession.sessionState().functionRegistry()
    found, names = {}, registry.listFunction().iterator()
    while names.hasNext():
        name = names.next()
        found[name.funcName()] = registry.lookupFunction(name).get()
    return found


def render(groups: dict[str, list[str]], version: str) -> str:
    """``lakeivm/sql/spark_builtins.py`` for a registry's ``groups`` ({group: names})."""
    lines = ['"""Spark\'s built-in functions by their group in Spark\'s own function registry '
             f'(Spark {version}).', "",
             "Generated from the registry (``SessionState.functionRegistry``) by ``python -m tests.test_sql_functions``;",
             "``tests/test_sql_functions.py`` checks it still equals the registry of the Spark lakeivm runs on.",
             "``lakeivm.sql.functions`` decides which of them a view may call.", '"""',
             "from __future__ import annotations", "", f'SPARK_VERSION = "{version}"',
             "GROUPS: dict[str, tuple[str, ...]] = {"]
    for group in sorted(groups):
        body = ", ".join(f'"{name}"' for name in sorted(groups[group])) + ","
        lines += [f'    "{group}": (', *(f"        {line}" for line in textwrap.wrap(body, 116, break_long_words=False,
                                                                                    break_on_hyphens=False)), "    ),"]
    lines += ["}", "BUILTINS: dict[str, str] = {name: group for group, names in GROUPS.items() for name in names}  # name -> group"]
    return "\n".join(lines) + "\n"


def test_the_registrys_copy_is_what_the_generator_writes():
    from pathlib import Path

    import lakeivm.sql.spark_builtins

    assert Path(lakeivm.sql.spark_builtins.__file__).read_text() == render({g: list(n) for g, n in GROUPS.items()}, SPARK_VERSION)


def test_the_built_ins_are_those_of_sparks_registry(spark):
    registry = {name: info.getGroup() for name, info in spark_registry(spark).items()}
    assert registry == BUILTINS, ("Spark's registry changed: regenerate with `python -m tests.test_sql_functions > "
                                  f"lib/lakeivm/sql/spark_builtins.py`; new {sorted(set(registry) - set(BUILTINS))}, "
                                  f"gone {sorted(set(BUILTINS) - set(registry))}")


@pytest.mark.heavy(60)
def test_every_built_ins_verdict_agrees_with_spark(spark):
    """Each built-in Catalyst finds non-deterministic in its documented examples, or its documentation
    calls non-deterministic, is denied; each other denial is one Spark cannot see (the clock, the
    session, a file, a random IV). Every call in the examples resolves to a built-in or to syntax."""
    from lakeivm.sql.functions import _CLOCK, _FILES, _RANDOM_IV, _SESSION

    catalyst, documented, misnamed = set(), set(), []
    for name, info in spark_registry(spark).items():
        text = " ".join(f"{info.getUsage() or ''} {info.getNote() or ''}".lower().split())
        if "the function is non-deterministic" in text or "any of values is returned" in text:
            documented.add(name)
        for example in re.findall(r">\s*(SELECT.*?);", info.getExamples() or "", re.S):
            try:
                catalyst |= {name} if not spark.sql(example)._jdf.queryExecution().analyzed().deterministic() else set()
            except Exception:  # noqa: BLE001 -- an example needing a package or a file (avro, protobuf, a metric view)
                continue
            try:
                tree = sqlglot.parse_one(example, dialect="spark")
            except sqlglot.errors.ParseError:
                continue
            misnamed += [(name, found) for call in tree.find_all(exp.Func)
                         if (found := spark_name(call, example)) is not None and found not in BUILTINS]
    assert catalyst and documented and not misnamed, misnamed
    assert catalyst <= set(DENIED) and documented <= set(DENIED), (catalyst - set(DENIED), documented - set(DENIED))
    unseen = {name: DENIED[name] for name in set(DENIED) - catalyst - documented}
    assert set(unseen.values()) <= {_CLOCK, _SESSION, _FILES, _RANDOM_IV}, unseen
    assert len(BUILTINS) - len(DENIED) > 500 and set(DENIED) <= set(BUILTINS)
    print(f"{len(BUILTINS)} built-ins: {len(BUILTINS) - len(DENIED)} admitted, {len(DENIED)} denied "
          f"({len(catalyst)} by Catalyst, {len(documented)} by Spark's documentation, {len(unseen)} by lakeivm)")


def test_views_calling_hashes_regexps_and_dates_follow_random_batches(lake, spark):
    """md5 surrogate keys (dbt's generate_surrogate_key), regexp_like filters, date functions: maintained
    incrementally and equal to their SQL after random inserts, updates and deletes."""
    rng = random.Random(52)
    lake.create_table("t", spark.createDataFrame([(0, 1), (1, 4), (2, 5), (2, None), (3, 7)], "k int, v int"))
    views = {
        "surrogate": "SELECT md5(concat_ws('-', CAST(k AS STRING), 'x')) AS key, sha2(CAST(k AS STRING), 256) AS h, "
                     "COUNT(*) AS n, SUM(v) AS sv FROM t GROUP BY 1, 2",
        "matching": "SELECT k, crc32(CAST(v AS STRING)) AS c, date_add(make_date(2020, 1, 1), v) AS day FROM t "
                    "WHERE regexp_like(CAST(v AS STRING), '^[1-5]$') OR v IS NULL",
    }
    from lakeivm.run.engine import run_view

    specs = [spec_from_dict({"name": name, "deadline": 60, "refresh_policy": "incremental", "sql": sql}) for name, sql in views.items()]
    assert all(run_view(lake, spec).kind in ("first_order", "fivm") for spec in specs)
    for _ in range(3):
        random_batch(lake, rng, "t", "k", "v")
        random_batch(lake, rng, "t", "k", "v")
        refresh_and_audit(lake, specs, None)


if __name__ == "__main__":  # regenerate lakeivm/sql/spark_builtins.py from this Spark's registry
    from pyspark.sql import SparkSession

    session = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    groups: dict[str, list[str]] = {}
    for function, details in spark_registry(session).items():
        groups.setdefault(details.getGroup(), []).append(function)
    print(render(groups, session.version), end="")
