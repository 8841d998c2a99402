"""SQL + sample_size -> join_sample: the sampler's spec from the query IR, and clear rejections."""
from __future__ import annotations

import pytest

from lakeivm.errors import UnsupportedQuery
from lakeivm.catalog.registry import classify, spec_from_dict
from lakeivm.views.join_sample.plan import UNIT, plan_sample, row_id

SCHEMAS = {
    "edges": {"src": "bigint", "dst": "bigint", "w": "double"},
    "orders": {"o_orderkey": "bigint", "o_custkey": "bigint", "o_orderdate": "date", "o_comment": "string"},
    "lineitem": {"l_orderkey": "bigint", "l_linenumber": "int", "l_quantity": "decimal(15,2)"},
    "customer": {"c_custkey": "bigint", "c_name": "string", "c_mktsegment": "string"},
}
LINE3 = ("SELECT g1.src AS a, g2.src AS b, g3.src AS c, g3.dst AS d FROM edges g1 "
         "JOIN edges g2 ON g1.dst = g2.src JOIN edges g3 ON g2.dst = g3.src")
OLC = ("SELECT o_orderkey, l_linenumber, c_name FROM orders JOIN lineitem ON l_orderkey = o_orderkey "
       "JOIN customer ON c_custkey = o_custkey WHERE c_mktsegment = 'BUILDING'")


def plan(sql: str, **options):
    kind, query = classify(spec_from_dict({"name": "v", "sql": sql, "deadline": 60, "sample_size": 3, **options}), SCHEMAS)
    assert kind == "join_sample"
    return plan_sample(query, {"sample_size": 3, **options})


def test_line3_self_join_has_one_slot_per_occurrence_and_a_path_tree():
    p = plan(LINE3)
    assert p.spec.to_mapping() == {"g1": ["g1.dst"], "g2": ["g1.dst", "g2.dst"], "g3": ["g2.dst"]}
    assert p.spec.tree == (("g1", "g2"), ("g2", "g3"))
    assert p.columns == {"edges": ("src", "dst")}
    assert [(s.alias, s.key_positions) for s in p.slots] == [("g1", (1,)), ("g2", (0, 1)), ("g3", (0,))]
    assert [(o.name, o.alias, o.position) for o in p.outputs] == [("a", "g1", 0), ("b", "g2", 0), ("c", "g3", 0), ("d", "g3", 1)]
    assert p.row_id_columns == ("g1_row_id", "g2_row_id", "g3_row_id")


def test_star_and_foreign_key_chain_with_a_pushed_down_filter():
    star = plan("SELECT g1.dst AS x, g2.dst AS y, g3.dst AS z FROM edges g1 JOIN edges g2 ON g1.src = g2.src "
                "JOIN edges g3 ON g3.src = g1.src")
    assert star.spec.to_mapping() == {"g1": ["g1.src"], "g2": ["g1.src"], "g3": ["g1.src"]}
    p = plan(OLC)
    assert p.spec.to_mapping() == {
        "orders": ["customer.c_custkey", "lineitem.l_orderkey"],
        "lineitem": ["lineitem.l_orderkey"],
        "customer": ["customer.c_custkey"],
    }
    customer = next(s for s in p.slots if s.alias == "customer")
    assert customer.filters == ("c_mktsegment = 'BUILDING'",)
    assert set(p.columns["customer"]) == {"c_custkey", "c_name", "c_mktsegment"}


def test_single_table_is_a_plain_reservoir_and_null_keys_join_nothing():
    p = plan("SELECT src, dst FROM edges WHERE w > 0.5")
    assert p.spec.to_mapping() == {"edges": [UNIT]}
    assert p.join_values(p.slots[0], (1, 2)) == (0,)
    line = plan(LINE3)
    assert line.join_values(line.slots[1], (4, None)) is None
    assert line.join_values(line.slots[1], (4, 5)) == (4, 5)


def test_row_ids_are_stable_json_of_values_and_occurrence():
    import datetime
    from decimal import Decimal

    assert row_id((1, datetime.date(1995, 3, 15), Decimal("1.50"), None), 0) == '[1,"1995-03-15","1.50",null,0]'
    assert row_id((1, 2), 0) != row_id((1, 2), 1)


def test_fingerprint_changes_with_the_query_and_k():
    assert plan(LINE3).fingerprint() == plan(LINE3).fingerprint()
    assert plan(OLC).fingerprint() != plan(OLC.replace("BUILDING", "MACHINERY")).fingerprint()
    _, query = classify(spec_from_dict({"name": "v", "sql": LINE3, "deadline": 60, "sample_size": 3}), SCHEMAS)
    assert plan_sample(query, {"sample_size": 3}).fingerprint() != plan_sample(query, {"sample_size": 4}).fingerprint()


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT g1.src FROM edges g1 JOIN edges g2 ON g1.dst = g2.src JOIN edges g3 ON g2.dst = g3.src AND g3.dst = g1.src",
     "cyclic"),
    ("SELECT COUNT(*) AS n FROM edges g1 JOIN edges g2 ON g1.dst = g2.src", "aggregates and GROUP BY"),
    ("SELECT g1.src FROM edges g1 JOIN edges g2 ON g1.dst = g2.src GROUP BY g1.src", "aggregates and GROUP BY"),
    ("SELECT g1.src FROM edges g1 JOIN edges g2 ON g1.dst < g2.src", "without being an equality"),
    ("SELECT g1.src + 1 AS s FROM edges g1 JOIN edges g2 ON g1.dst = g2.src", "not a plain column"),
    ("SELECT * FROM edges g1 JOIN edges g2 ON g1.dst = g2.src", "repeated column"),
    ("SELECT g1.src, g2.src AS s2 FROM edges g1, edges g2", "Cartesian product"),
    ("SELECT g1.src, g2.dst AS d FROM edges g1 JOIN edges g2 ON g1.dst = g2.src AND g1.src = g2.src",
     "two columns of relation"),
    ("SELECT o_orderkey FROM orders WHERE o_custkey = (SELECT c_custkey FROM customer WHERE c_name = 'x')", "subqueries"),
    ("SELECT o_orderkey FROM orders WHERE o_custkey IN (SELECT c_custkey FROM customer)",
     "EXISTS/IN customer is maintained by kind first_order, not by kind join_sample"),
])
def test_rejections_name_the_construct(sql, message):
    with pytest.raises(UnsupportedQuery, match=message):
        plan(sql)


def test_sample_size_must_be_a_positive_integer_and_kind_join_sample_needs_it():
    with pytest.raises(UnsupportedQuery, match="needs `sample_size: k`"):
        classify(spec_from_dict({"name": "v", "sql": LINE3, "deadline": 60, "kind": "join_sample"}), SCHEMAS)
    with pytest.raises(Exception, match="sample_size"):
        spec_from_dict({"name": "v", "sql": LINE3, "deadline": 60, "sample_size": 0})
