"""The documentation checked against the code: README.md, CHANGELOG.md and docs/ (no Spark, no network).

- every fenced ``yaml`` block parses, and one that is a view spec (``name`` and ``sql``) validates
  against ``schemas/view.schema.json``;
- every fenced ``python`` block compiles;
- every ``lakeivm ...`` command in a ``bash``/``console``/``sh``/``shell`` block parses with the CLI's
  own argument parser (a real subcommand, real options);
- every CLI subcommand, option and choice is in docs/reference/cli.md, every top-level field of the
  view schema in docs/reference/spec.md;
- every relative Markdown link resolves to a file, and its ``#anchor`` to a heading there;
- README.md is a front page: at most 10,000 bytes, with the two commands ``make demo`` and ``make test``.
- no module under lib/, dags/, jobs/ or tests/ cites a document outside the repository (the digests,
  ARCHITECTURE), and every ``docs/...md`` page (and heading) one cites exists;
- docs/benchmarks.md is what ``lakeivm bench render`` writes from the records in docs/benchmarks/, and
  every record names its command, date, commit and machine.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
import yaml

from lakeivm.catalog.registry import spec_schema

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SCHEMA = ROOT / "schemas" / "view.schema.json"  # the common fields; lakeivm.catalog.registry.spec_schema adds the kinds' options
CLI_DOC = ROOT / "docs" / "reference" / "cli.md"
SPEC_DOC = ROOT / "docs" / "reference" / "spec.md"
PAGES = sorted([README, ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
SHELLS = {"bash", "console", "sh", "shell"}
README_LIMIT = 10_000


@dataclass(frozen=True)
class Block:
    """A fenced code block: its page, the line of its opening fence, its language and its text."""

    page: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def test_readme_is_a_front_page():
    text = README.read_text()
    assert len(README.read_bytes()) <= README_LIMIT, f"README.md is {len(README.read_bytes())} bytes (at most {README_LIMIT}): move reference to docs/"
    for command in ("make demo", "make test"):
        assert command in text, f"README.md must show `{command}`"


def test_there_is_something_to_check():
    """Guards the other tests from passing on an empty harvest (a changed fence syntax, a moved folder)."""
    langs = [block.lang for block in BLOCKS]
    assert langs.count("yaml") >= 5 and langs.count("python") >= 3 and sum(lang in SHELLS for lang in langs) >= 5
    assert sum(1 for block in BLOCKS if block.lang == "yaml" and _is_view_spec(yaml.safe_load(block.text))) >= 5
    assert len(COMMANDS) >= 20


def _blocks(page: Path) -> Iterator[Block]:
    lang, start, body = None, 0, []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        fence = re.match(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)", line)
        if lang is None and fence:
            lang, start, body, closing = fence.group(2).lower(), number, [], fence.group(1)
        elif lang is not None and line.strip() == closing:
            yield Block(page, start, lang, "\n".join(body))
            lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"{page.relative_to(ROOT)}:{start}: a code block is never closed"


BLOCKS = [block for page in PAGES for block in _blocks(page)]


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in ("yaml", "yml")], ids=lambda b: b.where)
def test_yaml_blocks_parse_and_specs_validate(block: Block):
    try:
        data = yaml.safe_load(block.text)
    except yaml.YAMLError as err:
        pytest.fail(f"{block.where}: not YAML: {err}")
    if _is_view_spec(data):
        problems = [f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in _validator().iter_errors(data)]
        assert not problems, f"{block.where}: the view spec violates {SCHEMA.relative_to(ROOT)}: {problems}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in ("python", "py")], ids=lambda b: b.where)
def test_python_blocks_compile(block: Block):
    try:
        compile(block.text, block.where, "exec")
    except SyntaxError as err:
        pytest.fail(f"{block.where}: does not compile: {err}")


def _commands() -> list[tuple[str, list[str]]]:
    """(where, arguments after ``lakeivm``) of every lakeivm command line in a shell block."""
    found = []
    for block in (b for b in BLOCKS if b.lang in SHELLS):
        for line in block.text.replace("\\\n", " ").splitlines():
            if block.lang == "console":  # commands follow a prompt; the other lines are their output
                if not re.match(r"^\s*\$\s", line):
                    continue
                line = re.sub(r"^\s*\$\s+", "", line)
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError as err:  # reported by the test of that command, if it is one
                tokens = ["lakeivm", f"<{err}>"] if re.search(r"\blakeivm\s", line) else []
            for segment in _segments(tokens):
                for i, token in enumerate(segment):
                    if token == "lakeivm" or token.endswith("/lakeivm"):
                        found.append((f"{block.where}: {line.strip()}", segment[i + 1:]))
                        break
    return found


def _segments(tokens: list[str]) -> Iterator[list[str]]:
    """A command line's simple commands (split at ``&&``, ``||``, ``;``, ``|``)."""
    current: list[str] = []
    for token in tokens:
        if token in ("&&", "||", ";", "|"):
            yield current
            current = []
        else:
            current.append(token)
    yield current


COMMANDS = _commands()


@pytest.mark.parametrize("where, args", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_lakeivm_commands_parse(where: str, args: list[str]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            _parser().parse_args(args)
    except SystemExit as done:
        assert done.code in (0, None), f"{where}: `lakeivm {' '.join(args)}` does not parse: {err.getvalue().strip()}"


def test_every_cli_command_option_and_choice_is_in_the_cli_reference():
    text = CLI_DOC.read_text()
    missing = [f"--{o}" for o in _options(_parser()) if f"`--{o}" not in text and f" --{o}" not in text]
    for name, sub in _subcommands(_parser()).items():
        if not re.search(rf"lakeivm {re.escape(name)}\b", text):
            missing.append(f"lakeivm {name}")
        missing += [f"{name} --{o}" for o in _options(sub) if f"--{o}" not in text]
        for action in sub._actions:
            if action.choices and not isinstance(action, argparse._SubParsersAction):
                missing += [f"{name} {choice}" for choice in action.choices if f"`{choice}`" not in text]
    assert not missing, f"{CLI_DOC.relative_to(ROOT)} does not document: {missing}"


def test_every_spec_field_is_in_the_spec_reference():
    text = SPEC_DOC.read_text()
    fields = spec_schema()["properties"]  # the common fields and every kind's options
    missing = [name for name in fields if f"`{name}`" not in text]
    assert not missing, f"{SPEC_DOC.relative_to(ROOT)} does not document the fields {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {file})")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


CODE = sorted(path for folder in ("lib", "dags", "jobs", "tests") for path in (ROOT / folder).rglob("*.py")
              if path != Path(__file__).resolve())
OUTSIDE = re.compile(r"(?i:\bdigest\s*(§|[PT]\d)|\bthe digest\b)|\bARCHITECTURE\b")  # the implementers' digests, ARCHITECTURE.md
CITED_PAGE = re.compile(r"\bdocs/[\w./-]+?\.md(?:#[\w-]+)?")
RECORDS = ROOT / "docs" / "benchmarks"


def test_no_module_cites_a_document_outside_the_repository():
    """The implementers' digests and ARCHITECTURE.md are not in the repository: code and tests cite the
    papers' sections and the docs/ page that says it in our words."""
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in CODE
             for number, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, f"cite the paper's section or the docs/ page that says it in our words: {found}"


def test_docs_pages_cited_in_the_code_exist():
    cited = {match.group(0) for path in CODE for match in CITED_PAGE.finditer(path.read_text())}
    assert len(cited) >= 10, "guards the check from passing on an empty harvest"
    broken = []
    for target in sorted(cited):
        page, _, anchor = target.partition("#")
        if not (ROOT / page).is_file():
            broken.append(f"{target} (no file)")
        elif anchor and anchor not in _anchors(ROOT / page):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"the code cites docs that do not exist: {broken}"


def test_benchmarks_page_is_rendered_from_the_records():
    from lakeivm.bench.render import load_records, render

    page = ROOT / "docs" / "benchmarks.md"
    assert page.read_text() == render(load_records(RECORDS)), (
        "docs/benchmarks.md is generated: change a record in docs/benchmarks/ (or `lakeivm bench record`), "
        "then run `lakeivm bench render`")


@pytest.mark.parametrize("record", sorted(RECORDS.glob("*.json")), ids=lambda p: p.name)
def test_every_benchmark_record_names_its_command_date_commit_and_machine(record: Path):
    from lakeivm.bench.render import check_record

    data = json.loads(record.read_text())
    assert not check_record(data), f"{record.relative_to(ROOT)}: {check_record(data)}"
    if data.get("png"):
        assert (RECORDS / data["png"]).is_file(), f"{record.relative_to(ROOT)}: no plot {data['png']}"


def _links(page: Path) -> list[str]:
    text = _prose(page.read_text())
    return [m.group(1) for m in re.finditer(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower-cased, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in _outside_fences(page.read_text()).splitlines():
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _outside_fences(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"(?ms)^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1\s*$", "", text)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    return re.sub(r"`[^`\n]*`", "", _outside_fences(text))


def _parser() -> argparse.ArgumentParser:
    """The ``lakeivm`` command's argument parser, as ``lakeivm.cli`` builds it."""
    from lakeivm import cli

    for name in ("build_parser", "parser", "make_parser", "_parser"):
        build = getattr(cli, name, None)
        if callable(build):
            return build()
    raise AssertionError("lakeivm.cli has no parser builder (build_parser, parser, make_parser or _parser): update tests/test_docs.py")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """The long options of ``parser`` itself, ``--help`` aside."""
    return [s[2:] for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"]


def _is_view_spec(data: object) -> bool:
    return isinstance(data, dict) and {"name", "sql"} <= set(data)


def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(spec_schema())
