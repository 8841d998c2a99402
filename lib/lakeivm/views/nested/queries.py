"""SQL texts (Spark SQL dialect) of the nested-aggregate queries the ``nested`` views ship.

Texts follow the paper (§2, §5.2) and the DBToaster finance benchmark
(docs/kinds/nested.md#state-commits-and-query-texts). Example 2.1 is the paper's ``R(A, B)`` mapped
onto ``bids`` with ``A = price`` and ``B = volume``. Q17 uses the paper's parameters
(``'Brand#23'``, ``'WRAP BOX'``) and the TPC-H lake's column names.
"""
from __future__ import annotations

EXAMPLE_2_1_SQL = """\
SELECT SUM(b.price * b.volume) AS result
FROM bids b
WHERE 0.5 * (SELECT SUM(b1.volume) FROM bids b1)
    = (SELECT SUM(b2.volume) FROM bids b2 WHERE b2.price = b.price)"""

VWAP_SQL = """\
SELECT SUM(b.price * b.volume) AS vwap
FROM bids b
WHERE 0.75 * (SELECT SUM(b1.volume) FROM bids b1)
    < (SELECT SUM(b2.volume) FROM bids b2 WHERE b2.price <= b.price)"""

MST_SQL = """\
SELECT b.broker_id, SUM((a.price * a.volume) + (-1 * b.price * b.volume)) AS mst
FROM bids b, asks a
WHERE 0.25 * (SELECT SUM(a1.volume) FROM asks a1)
    > (SELECT SUM(a2.volume) FROM asks a2 WHERE a2.price > a.price)
  AND 0.25 * (SELECT SUM(b1.volume) FROM bids b1)
    > (SELECT SUM(b2.volume) FROM bids b2 WHERE b2.price > b.price)
GROUP BY b.broker_id"""

PSP_SQL = """\
SELECT SUM(a.price + -1 * b.price) AS psp
FROM bids b, asks a
WHERE b.volume > 0.0001 * (SELECT SUM(b1.volume) FROM bids b1)
  AND a.volume > 0.0001 * (SELECT SUM(a1.volume) FROM asks a1)"""

Q17_SQL = """\
SELECT SUM(l.l_extendedprice) / 7.0 AS avg_yearly
FROM lineitem l, part p
WHERE p.p_partkey = l.l_partkey
  AND p.p_brand = 'Brand#23'
  AND p.p_container = 'WRAP BOX'
  AND l.l_quantity < (SELECT 0.2 * AVG(l2.l_quantity) FROM lineitem l2 WHERE l2.l_partkey = p.p_partkey)"""

QUERIES = {
    "example_2_1": EXAMPLE_2_1_SQL,
    "vwap": VWAP_SQL,
    "mst": MST_SQL,
    "psp": PSP_SQL,
    "q17": Q17_SQL,
}
