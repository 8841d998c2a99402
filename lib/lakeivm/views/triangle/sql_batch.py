"""One IVM^ε batch as set-at-a-time SQL over the stored rows it reads.

The batch rule of ``lakeivm.testing.triangle.apply_batch`` (docs/kinds/triangle.md#batches) -- steps
R, S, T under frozen classes, each Δ row joined along tA (PREV_h into x, then NEXT), tB (one entry
of W[NEXT]) and tC (NEXT_l out of y, then PREV_l), then minor rebalancing of R, S, T -- written as
joins run by DuckDB in this process over Arrow tables: the rows a batch reads stay columnar from the
scan of the stored state to the appended change (a batch over a large graph reads millions of rows;
as Python objects they would cost most of the run). State is additive, so within the batch a
relation is *stored rows ⊎ the batch's changes so far* and every sum over it is linear.

A batch reads only rows named by its own values: the rows of ``rel`` whose x is one of its x or y
values or whose y is one of its x values hold every row the steps and the movers' view changes read
-- the classes and degrees of its x values, NEXT(y, ·) and PREV(·, x) of every Δ row -- except the
light rows out of the movers' successors, fetched afterwards when a value moves; of ``w``, the
entries W[NEXT](y, x), under x = a y value. Rows are matched as SQL does:
a NULL vertex joins nothing, as in the view's SQL.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakeivm.views.state import duckdb_connection, quoted
from lakeivm.views.triangle.core import HEAVY, LIGHT, NEXT, PREV, ROLES

if TYPE_CHECKING:
    import pyarrow as pa

# fetch_rel(xs, ys): the stored rows of ``rel`` (role, x, y, part, m; a bag: a key may repeat and
# is summed) whose x is in ``xs`` or whose y is in ``ys``, NULL matching NULL; fetch_views(xs):
# those of ``w`` (role, x, z, cnt) whose x is in ``xs``. Both Arrow arrays in, Arrow tables out.
FetchRel = Callable[["pa.Array", "pa.Array"], "pa.Table"]
FetchViews = Callable[["pa.Array"], "pa.Table"]
REL_KEYS, VIEW_KEYS = ("role", "x", "y", "part"), ("role", "x", "z")


@dataclass(frozen=True)
class BatchRun:
    """The exact effect of one batch: Δ of ``rel`` and ``w`` per key (Arrow, zeros dropped), ΔQ,
    the new |D|, whether |D| left [N/4, N) (the caller then rebuilds; no value moved) and the
    moved (role, value)s in the order they moved."""

    rel_delta: pa.Table
    view_delta: pa.Table
    count_delta: int
    size: int
    major: bool
    moved: tuple[tuple[str, Hashable], ...]


def run_batch(changes: pa.Table, fetch_rel: FetchRel, fetch_views: FetchViews, base: int, epsilon: float,
              size: int, payload: str = "m") -> BatchRun:
    """Apply the batch ``changes`` (role, x, y, ``payload``: a bag, netted here) to the state read
    through the fetches; ``payload`` names ``rel``'s multiplicity column (``w``'s is ``cnt``)."""
    theta, default = base ** epsilon, HEAVY if epsilon == 0 else LIGHT
    m = quoted(payload)
    with duckdb_connection(changes=changes) as con:
        con.execute(f"CREATE TEMP TABLE d AS SELECT role, x, y, SUM({m}) AS p FROM changes GROUP BY ALL HAVING SUM({m}) <> 0")
        values = lambda sql: con.sql(sql).to_arrow_table().column(0).combine_chunks()  # noqa: E731
        firsts, seconds = values("SELECT DISTINCT x FROM d"), values("SELECT DISTINCT y FROM d")
        _load(con, "stored", fetch_rel(values("SELECT x FROM d UNION SELECT y FROM d"), firsts), REL_KEYS, payload, "m")
        _load(con, "w0", fetch_views(seconds), VIEW_KEYS, "cnt", "cnt")
        con.execute("""CREATE TEMP TABLE classes AS SELECT role, x, ANY_VALUE(part) AS part, COUNT(*) AS n
            FROM stored s SEMI JOIN d ON s.role = d.role AND s.x IS NOT DISTINCT FROM d.x GROUP BY role, x""")
        con.execute(f"""CREATE TEMP TABLE dc AS SELECT d.role, d.x, d.y, d.p, COALESCE(c.part, '{default}') AS part
            FROM d LEFT JOIN classes c ON c.role = d.role AND c.x IS NOT DISTINCT FROM d.x""")
        con.execute("CREATE TEMP TABLE rel_d AS SELECT * FROM stored LIMIT 0")
        con.execute("CREATE TEMP TABLE w_d AS SELECT role, x, z, cnt FROM w0 LIMIT 0")
        con.execute("CREATE TEMP VIEW cur AS SELECT * FROM stored UNION ALL SELECT * FROM rel_d")
        con.execute("CREATE TEMP VIEW wcur AS SELECT * FROM w0 UNION ALL SELECT * FROM w_d")
        count_delta = sum(_step(con, role) for role in ROLES)
        con.execute(f"CREATE TEMP TABLE key_changes AS {_KEY_CHANGES}")
        size += int(_scalar(con, "SELECT COALESCE(SUM(change), 0) FROM key_changes"))
        major = not base // 4 <= size < base
        moved = () if major else _rebalance(con, fetch_rel, theta, default, payload)
        rel_delta = con.sql(f"""SELECT role, x, y, part, SUM(m)::BIGINT AS {m} FROM rel_d GROUP BY ALL
            HAVING SUM(m) <> 0""").to_arrow_table()
        view_delta = con.sql("SELECT role, x, z, SUM(cnt)::BIGINT AS cnt FROM w_d GROUP BY ALL HAVING SUM(cnt) <> 0").to_arrow_table()
    return BatchRun(rel_delta, view_delta, int(count_delta), int(size), major, moved)


def _load(con, name: str, rows: pa.Table, keys: tuple[str, ...], payload: str, alias: str) -> None:
    """Fetched stored rows as the temp table ``name``, summed per key (the payload as ``alias``),
    zero sums dropped."""
    con.register(f"{name}_bag", rows)
    group, m = ", ".join(keys), quoted(payload)
    con.execute(f"""CREATE TEMP TABLE {name} AS SELECT {group}, SUM({m})::BIGINT AS {alias} FROM {name}_bag
        GROUP BY ALL HAVING SUM({m}) <> 0""")


def _step(con, role: str) -> int:
    """Step ``role`` (docs/kinds/triangle.md#batches): ΔQ = Σ p·(tA + tB + tC) over its Δ rows
    against the state before the step; ΔW[K] = ΔK_h ⋈ NEXT_l, ΔW[PREV] = PREV_h ⋈ ΔK_l; then ΔK
    joins its part."""
    nxt, prev, delta = NEXT[role], PREV[role], f"(SELECT * FROM dc WHERE role = '{role}')"
    count = _scalar(con, f"""SELECT COALESCE(SUM(v), 0) FROM (
        SELECT d.p * ph.m * n.m AS v FROM {delta} d
          JOIN cur ph ON ph.role = '{prev}' AND ph.part = '{HEAVY}' AND ph.y = d.x
          JOIN cur n ON n.role = '{nxt}' AND n.x = d.y AND n.y = ph.x
        UNION ALL SELECT d.p * w.cnt FROM {delta} d JOIN wcur w ON w.role = '{nxt}' AND w.x = d.y AND w.z = d.x
        UNION ALL SELECT d.p * nl.m * pl.m FROM {delta} d
          JOIN cur nl ON nl.role = '{nxt}' AND nl.part = '{LIGHT}' AND nl.x = d.y
          JOIN cur pl ON pl.role = '{prev}' AND pl.part = '{LIGHT}' AND pl.x = nl.y AND pl.y = d.x)""")
    con.execute(f"""INSERT INTO w_d
        SELECT '{role}', d.x, nl.y, d.p * nl.m FROM {delta} d
          JOIN cur nl ON nl.role = '{nxt}' AND nl.part = '{LIGHT}' AND nl.x = d.y WHERE d.part = '{HEAVY}'
        UNION ALL SELECT '{prev}', ph.x, d.y, ph.m * d.p FROM {delta} d
          JOIN cur ph ON ph.role = '{prev}' AND ph.part = '{HEAVY}' AND ph.y = d.x WHERE d.part = '{LIGHT}'""")
    con.execute(f"INSERT INTO rel_d SELECT role, x, y, part, p FROM {delta}")
    return int(count)


def _scalar(con, text: str):
    return con.execute(text).fetchall()[0][0]


# each Δ row's change of its key's existence (+1 created, -1 removed, 0 neither): the change of |D|
# (distinct keys) and of each value's degree
_KEY_CHANGES = """SELECT dc.role, dc.x, (COALESCE(s.b, 0) + dc.p <> 0)::INT - (COALESCE(s.b, 0) <> 0)::INT AS change FROM dc
    LEFT JOIN (SELECT role, x, y, SUM(m) AS b FROM stored GROUP BY ALL) s
      ON s.role = dc.role AND s.x IS NOT DISTINCT FROM dc.x AND s.y IS NOT DISTINCT FROM dc.y"""


def _rebalance(con, fetch_rel: FetchRel, theta: float, default: str, payload: str) -> tuple[tuple[str, Hashable], ...]:
    """Minor rebalancing (docs/kinds/triangle.md#batches): the batch's values whose degree left
    [½θ, 3/2θ) move, R's then S's then T's (a move of K reads NEXT_l and PREV_h only, so K's movers
    move at once)."""
    con.execute(f"""CREATE TEMP TABLE movers AS SELECT k.role, k.x, COALESCE(c.part, '{default}') AS src
        FROM (SELECT role, x, SUM(change) AS change FROM key_changes GROUP BY role, x) k
        LEFT JOIN classes c ON c.role = k.role AND c.x IS NOT DISTINCT FROM k.x
        WHERE (COALESCE(c.part, '{default}') = '{LIGHT}' AND COALESCE(c.n, 0) + k.change >= $high)
           OR (COALESCE(c.part, '{default}') = '{HEAVY}' AND COALESCE(c.n, 0) + k.change > 0
               AND COALESCE(c.n, 0) + k.change < $low)""", {"high": 1.5 * theta, "low": 0.5 * theta})
    found = con.execute("SELECT role, x FROM movers").fetchall()
    if not found:
        return ()
    successors = con.sql("""SELECT DISTINCT c.y FROM cur c JOIN movers v
        ON c.role = v.role AND c.x IS NOT DISTINCT FROM v.x AND c.part = v.src""").to_arrow_table().column(0).combine_chunks()
    _load(con, "successors", fetch_rel(successors, successors.slice(0, 0)), REL_KEYS, payload, "m")
    con.execute("""INSERT INTO stored SELECT * FROM successors s WHERE NOT EXISTS (SELECT 1 FROM stored t
        WHERE t.role = s.role AND t.part = s.part AND t.x IS NOT DISTINCT FROM s.x AND t.y IS NOT DISTINCT FROM s.y)""")
    for role in ROLES:
        nxt, prev, dst = NEXT[role], PREV[role], f"CASE src WHEN '{HEAVY}' THEN '{LIGHT}' ELSE '{HEAVY}' END"
        con.execute(f"""CREATE OR REPLACE TEMP TABLE rows_moved AS
            SELECT c.x, c.y, v.src, {dst} AS dst, CASE v.src WHEN '{LIGHT}' THEN 1 ELSE -1 END AS sign, SUM(c.m) AS p
            FROM cur c JOIN movers v ON c.role = v.role AND c.x IS NOT DISTINCT FROM v.x AND c.part = v.src
            WHERE c.role = '{role}' GROUP BY ALL HAVING SUM(c.m) <> 0""")
        con.execute(f"""INSERT INTO w_d
            SELECT '{role}', r.x, nl.y, r.sign * r.p * nl.m FROM rows_moved r
              JOIN cur nl ON nl.role = '{nxt}' AND nl.part = '{LIGHT}' AND nl.x = r.y
            UNION ALL SELECT '{prev}', ph.x, r.y, -r.sign * ph.m * r.p FROM rows_moved r
              JOIN cur ph ON ph.role = '{prev}' AND ph.part = '{HEAVY}' AND ph.y = r.x""")
        con.execute(f"""INSERT INTO rel_d SELECT '{role}', x, y, src, -p FROM rows_moved
            UNION ALL SELECT '{role}', x, y, dst, p FROM rows_moved""")
    order = {role: i for i, role in enumerate(ROLES)}
    return tuple(sorted(((role, x) for role, x in found), key=lambda key: (order[key[0]], repr(key[1]))))
