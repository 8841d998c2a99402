"""The functions a view's SQL may call: Spark's built-ins (``lakeivm.sql.spark_builtins``, taken from
Spark's own function registry) less a documented deny list, ``DENIED``.

A view must equal its SQL recomputed on the same snapshots, whichever run computed it, and its SQL runs
in the maintenance job's driver and executors. So a call is refused, under every refresh policy and
when the spec loads, when the function

- is non-deterministic by Spark's own verdict: Catalyst marks it so (``Expression.deterministic``:
  ``rand``, ``uuid``, ``shuffle``, ``monotonically_increasing_id``, ...), or its documentation says so
  (``first``, ``collect_list``, ``max_by``, ...: the order of rows after a shuffle decides the value);
- reads the clock or the session (``current_timestamp``, ``now``, ``current_user``, ``version``, ...):
  fixed within one query, different between runs;
- calls into the JVM (``reflect``, ``java_method``, ``try_reflect``) or reads files outside the lake
  (``from_protobuf``/``to_protobuf``'s descriptor files);
- is random by design (``aes_encrypt`` without an IV);
- is not a Spark built-in: a UDF (code lakeivm cannot see), a catalog's function, a typo.

Some are deterministic when called so (``_DETERMINISTIC_WHEN``): an order-dependent aggregate over an
ordered window or ``WITHIN GROUP (ORDER BY ...)``, ``mode(x, true)``, ``aes_encrypt`` with an IV or in
ECB mode. Everything else Spark ships is admitted: hashes (``md5``, ``sha1``, ``sha2``, ``crc32``,
``hash``, ``xxhash64``), string and regexp functions, date functions, JSON, arrays, maps.
``tests/test_sql_functions.py`` walks Spark's registry and checks each function's verdict against
Spark's. Which constructs an incremental kind maintains is ``lakeivm.sql``'s business (other aggregates,
generators and window functions are recomputed in full).

Example::

    >>> import sqlglot
    >>> check_functions(sqlglot.parse_one("SELECT md5(g), COUNT(*) FROM s GROUP BY 1"), "", "v.yaml")
    >>> check_functions(sqlglot.parse_one("SELECT reflect('java.lang.System', 'exit', 1)"), "", "v.yaml")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lakeivm.errors.UnsupportedQuery: v.yaml: line 1: function reflect() is not allowed in a view: it calls ...
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from lakeivm.errors import SpecError, UnsupportedQuery
from lakeivm.sql.ir import DIALECT
from lakeivm.sql.spark_builtins import BUILTINS
from lakeivm.sql.tree import inline_named_windows

_STORE = "store the value in a column of the source table and use that column"
_CATALYST = f"Spark marks it non-deterministic (it differs between runs, or between partitions); {_STORE}"
_ROW_ORDER = ("its value depends on the order of the rows, which Spark does not fix after a shuffle (Spark's "
              "documentation: non-deterministic); order it (OVER (... ORDER BY ...), WITHIN GROUP (ORDER BY ...)) "
              "where Spark allows, or use MIN/MAX")
_CLOCK = f"it reads the clock: fixed within one query, different at each run; {_STORE}"
_SESSION = f"it reads the session or the installation (user, catalog, schema, time zone, Spark version); {_STORE}"
_JVM = "it calls an arbitrary JVM method; compute the value into a column of the source table"
_FILES = "it reads a descriptor file or class outside the lake; decode the value into a column of the source table"
_RANDOM_IV = "without an IV (or mode 'ECB') it encrypts with a random initialization vector; pass an IV"

DENIED: Mapping[str, str] = {
    **dict.fromkeys(("rand", "randn", "random", "uniform", "randstr", "uuid", "shuffle", "monotonically_increasing_id",
                     "spark_partition_id", "input_file_name", "input_file_block_start", "input_file_block_length"), _CATALYST),
    **dict.fromkeys(("first", "first_value", "last", "last_value", "any_value", "collect_list", "collect_set", "array_agg",
                     "listagg", "string_agg", "max_by", "min_by", "mode"), _ROW_ORDER),
    **dict.fromkeys(("current_date", "curdate", "current_time", "current_timestamp", "now", "localtimestamp"), _CLOCK),
    **dict.fromkeys(("current_timezone", "current_user", "user", "session_user", "current_catalog", "current_database",
                     "current_schema", "current_path", "version"), _SESSION),
    **dict.fromkeys(("reflect", "java_method", "try_reflect"), _JVM),
    **dict.fromkeys(("from_protobuf", "to_protobuf"), _FILES),
    "aes_encrypt": _RANDOM_IV,
}
_NOT_DETERMINISTIC = (_CATALYST, _ROW_ORDER, _CLOCK, _SESSION, _RANDOM_IV)  # named "non-deterministic function" in messages
GENERATORS = frozenset({*(name for name, group in BUILTINS.items() if group == "generator_funcs"), "json_tuple"})


def check_functions(tree: exp.Expression, sql: str, source: str) -> None:
    """Raise UnsupportedQuery naming the first call of ``tree`` that a view may not make (``refusal``),
    with ``source``, its line in ``sql`` and the fix. Non-deterministic calls are named first, even
    inside another refused call (``unix_timestamp()`` reads the current time). An ``OVER w`` is read
    as the window its ``WINDOW w AS (...)`` names (on a copy: ``tree`` is left as it is)."""
    if any(select.args.get("windows") for select in tree.find_all(exp.Select)):
        tree = inline_named_windows(tree.copy())
    refused = [(call, why) for call in tree.find_all(exp.Func) if (why := refusal(call, sql)) is not None]
    refused.sort(key=lambda found: found[1] not in _NOT_DETERMINISTIC)
    if refused:
        call, why = refused[0]
        what = "non-deterministic function" if why in _NOT_DETERMINISTIC else "function"
        raise UnsupportedQuery(f"{source}: line {_call_line(call, sql)}: {what} {spark_name(call, sql)}() is not allowed in a "
                               f"view: {why}")


def check_sql(sql: str, source: str) -> None:
    """``check_functions`` of a view's SQL as its spec loads: a refused call is a SpecError, so the spec
    does not load (listed as broken, with the reason). SQL that does not parse is left to the
    view's classification, which names the problem."""
    try:
        tree = sqlglot.parse_one(sql, dialect=DIALECT)
    except ParseError:
        return
    try:
        check_functions(tree, sql, source)
    except UnsupportedQuery as err:
        raise SpecError(str(err)) from err


def refusal(call: exp.Func, sql: str = "") -> str | None:
    """Why a view may not make ``call`` (the reason and the fix), or None: it calls a deterministic
    Spark built-in, or is syntax (CASE, CAST, ...)."""
    name = spark_name(call, sql)
    if name is None:
        return None
    if name not in BUILTINS:
        return ("it is not a Spark built-in (a UDF, a catalog's function or a misspelling): lakeivm cannot tell what it "
                "computes; use Spark's built-ins, or compute the value into a column of the source table")
    allowed = _DETERMINISTIC_WHEN.get(name)
    return None if allowed is not None and allowed(call) else DENIED.get(name)


def spark_name(call: exp.Func, sql: str = "") -> str | None:
    """Spark's name of the function ``call`` calls: as written in ``sql`` where sqlglot kept its
    position, else as sqlglot writes it for Spark; ``db.f`` for a catalog's function; None for
    syntax that calls no function by name (CASE, CAST, EXTRACT, ``x RLIKE y``, AND, ...)."""
    if isinstance(call, _SYNTAX):
        return None
    if isinstance(call, exp.Anonymous):
        qualifier = call.parent.this.sql(DIALECT) if isinstance(call.parent, exp.Dot) and call.parent.expression is call else ""
        return f"{qualifier}.{call.name}".lower() if qualifier else call.name.lower()
    start, end = call.meta.get("start"), call.meta.get("end")
    if start is not None and end is not None and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", sql[start:end + 1]):
        return sql[start:end + 1].lower()
    head = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\(", call.sql(DIALECT))
    if head:
        return head.group(1).lower()
    name = call.sql_name().lower()
    return name if name in BUILTINS else None


def group(name: str) -> str | None:
    """The group of Spark's built-in ``name`` in its registry (``agg_funcs``, ``window_funcs``, ...), or None."""
    return BUILTINS.get(name)


_SYNTAX = (exp.Case, exp.Cast, exp.TryCast, exp.Extract, exp.Exists, exp.Connector, exp.Xor)


def _ordered(call: exp.Func) -> bool:
    """An order-dependent aggregate whose rows' order the query fixes: over a window with ORDER BY, or
    ``WITHIN GROUP (ORDER BY ...)`` (``LISTAGG(x ...) WITHIN GROUP`` keeps its ORDER BY inside)."""
    if isinstance(call.this, exp.Order):
        return True
    node = call.parent
    while isinstance(node, (exp.IgnoreNulls, exp.RespectNulls)):
        node = node.parent
    return isinstance(node, exp.WithinGroup) or (isinstance(node, exp.Window) and node.args.get("order") is not None)


def _arguments(call: exp.Func) -> list[exp.Expression]:
    return list(call.expressions) if isinstance(call, exp.Anonymous) else [v for v in call.args.values() if isinstance(v, exp.Expression)]


def _mode_deterministic(call: exp.Func) -> bool:
    """``mode(x, true)``: ties go to the lowest value (Spark's documentation)."""
    flag = call.args.get("deterministic")
    return isinstance(flag, exp.Boolean) and bool(flag.this)


def _fixed_iv(call: exp.Func) -> bool:
    """``aes_encrypt(expr, key, mode, padding, iv[, aad])`` with an IV, or ``aes_encrypt(expr, key, 'ECB'[, ...])``."""
    arguments = _arguments(call)
    mode = arguments[2] if len(arguments) > 2 else None
    return len(arguments) >= 5 or (isinstance(mode, exp.Literal) and mode.is_string and mode.this.upper() == "ECB")


_DETERMINISTIC_WHEN: Mapping[str, Callable[[exp.Func], bool]] = {
    **dict.fromkeys(("first", "first_value", "last", "last_value", "collect_list", "array_agg", "listagg", "string_agg"),
                    _ordered),
    "mode": _mode_deterministic,
    "aes_encrypt": _fixed_iv,
}


def _call_line(call: exp.Func, sql: str) -> int:
    """The call's line in ``sql``: its own position, else its enclosing call's, else where its name is."""
    node: exp.Expression | None = call
    while node is not None:
        if "line" in node.meta:
            return int(node.meta["line"])
        node = node.parent if isinstance(node.parent, exp.Func) else None
    position = sql.lower().find((spark_name(call, sql) or call.sql_name()).lower())
    return sql.count("\n", 0, position) + 1 if position >= 0 else 1
