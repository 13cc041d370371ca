"""Rules: when they fire, and rule files whose errors name the file, the rule and the field."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

from context_engine.assembly import Boost, Rule, load_rules
from context_engine.errors import ConfigurationError, RuleFileError
from tests.extras import needs

# TOML is read by tomllib (3.11+) or tomli (the rules extra on 3.10).
pytestmark = pytest.mark.skipif(
    find_spec("tomllib") is None and find_spec("tomli") is None, reason=needs("rules")
)

GOOD = """
[[rule]]
name = "auth"
when = ["auth", "login", "session"]
always_include = ["docs/security-decisions.md"]
exclude = ["generated/**"]
boost = [{ match = "src/auth/*", weight = 2.0 }]
"""


def test_a_toml_rule_file_loads_into_rules(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(GOOD)
    assert load_rules(path) == (
        Rule(
            name="auth",
            when=("auth", "login", "session"),
            always_include=("docs/security-decisions.md",),
            exclude=("generated/**",),
            boost=(Boost(match="src/auth/*", weight=2.0),),
        ),
    )


@pytest.mark.extra("rules")
def test_a_yaml_rule_file_loads_the_same_rules(tmp_path: Path) -> None:
    toml, yaml = tmp_path / "rules.toml", tmp_path / "rules.yaml"
    toml.write_text(GOOD)
    yaml.write_text(
        "rule:\n"
        "  - name: auth\n"
        "    when: [auth, login, session]\n"
        "    always_include: [docs/security-decisions.md]\n"
        "    exclude: ['generated/**']\n"
        "    boost: [{match: 'src/auth/*', weight: 2.0}]\n"
    )
    assert load_rules(yaml) == load_rules(toml)


@pytest.mark.parametrize(
    ("text", "rule", "field"),
    [
        ('[[rule]]\nname = "a"\nwhen = "login"\nexclude = [3]\n', "a", "exclude"),
        ('[[rule]]\nname = "b"\nboost = [{ match = "x", weight = "big" }]\n', "b", "boost[1]"),
        ('[[rule]]\nname = "c"\nincluded = ["x"]\n', "c", "included"),
        ('[[rule]]\nwhen = ["x"]\n', "#1", "name"),
    ],
    ids=["exclude-not-strings", "weight-not-a-number", "unknown-field", "no-name"],
)
def test_a_bad_rule_names_the_file_the_rule_and_the_field(
    tmp_path: Path, text: str, rule: str, field: str
) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(text)
    with pytest.raises(RuleFileError) as caught:
        load_rules(path)
    error = caught.value
    assert (error.path, error.rule, error.field) == (str(path), rule, field)
    assert str(error).startswith(f"{path}, rule {rule!r}, field {field!r}: ")
    assert isinstance(error, ConfigurationError)


def test_a_file_that_is_not_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text("[[rule]\n")
    with pytest.raises(RuleFileError, match=r"rules\.toml: not valid TOML"):
        load_rules(path)


def test_a_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(RuleFileError, match="cannot read rule file"):
        load_rules(tmp_path / "absent.toml")


@pytest.mark.parametrize(
    ("task", "fires"),
    [("Fix the LOGIN page", True), ("authentication flow", True), ("rename a var", False)],
    ids=["case-insensitive", "substring", "unrelated"],
)
def test_a_rule_fires_when_the_task_contains_any_of_its_words(task: str, fires: bool) -> None:
    assert Rule(name="auth", when=("auth", "login")).fires(task) is fires


def test_a_rule_without_words_always_fires() -> None:
    assert Rule(name="always").fires("")
