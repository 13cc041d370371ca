"""Declarative rules on provider items: when the task mentions..., include, boost, exclude.

A `Rule` fires when the task (the newest user message) contains any of its
words, case-insensitively (a rule without words always fires). A fired rule
can always include items by id (read through a provider that can fetch them,
and kept even past that source's cap), multiply the relevance of items whose
id matches a glob, and exclude items whose id matches a glob. Rules are
Python objects, or read from a TOML file (YAML too when PyYAML is installed)
by `load_rules`; a bad file gets a `RuleFileError` naming the file, the rule
and the field.
"""

from __future__ import annotations

import fnmatch
import importlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from context_engine.errors import RuleFileError

__all__ = ["Boost", "Rule", "Verdict", "fired", "load_rules", "rules_from_data"]


def _words(value: Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@attrs.frozen(kw_only=True)
class Boost:
    """Multiply the relevance of items whose id matches ``match`` (a glob) by ``weight``."""

    match: str
    weight: float


def _boost_tuple(value: Iterable[Boost]) -> tuple[Boost, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class Rule:
    """One rule of the assembly.

    Attributes:
        name: Named in the trace of every decision the rule made.
        when: Words the task must contain (any one, case-insensitively);
            empty means the rule always fires.
        always_include: Item ids to include whatever their relevance or cap.
        boost: Relevance multipliers by glob.
        exclude: Globs of item ids never to include.
        source: Limit the rule to the provider of that name (None: all providers).
    """

    name: str
    when: tuple[str, ...] = attrs.field(default=(), converter=_words)
    always_include: tuple[str, ...] = attrs.field(default=(), converter=_words)
    boost: tuple[Boost, ...] = attrs.field(default=(), converter=_boost_tuple)
    exclude: tuple[str, ...] = attrs.field(default=(), converter=_words)
    source: str | None = None

    def fires(self, task: str) -> bool:
        """Whether the rule applies to a call whose task is ``task``."""
        if not self.when:
            return True
        lowered = task.casefold()
        return any(word.casefold() in lowered for word in self.when)

    def applies_to(self, source: str) -> bool:
        """Whether the rule acts on items of the provider called ``source``."""
        return self.source is None or self.source == source


@attrs.frozen
class Verdict:
    """What the fired rules say about one item: excluded (by which glob) and its weight."""

    excluded_by: tuple[str, str] | None
    weight: float
    boosted_by: tuple[str, ...]

    @classmethod
    def of(cls, item_id: str, source: str, rules: Sequence[Rule]) -> Verdict:
        """Judge ``item_id`` of ``source`` by the fired ``rules`` (the first exclusion wins)."""
        weight, boosted = 1.0, []
        for rule in rules:
            if not rule.applies_to(source):
                continue
            for glob in rule.exclude:
                if fnmatch.fnmatchcase(item_id, glob):
                    return cls((rule.name, glob), 0.0, ())
            for boost in rule.boost:
                if fnmatch.fnmatchcase(item_id, boost.match):
                    weight *= boost.weight
                    boosted.append(f"{rule.name}: {boost.match} x{boost.weight:g}")
        return cls(None, weight, tuple(boosted))


def fired(rules: Sequence[Rule], task: str) -> tuple[Rule, ...]:
    """The rules that fire for ``task``, in order."""
    return tuple(rule for rule in rules if rule.fires(task))


def load_rules(path: str | Path) -> tuple[Rule, ...]:
    """Read rules from a TOML (``.toml``) or YAML (``.yaml``/``.yml``) file.

    The file holds a list of tables named ``rule``::

        [[rule]]
        name = "auth"
        when = ["auth", "login", "session"]
        always_include = ["docs/security-decisions.md"]
        exclude = ["generated/**"]
        boost = [{ match = "src/auth/*", weight = 2.0 }]

    Raises:
        RuleFileError: the file cannot be read or parsed, or a rule is malformed
            (the message and ``.path``, ``.rule``, ``.field`` say where).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleFileError(f"cannot read rule file: {exc}", path=str(file)) from exc
    data = _parse(file, text)
    return rules_from_data(data, str(file))


def _parse(file: Path, text: str) -> Any:
    yaml = file.suffix in (".yaml", ".yml")
    # Imported by name: tomllib is new in 3.11 (tomli before), PyYAML is optional.
    name = "yaml" if yaml else "tomllib" if sys.version_info >= (3, 11) else "tomli"
    try:
        parser: Any = importlib.import_module(name)
    except ImportError:
        raise RuleFileError(
            f"reading {'YAML' if yaml else 'TOML'} rule files needs {name} "
            "(pip install 'context-engine[rules]')",
            path=str(file),
        ) from None
    invalid: type[Exception] = parser.YAMLError if yaml else parser.TOMLDecodeError
    try:
        return parser.safe_load(text) if yaml else parser.loads(text)
    except invalid as exc:
        kind = "YAML" if yaml else "TOML"
        raise RuleFileError(f"not valid {kind}: {exc}", path=str(file)) from exc


def rules_from_data(data: Any, path: str = "<data>") -> tuple[Rule, ...]:
    """Build rules from parsed data: a mapping with a ``rule`` list of tables.

    Raises:
        RuleFileError: the data is malformed; the error names ``path``, the rule and the field.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("rule", []), list):
        raise RuleFileError("expected a list of tables called 'rule'", path=path)
    rules = []
    for index, entry in enumerate(data.get("rule", [])):
        label = entry.get("name") if isinstance(entry, Mapping) else None
        where = str(label) if isinstance(label, str) and label else f"#{index + 1}"
        if not isinstance(entry, Mapping):
            raise RuleFileError("a rule must be a table", path=path, rule=where)
        rules.append(_rule(entry, path, where))
    return tuple(rules)


_FIELDS = ("name", "when", "always_include", "boost", "exclude", "source")


def _rule(entry: Mapping[str, Any], path: str, where: str) -> Rule:
    unknown = sorted(set(entry) - set(_FIELDS))
    if unknown:
        raise RuleFileError(
            f"unknown field (expected one of {', '.join(_FIELDS)})",
            path=path,
            rule=where,
            field=unknown[0],
        )
    if not isinstance(entry.get("name"), str) or not entry["name"]:
        raise RuleFileError(
            "every rule needs a name (a string)", path=path, rule=where, field="name"
        )
    source = entry.get("source")
    if source is not None and not isinstance(source, str):
        raise RuleFileError("must be a provider name", path=path, rule=where, field="source")
    return Rule(
        name=entry["name"],
        when=_strings(entry, "when", path, where),
        always_include=_strings(entry, "always_include", path, where),
        exclude=_strings(entry, "exclude", path, where),
        boost=_boosts(entry, path, where),
        source=source,
    )


def _strings(entry: Mapping[str, Any], field: str, path: str, where: str) -> tuple[str, ...]:
    value = entry.get(field, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise RuleFileError(
            "must be a list of non-empty strings", path=path, rule=where, field=field
        )
    return tuple(value)


def _boosts(entry: Mapping[str, Any], path: str, where: str) -> tuple[Boost, ...]:
    value = entry.get("boost", [])
    if not isinstance(value, list):
        raise RuleFileError("must be a list of tables", path=path, rule=where, field="boost")
    boosts = []
    for number, item in enumerate(value, 1):
        field = f"boost[{number}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("match"), str):
            raise RuleFileError(
                "needs match (a glob) and weight (a number)", path=path, rule=where, field=field
            )
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight >= 0:
            raise RuleFileError(
                f"weight must be a number >= 0, got {weight!r}", path=path, rule=where, field=field
            )
        boosts.append(Boost(match=item["match"], weight=float(weight)))
    return tuple(boosts)
