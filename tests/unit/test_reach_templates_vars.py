"""Template variables: which ones a text uses, which ones values lack, and values typed into a form."""

from __future__ import annotations

import pytest

from scheduler_core.errors import ReachConfigError, TemplateRenderFailedError
from scheduler_core.reach.templates import MAX_VALUES, missing_variables, parse_values, render, variables


def test_variables_are_the_substituted_names_only() -> None:
    assert variables("Hi {name}, your code is {code}; {code} again") == {"name", "code"}
    assert variables("literal {{name}} and {{ braces }}") == set()
    assert variables("{not a var} {9lives} {ok_1}") == {"ok_1"}
    assert variables("") == set() and variables(None) == set()


def test_missing_variables_names_every_hole_of_every_text() -> None:
    assert missing_variables({"code": "1"}, "Code {code}", "Your {code} for {user}, valid {minutes}") == [
        "minutes", "user"]
    assert missing_variables({"a": 1, "b": 2}, "{a}{b}", None) == []
    with pytest.raises(TemplateRenderFailedError) as info:  # render agrees with the check
        render("{a} {b} {c}", {"a": 1}, "t")
    assert info.value.details["missing"] == ["b", "c"]


def test_lines_of_name_value() -> None:
    assert parse_values("code=123456\n\n  minutes = 5 \nurl=https://x.example/?a=b\n") == {
        "code": "123456", "minutes": "5", "url": "https://x.example/?a=b"}
    assert parse_values("") == {} and parse_values("  \n ") == {}
    assert parse_values("empty=") == {"empty": ""}


def test_a_json_object() -> None:
    assert parse_values('{"code": "1", "minutes": 5}') == {"code": "1", "minutes": 5}


@pytest.mark.parametrize(("text", "field", "words"), [
    ("code", "vars", "line 1: expected name=value"),
    ("ok=1\n9bad=2", "vars", "line 2"),
    ("a=1\na=2", "vars", "a is given twice"),
    ("{not json", "vars", "not a valid JSON object"),
    ('{"a": [1]}', "vars.a", "strings or numbers"),
    ('{"a": true}', "vars.a", "strings or numbers"),
    ("a=" + "x" * 10_001, "vars.a", "at most"),
    ("\n".join(f"v{i}=1" for i in range(MAX_VALUES + 1)), "vars", f"at most {MAX_VALUES}"),
])
def test_bad_values_name_the_field_and_line(text: str, field: str, words: str) -> None:
    with pytest.raises(ReachConfigError) as info:
        parse_values(text)
    assert info.value.field == field and words in info.value.message


def test_values_must_be_text() -> None:
    with pytest.raises(ReachConfigError) as info:
        parse_values(None)  # type: ignore[arg-type]
    assert info.value.field == "vars"
