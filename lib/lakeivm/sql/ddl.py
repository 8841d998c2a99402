"""Views declared in SQL: a ``.sql`` file's ``CREATE MATERIALIZED VIEW`` statements as spec dicts.

The syntax is Databricks' and Spark Declarative Pipelines'::

    -- lakeivm: deadline=30s tick=1m
    CREATE [OR REPLACE] MATERIALIZED VIEW [IF NOT EXISTS] name
      [REFRESH POLICY AUTO | INCREMENTAL | INCREMENTAL STRICT | FULL]
      [COMMENT 'text']
      [TBLPROPERTIES ('lakeivm.deadline' = '30s', 'lakeivm.<option>' = value, ...)]
    AS SELECT ...;

Each statement becomes the dict a YAML spec holds (``registry.spec_from_dict`` validates it): the
SELECT exactly as written, cut out of the file (never re-rendered: the fingerprint reads it); the
``lakeivm.`` properties and the header comment's ``key=value`` pairs as the spec's fields, each value
read as a YAML scalar or flow value (``2`` a number, ``[g, h]`` a list); COMMENT as ``description``.
Other properties are Databricks' or Delta's, not lakeivm's, and are ignored.

Refresh policies (Databricks' REFRESH POLICY clause): AUTO is ``auto``; INCREMENTAL is ``incremental``
(SQL no incremental kind maintains is refused; a run that cannot apply changes rebuilds the view);
INCREMENTAL STRICT is ``incremental`` with ``on_unreadable_changes: fail`` (that run fails instead);
FULL is ``full``. There is no default deadline: a statement without one is an error naming its line.

sqlglot's parser reads REFRESH POLICY as an opaque command, so statements are split and their
headers read from sqlglot's Spark tokens (quotes, backticks and comments handled as Spark does).

Example::

    >>> (one,) = declarations("CREATE MATERIALIZED VIEW v TBLPROPERTIES ('lakeivm.deadline' = '30s')\\n"
    ...                       "AS SELECT g, COUNT(*) AS n FROM t GROUP BY g;", "v.sql")
    >>> one.data
    {'name': 'v', 'deadline': '30s', 'sql': 'SELECT g, COUNT(*) AS n FROM t GROUP BY g'}
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from sqlglot.dialects.spark import Spark
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from lakeivm.errors import SpecError

POLICIES = {"AUTO": {"refresh_policy": "auto"}, "INCREMENTAL": {"refresh_policy": "incremental"},
            "INCREMENTAL STRICT": {"refresh_policy": "incremental", "on_unreadable_changes": "fail"},
            "FULL": {"refresh_policy": "full"}}
PREFIX = "lakeivm."
_HEADER = re.compile(r"^\s*lakeivm:(.*)$")
_DECLARED = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?MATERIALIZED\s+VIEW\s+(?:IF\s+NOT\s+EXISTS\s+)?`?([A-Za-z0-9_]+)",
                       re.IGNORECASE)
_FIX_DEADLINE = "add TBLPROPERTIES ('lakeivm.deadline' = '5m') or a comment line `-- lakeivm: deadline=5m` above it"


@dataclass(frozen=True)
class Declaration:
    """One statement of a ``.sql`` file: the view's ``name`` (None if unreadable), the ``line`` it
    starts on, and either its spec dict (``data``, with each field's line in ``lines``) or ``problem``."""

    name: str | None
    line: int
    data: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    sql_line: int = 1  # the file's line of the SELECT's first line
    problem: str | None = None
    other: str | None = None  # a statement that declares no materialized view, where others are allowed: its first words


def declarations(text: str, source: str, defaults: dict[str, Any] | None = None, others: bool = False) -> list[Declaration]:
    """The statements of a ``.sql`` file, each read on its own (a statement that does not read has a
    ``problem`` naming ``source`` and its line); SpecError if the file does not split into statements
    (an unclosed quote or comment). ``defaults``: fields a statement without them takes (a pipeline
    spec's deadline); ``others``: a statement other than CREATE MATERIALIZED VIEW is kept as ``other``
    (a Spark Declarative Pipelines file's streaming tables and flows), not a problem."""
    try:
        tokens = Spark().tokenize(text)
    except TokenError as err:
        raise SpecError(f"{source}: malformed SQL: {err}; close the quote, backtick or comment") from err
    out = []
    for statement in _statements(tokens):
        words = [token.text.upper() for token in statement[:6]]
        kind = words[3:5] if words[1:3] == ["OR", "REPLACE"] else words[1:3]
        if others and (words[:1] != ["CREATE"] or kind != ["MATERIALIZED", "VIEW"]):
            out.append(Declaration(None, statement[0].line, other=" ".join(token.text for token in statement[:4])))
        else:
            out.append(_declaration(statement, text, source, defaults or {}))
    return out


def declared_names(text: str) -> list[str]:
    """The view names a ``.sql`` file's text declares, read even where it does not tokenize."""
    return [match.group(1).lower() for match in _DECLARED.finditer(text)]


def _statements(tokens: list[Token]) -> list[list[Token]]:
    """The tokens split at each top-level semicolon; empty statements dropped."""
    out: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            out.append([])
        else:
            out[-1].append(token)
    return [statement for statement in out if statement]


def _declaration(tokens: list[Token], text: str, source: str, defaults: dict[str, Any]) -> Declaration:
    """One statement read (``_Header``), or its problem."""
    header = _Header(tokens, source, defaults)
    try:
        return header.read(text)
    except SpecError as err:
        return Declaration(header.name, tokens[0].line, problem=str(err))


class _Header:
    """A cursor over one statement's tokens that reads the header up to ``AS``."""

    def __init__(self, tokens: list[Token], source: str, defaults: dict[str, Any]) -> None:
        self.tokens, self.source, self.at, self.name, self.defaults = tokens, source, 0, None, defaults
        self.data: dict[str, Any] = {}
        self.lines: dict[str, int] = {"": tokens[0].line}

    def read(self, text: str) -> Declaration:
        """The declaration: header clauses, then the SELECT cut out of ``text`` as written."""
        self._expect("CREATE")
        if self._accept("OR"):
            self._expect("REPLACE")
        if not (self._accept("MATERIALIZED") and self._accept("VIEW")):
            raise self._error(self.tokens[0], "only CREATE MATERIALIZED VIEW statements declare views in a .sql file; "
                              "move other statements out of the views folder")
        if self._accept("IF"):
            self._expect("NOT")
            self._expect("EXISTS")
        self._read_name()
        self._read_comment_header(self.tokens[0])
        while not self._accept("AS"):
            self._read_clause()
        if self.at >= len(self.tokens):
            raise self._error(self.tokens[-1], f"view {self.name}: AS is not followed by a query")
        first, last = self.tokens[self.at], self.tokens[-1]
        self.data["sql"], self.lines["sql"] = text[first.start:last.end + 1], first.line
        for key, value in self.defaults.items():
            self.data.setdefault(key, value)
        if "deadline" not in self.data:
            raise self._error(self.tokens[0], f"view {self.name}: no deadline: {_FIX_DEADLINE}")
        return Declaration(self.name, self.tokens[0].line, self.data, self.lines, first.line)

    def _read_name(self) -> None:
        token = self._next("the view's name")
        if token.token_type not in (TokenType.VAR, TokenType.IDENTIFIER) and not token.text.isidentifier():
            raise self._error(token, f"{token.text!r} is not a view name")
        if self.at < len(self.tokens) and self.tokens[self.at].token_type == TokenType.DOT:
            raise self._error(token, "a view is named without catalog or schema (lakeivm views live in one lake)")
        self.name = token.text
        self._set("name", token.text, token)

    def _read_comment_header(self, create: Token) -> None:
        """``-- lakeivm: key=value ...`` in the comments right above ``CREATE``."""
        for comment in create.comments:
            match = _HEADER.match(comment)
            for pair in match.group(1).split() if match else ():
                key, equals, value = pair.partition("=")
                if not equals or not key:
                    raise self._error(create, f"lakeivm: header: {pair!r} is not key=value (e.g. deadline=30s)")
                self._set(key, _value(value), create)

    def _read_clause(self) -> None:
        token = self._next("AS SELECT ...")
        word = token.text.upper()
        if word == "REFRESH":
            self._expect("POLICY")
            policy = self._next("AUTO, INCREMENTAL, INCREMENTAL STRICT or FULL").text.upper()
            policy += " STRICT" if policy == "INCREMENTAL" and self._accept("STRICT") else ""
            if policy not in POLICIES:
                raise self._error(token, f"REFRESH POLICY {policy}: use AUTO, INCREMENTAL, INCREMENTAL STRICT or FULL")
            for key, value in POLICIES[policy].items():
                self._set(key, value, token)
        elif word == "COMMENT":
            self._set("description", self._string(token), token)
        elif word == "TBLPROPERTIES":
            self._read_properties()
        else:
            raise self._error(token, f"{token.text} is not read by lakeivm: a view's header takes REFRESH POLICY, COMMENT "
                              "and TBLPROPERTIES (schedules, columns and storage are lakeivm's: see docs/reference/spec.md)")

    def _read_properties(self) -> None:
        self._expect("(")
        while True:
            key = self._next("a property name")
            if key.token_type != TokenType.STRING:
                raise self._error(key, f"TBLPROPERTIES: {key.text} is not a quoted property name ('lakeivm.deadline')")
            self._expect("=")
            value = self._next("a property value")
            if key.text.startswith(PREFIX):
                self._set(key.text.removeprefix(PREFIX), _token_value(value), key)
            if self._accept(")"):
                return
            self._expect(",")

    def _set(self, key: str, value: Any, token: Token) -> None:
        if key == "sql" or (key == "name" and "name" in self.data):
            raise self._error(token, f"lakeivm.{key} is the statement's own: it is not a property")
        if key in self.data:
            raise self._error(token, f"{key} is given twice for view {self.name} (the header comment, REFRESH POLICY and "
                              "TBLPROPERTIES must not repeat a field)")
        self.data[key], self.lines[key] = value, token.line

    def _string(self, at: Token) -> str:
        """Adjacent string literals, concatenated as Spark does."""
        parts = []
        while self.at < len(self.tokens) and self.tokens[self.at].token_type == TokenType.STRING:
            parts.append(self.tokens[self.at].text)
            self.at += 1
        if not parts:
            raise self._error(at, "COMMENT takes a quoted string")
        return "".join(parts)

    def _next(self, wanted: str) -> Token:
        if self.at >= len(self.tokens):
            raise self._error(self.tokens[-1], f"the statement ends where {wanted} was expected")
        self.at += 1
        return self.tokens[self.at - 1]

    def _accept(self, word: str) -> bool:
        if self.at < len(self.tokens) and self.tokens[self.at].text.upper() == word and \
                self.tokens[self.at].token_type not in (TokenType.STRING, TokenType.IDENTIFIER):
            self.at += 1
            return True
        return False

    def _expect(self, word: str) -> None:
        if not self._accept(word):
            got = self.tokens[self.at] if self.at < len(self.tokens) else self.tokens[-1]
            raise self._error(got, f"expected {word}, found {got.text!r}")

    def _error(self, token: Token, what: str) -> SpecError:
        return SpecError(f"{self.source}: line {token.line}: {what}")


def _token_value(token: Token) -> Any:
    """A property's value: a string read as YAML (``'2'`` a number, ``'[g]'`` a list), a number, a boolean."""
    if token.token_type == TokenType.NUMBER:
        return _value(token.text)
    if token.token_type in (TokenType.TRUE, TokenType.FALSE):
        return token.token_type == TokenType.TRUE
    return _value(token.text)


def _value(text: str) -> Any:
    """``text`` read as a YAML scalar or flow value, else the text itself."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return text if value is None else value
