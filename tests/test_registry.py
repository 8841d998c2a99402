"""View specs: YAML + JSON-schema validation with file and field in every error; classification."""
from __future__ import annotations

import pytest

from lakeivm.errors import SpecError, UnknownView, UnsupportedQuery
from lakeivm.registry import classify, find_spec, load_spec, load_specs, parse_duration, spec_from_dict

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
    with pytest.raises(SpecError, match=f"{path}: malformed YAML"):
        load_spec(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: v1\nsql: SELECT 1\n", r"\(top level\): 'deadline' is a required property"),
        (GOOD.replace("30s", "thirty"), "deadline: 'thirty' is not valid"),
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
    with pytest.raises(UnknownView, match="unknown view 'nope'; registered views: v1"):
        find_spec(specs, "nope")
    write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(SpecError, match="view 'v1' is already defined"):
        load_specs(tmp_path)


def test_durations():
    assert parse_duration("2h") == 7200 and parse_duration("250ms") == 0.25 and parse_duration(3) == 3.0


def test_classify_first_order_and_rejections():
    schemas = {"s": {"g": "string", "b": "int"}}
    kind, query = classify(spec_from_dict({"name": "v", "sql": "SELECT g, SUM(b) AS sb FROM s GROUP BY g", "deadline": 5}), schemas)
    assert kind == "fivm" and query.tables == ("s",)  # acyclic join + SUM/COUNT/AVG: F-IVM by default
    kind, _ = classify(spec_from_dict({"name": "v", "sql": "SELECT g, SUM(b) AS sb FROM s GROUP BY g", "deadline": 5,
                                       "kind": "first_order"}), schemas)
    assert kind == "first_order"
    with pytest.raises(UnsupportedQuery, match="needs aggregates"):
        classify(spec_from_dict({"name": "v", "sql": "SELECT g FROM s", "deadline": 5}), schemas)
    kind, query = classify(spec_from_dict({"name": "v", "sql": "SELECT g, MIN(b) AS m FROM s GROUP BY g", "deadline": 5,
                                           "kind": "first_order"}), schemas)
    assert kind == "first_order" and [a.func for a in query.extrema] == ["MIN"]
    with pytest.raises(UnsupportedQuery, match="kind triangle needs a triangle count"):
        classify(spec_from_dict({"name": "v", "sql": "SELECT COUNT(*) AS c FROM s", "deadline": 5, "kind": "triangle"}), schemas)
