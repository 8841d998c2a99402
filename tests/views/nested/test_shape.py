"""The nested classifier: shipped shapes bind under any names and constants; other shapes name their construct."""
from __future__ import annotations

from fractions import Fraction

import pytest

from lakeivm.errors import UnsupportedQuery
from lakeivm.catalog.registry import classify, spec_from_dict
from lakeivm.sql import parse_query, recompute_sql
from lakeivm.views.nested.queries import QUERIES
from lakeivm.views.nested.shape import nested_shape

BOOK = {"broker_id": "int", "price": "decimal(12,2)", "volume": "bigint", "ts": "bigint"}
SCHEMAS = {
    "bids": BOOK, "asks": BOOK,
    "lineitem": {"l_orderkey": "bigint", "l_partkey": "bigint", "l_quantity": "decimal(15,2)", "l_extendedprice": "decimal(15,2)"},
    "part": {"p_partkey": "bigint", "p_brand": "string", "p_container": "string", "p_size": "int"},
    "trades": {"px": "int", "qty": "int", "who": "int"},
    "quotes": {"px": "int", "qty": "int", "desk": "int"},
    "bq": {"desk": "int", "price": "int", "volume": "int"}, "aq": {"desk": "int", "price": "int", "volume": "int"},
}
EXPECTED_PARAMS = {
    "example_2_1": {"c": Fraction(1, 2)}, "vwap": {"c": Fraction(3, 4)},
    "mst": {"c_asks": Fraction(1, 4), "c_bids": Fraction(1, 4)}, "psp": {"c_bids": Fraction(1, 10000), "c_asks": Fraction(1, 10000)},
    "q17": {"c": Fraction(1, 5), "divisor": Fraction(7), "brand": "Brand#23", "container": "WRAP BOX"},
}


def classify_sql(sql: str):
    return classify(spec_from_dict({"name": "v", "sql": sql, "deadline": 60, "refresh_policy": "incremental"}), SCHEMAS)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_shipped_queries_classify_as_nested_with_their_constants(name):
    kind, query = classify_sql(QUERIES[name])
    shape = nested_shape(query)
    assert kind == "nested" and shape.name == name
    assert shape.params == EXPECTED_PARAMS[name]
    assert shape.outputs == tuple(o.name for o in query.outputs)


def test_names_operand_order_and_constants_are_bound_from_the_sql():
    vwap = ("SELECT SUM(t.qty * t.px) AS v FROM trades t "
            "WHERE (SELECT SUM(t2.qty) FROM trades t2 WHERE t.px >= t2.px) > 0.6 * (SELECT SUM(qty) FROM trades)")
    shape = nested_shape(classify_sql(vwap)[1])
    assert (shape.name, shape.tables, shape.params) == ("vwap", {"bids": "trades"}, {"c": Fraction(3, 5)})
    assert shape.columns == {"bids": {"price": "px", "volume": "qty"}}
    mst = QUERIES["mst"].replace("bids", "bq").replace("asks", "aq").replace("broker_id", "desk")
    mst = mst.replace("a.price * a.volume", "a.volume * a.price").replace("0.25 * (SELECT SUM(b1", "0.5 * (SELECT SUM(b1")
    shape = nested_shape(classify_sql(mst)[1])
    assert shape.name == "mst" and shape.tables == {"bids": "bq", "asks": "aq"} and shape.group_output == "desk"
    assert shape.params == {"c_asks": Fraction(1, 4), "c_bids": Fraction(1, 2)}
    q17 = QUERIES["q17"].replace("FROM lineitem l, part p\nWHERE p.p_partkey = l.l_partkey\n  AND",
                                 "FROM part p JOIN lineitem l ON l.l_partkey = p.p_partkey\nWHERE")
    shape = nested_shape(classify_sql(q17)[1])
    assert shape.name == "q17" and shape.params["brand"] == "Brand#23"


@pytest.mark.parametrize("product", ["-1 * b.volume * b.price", "b.price * (-1 * b.volume)", "b.price * b.volume * -1"])
def test_products_bind_whatever_their_factor_order_and_grouping(product):
    mst = QUERIES["mst"].replace("-1 * b.price * b.volume", product)
    shape = nested_shape(classify_sql(mst)[1])
    assert shape.name == "mst" and shape.columns == nested_shape(classify_sql(QUERIES["mst"])[1]).columns


@pytest.mark.parametrize("product", ["-1 * b.price * b.volume * b.volume", "-1 * b.price"])
def test_a_product_with_other_factors_is_not_the_shipped_shape_but_the_general_one(product):
    kind, query = classify_sql(QUERIES["mst"].replace("-1 * b.price * b.volume", product))
    assert kind == "nested" and nested_shape(query).name == "general"


def test_a_product_of_two_relations_columns_is_refused():
    with pytest.raises(UnsupportedQuery, match="kind nested: .*combines columns of two relations"):
        classify_sql(QUERIES["mst"].replace("-1 * b.price * b.volume", "-1 * b.price * a.volume"))


@pytest.mark.parametrize("sql_text, construct", [
    ("SELECT SUM(t.qty) AS v FROM trades t WHERE 0.5 * (SELECT SUM(qty) FROM trades) < "
     "(SELECT MAX(t2.qty) FROM trades t2 WHERE t2.px <= t.px)", "MAX.*not streamable"),
    ("SELECT SUM(t.qty) AS v FROM trades t WHERE 0.5 * (SELECT SUM(qty) FROM trades) < "
     "(SELECT SUM(t2.qty) FROM trades t2 WHERE t2.px <= t.px AND t2.who < t.who)", "2 inequalities"),
    ("SELECT SUM(t.qty) AS v FROM trades t WHERE t.px IN (SELECT MAX(q.px) FROM quotes q WHERE q.desk = t.who)",
     "IN with a subquery"),  # correlated: not split off as a view of its own (registry.with_derived_views)
    ("SELECT SUM(t.qty) AS v FROM trades t WHERE 0.5 * (SELECT SUM(qty) FROM trades) < "
     "(SELECT SUM(t2.qty) FROM trades t2 WHERE t2.px + 1 <= t.px)", "compares expressions"),
    ("SELECT SUM(t.qty) AS v FROM trades t WHERE 0.5 * (SELECT SUM(qty) FROM quotes) < "
     "(SELECT SUM(t2.qty) FROM trades t2 WHERE t2.px <= t.px)", "reads 'quotes'"),
    ("SELECT SUM(t.qty) AS v FROM trades t, quotes q WHERE t.who = q.desk AND 0.5 * (SELECT SUM(qty) FROM trades) < "
     "(SELECT SUM(t2.qty) FROM trades t2 WHERE t2.px <= t.px)", "t.who = q.desk reads trades and quotes: a join condition"),
])
def test_other_nested_shapes_name_the_construct(sql_text, construct):
    with pytest.raises(UnsupportedQuery, match=f"kind nested: .*{construct}"):
        classify_sql(sql_text)


@pytest.mark.parametrize("sql_text", [
    "SELECT SUM(t.qty) AS v FROM trades t WHERE 0.5 * (SELECT SUM(qty) FROM trades) < "
    "(SELECT SUM(t2.qty) FROM trades t2 WHERE t2.px <= t.px) OR t.qty > 3",  # OR around a nested aggregate
    "SELECT SUM(t.qty) AS v FROM trades t WHERE (SELECT SUM(t3.qty) FROM trades t3 WHERE t3.who = t.who) < "
    "(SELECT SUM(t2.qty) FROM trades t2 WHERE t2.px <= t.px)",  # both sides correlated (SQ1)
    "SELECT SUM(t.qty * t.px) AS v FROM trades t WHERE -0.5 * (SELECT SUM(qty) FROM trades) < "
    "(SELECT SUM(t2.qty) FROM trades t2 WHERE t2.px <= t.px)",  # a negative constant
    "SELECT SUM(t.qty) AS v FROM trades t WHERE 0.5 * (SELECT SUM(qty) FROM trades) < "
    "(SELECT SUM(t2.qty) FROM trades t2 WHERE t2.px <= t.px)",  # VWAP of SUM(qty)
])
def test_the_papers_class_beyond_the_shipped_shapes_is_the_general_shape(sql_text):
    kind, query = classify_sql(sql_text)
    assert kind == "nested" and nested_shape(query).name == "general"


def test_recompute_reads_inner_tables_from_the_outer_sources():
    query = parse_query(QUERIES["q17"], SCHEMAS)
    text = recompute_sql(query, {"l": "snap_l", "p": "snap_p"})
    assert "FROM snap_l AS l2" in text and "snap_l AS l" in text and "snap_p AS p" in text
    assert "lineitem" not in text


def test_shipped_view_specs_classify_as_nested():
    from lakeivm import config
    from lakeivm.catalog.registry import load_specs

    specs = {**load_specs(config.SCHEMAS / "views-orderbook"), "tpch_q17": load_specs(config.SHIPPED_VIEWS)["tpch_q17"]}
    shapes = {name: nested_shape(classify(spec, SCHEMAS)[1]).name for name, spec in specs.items()}
    assert shapes == {"nested_example_2_1": "example_2_1", "nested_vwap": "vwap", "nested_mst": "mst",
                      "nested_psp": "psp", "tpch_q17": "q17"}


def test_a_decorrelated_split_is_preferred_to_the_general_algorithm_where_it_leaves_no_subquery():
    """An equality-correlated subquery splits off as a grouped view joined back (first_order, its cost the
    change's); only what stays nested (here an inequality) keeps the SQL whole for the general algorithm,
    whose sweep costs the distinct keys per commit."""
    from lakeivm.catalog.registry import with_derived_views

    def spec(where: str):
        return spec_from_dict({"name": "v", "deadline": 60, "sql": "SELECT SUM(t.qty) AS v FROM trades t WHERE t.qty > "
                               f"(SELECT SUM(t2.qty) * 0.1 FROM trades t2 WHERE {where})"})

    split = with_derived_views(spec("t2.who = t.who"), lambda: SCHEMAS)
    assert list(split.upstreams) == ["v__sq1"] and "SELECT" not in split.sql.upper().split("FROM", 1)[1]
    whole = with_derived_views(spec("t2.px <= t.px"), lambda: SCHEMAS)
    assert not whole.upstreams
    kind, query = classify(whole, SCHEMAS)
    assert kind == "nested" and nested_shape(query).name == "general"
