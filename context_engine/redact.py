"""Remove secrets from messages before they leave the process.

A transcript holds whatever the agent's tools printed: API keys echoed by a
shell, a ``.env`` file read back, a database URL with its password. The agent
itself may need them, but a summarizer (often another vendor's model) and a
written report do not. `Redactor` replaces every match of its patterns with
``[REDACTED:<kind>]``, so the summary still says that a key was there and of
what kind, without carrying its value.

The default patterns cover OpenAI and Anthropic API keys, AWS access key ids,
GitHub tokens, Slack tokens, Google API keys, ``Bearer`` tokens in headers,
JSON Web Tokens, PEM private key blocks and passwords inside URLs
(``scheme://user:pass@host``).
Add your own with ``extra_patterns``; a pattern with a group named ``secret``
has only that group replaced (the rest of the match stays readable).

```python
from context_engine import Message
from context_engine.redact import Redactor, redact_messages

redactor = Redactor(extra_patterns={"internal-token": r"itk_[0-9a-f]{16}"})
text = "export OPENAI_API_KEY=sk-proj-4f9a2c1b8e7d6a5f3c2b; token itk_0123456789abcdef"
assert redactor.redact(text) == (
    "export OPENAI_API_KEY=[REDACTED:openai-key]; token [REDACTED:internal-token]"
)
(clean,) = redact_messages([Message.user("postgres://app:hunter2@db:5432/prod")], redactor)
assert clean.text == "postgres://app:[REDACTED:url-password]@db:5432/prod"
```
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import regex

from context_engine.errors import ConfigurationError
from context_engine.messages import (
    Block,
    ContextSummary,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
)

__all__ = ["DEFAULT_SECRET_PATTERNS", "Redactor", "SecretPattern", "redact_messages"]

_KIND = regex.compile(r"[a-z0-9][a-z0-9._-]*")
_MAX_PASSES = 4


def _compile(kind: str, pattern: object) -> regex.Pattern[str]:
    if isinstance(pattern, regex.Pattern):
        return pattern
    if not isinstance(pattern, str) or not pattern:
        raise ConfigurationError(
            f"secret pattern {kind!r} must be a non-empty regular expression (str), got {pattern!r}"
        )
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise ConfigurationError(
            f"secret pattern {kind!r} is not a valid regular expression: {exc}"
        ) from None


def _check_kind(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or _KIND.fullmatch(value) is None:
        raise ConfigurationError(
            f"a secret pattern's kind must be a short lowercase name such as 'openai-key' "
            f"(letters, digits, '.', '_' or '-'), got {value!r}"
        )


@attrs.frozen
class SecretPattern:
    """One kind of secret and the regular expression that finds it.

    Attributes:
        kind: Named in the replacement text, e.g. ``openai-key``.
        pattern: The expression (a str is compiled with the ``regex`` module).
            When it has a group named ``secret``, only that group is replaced.
    """

    kind: str = attrs.field(validator=_check_kind)
    pattern: regex.Pattern[str] = attrs.field()

    @pattern.validator
    def _valid(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, regex.Pattern):
            raise ConfigurationError(
                f"SecretPattern({self.kind!r}) needs a compiled pattern; "
                "use SecretPattern.of(kind, text) to compile one"
            )

    @classmethod
    def of(cls, kind: str, pattern: str | regex.Pattern[str]) -> SecretPattern:
        """A pattern from its kind and expression text (or compiled expression).

        Raises:
            ConfigurationError: the expression does not compile, or the kind is not a short name.
        """
        return cls(kind, _compile(kind, pattern))


# At least 20 key characters, one of them a digit (so that "sk-learn-..." prose is left alone).
_KEY_BODY = r"(?=[A-Za-z_\-]*[0-9])[A-Za-z0-9_\-]{20,}"
DEFAULT_SECRET_PATTERNS: tuple[SecretPattern, ...] = tuple(
    SecretPattern.of(kind, pattern)
    for kind, pattern in (
        (
            "private-key",
            # The whole block; a block cut short (a clipped tool result) up to its last
            # line of only base64, or header line.
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?s:.*?-----END[A-Z0-9 ]*PRIVATE KEY-----"
            r"|(?:(?:[ \t]*(?:\r?\n|\\n))+[ \t]*"
            r"(?:[A-Za-z0-9+/=]+(?=[ \t]*(?:\r?\n|\\n|\Z))|[A-Za-z-]+:[^\n\\]*))*)",
        ),
        ("anthropic-key", rf"(?<![A-Za-z0-9])sk-ant-{_KEY_BODY}"),
        ("openai-key", rf"(?<![A-Za-z0-9])sk-(?!ant-){_KEY_BODY}"),
        ("aws-access-key", r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
        ("github-token", r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{22,})"),
        ("slack-token", r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"),
        ("google-api-key", r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_\-]{35}"),
        (
            "bearer-token",
            r"(?i)\bbearer\s+(?P<secret>(?=[A-Za-z\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{16,}=*)",
        ),
        ("jwt", r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        (
            "url-password",
            r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@\"'<>]+:(?P<secret>[^\s/@\"'<>]+)@",
        ),
    )
)
"""The patterns `Redactor` uses unless ``defaults=False``, in the order they are applied."""


def _to_patterns(value: object) -> tuple[SecretPattern, ...]:
    if isinstance(value, Mapping):
        items: Iterable[object] = value.items()
    elif isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ConfigurationError(
            "extra_patterns must map kinds to regular expressions, e.g. "
            f"{{'internal-token': r'itk_[0-9a-f]{{32}}'}}, got {value!r}"
        )
    else:
        items = value
    patterns = []
    for item in items:
        if isinstance(item, SecretPattern):
            patterns.append(item)
        elif isinstance(item, tuple) and len(item) == 2:
            patterns.append(SecretPattern.of(*item))
        else:
            raise ConfigurationError(
                f"extra_patterns items must be SecretPattern or (kind, regex) pairs, got {item!r}"
            )
    return tuple(patterns)


def _check_replacement(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or "{kind}" not in value:
        raise ConfigurationError(
            f"replacement must be a str containing '{{kind}}', e.g. '[REDACTED:{{kind}}]', "
            f"got {value!r}"
        )


@attrs.frozen(kw_only=True)
class Redactor:
    """Replaces secrets in text with ``[REDACTED:<kind>]``.

    Patterns are applied in order, the defaults first, each on the text the
    previous one left; the replacement text matches none of the defaults, so
    redacting twice changes nothing more (with the defaults; an extra pattern
    that matches its own replacement is applied a bounded number of times).
    """

    extra_patterns: tuple[SecretPattern, ...] = attrs.field(default=(), converter=_to_patterns)
    """More patterns: a mapping of kind to regex, or `SecretPattern`s or (kind, regex) pairs."""
    defaults: bool = True
    """Apply `DEFAULT_SECRET_PATTERNS` (before ``extra_patterns``)."""
    replacement: str = attrs.field(default="[REDACTED:{kind}]", validator=_check_replacement)
    """What a secret becomes; ``{kind}`` is replaced by the pattern's kind."""

    @property
    def patterns(self) -> tuple[SecretPattern, ...]:
        """Every pattern applied, in order."""
        return (DEFAULT_SECRET_PATTERNS if self.defaults else ()) + self.extra_patterns

    def redact_all(self, texts: Sequence[str]) -> tuple[str, ...]:
        """Each of ``texts`` redacted (file paths, say), in order."""
        return tuple(self.redact(text) for text in texts)

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by the replacement naming its kind.

        A replacement can expose a secret glued to the one it replaced (a key
        right after another), so the patterns run again while they find
        something, a few passes at most.
        """
        for _ in range(_MAX_PASSES):
            redacted = self._pass(text)
            if redacted == text:
                break
            text = redacted
        return text

    def _pass(self, text: str) -> str:
        for secret in self.patterns:
            mark = self.replacement.format(kind=secret.kind)
            text = secret.pattern.sub(functools.partial(_replace, mark=mark), text)
        return text

    def redact_message(self, message: Message) -> Message:
        """``message`` with secrets removed from its text, reasoning and tool-call arguments.

        The same object comes back when nothing was found. Encrypted reasoning,
        images and metadata are left alone (they are not sent as text).
        """
        if isinstance(message, ContextSummary):
            changes: dict[str, Any] = {
                "summary": self.redact(message.summary),
                "read_files": self.redact_all(message.read_files),
                "modified_files": self.redact_all(message.modified_files),
            }
            if all(changes[name] == getattr(message, name) for name in changes):
                return message
            return attrs.evolve(message, **changes)
        content = tuple(self._block(block) for block in message.content)
        if all(new is old for new, old in zip(content, message.content, strict=True)):
            return message
        return attrs.evolve(message, content=content)

    def _block(self, block: Block) -> Block:
        if isinstance(block, TextBlock):
            text = self.redact(block.text)
            return block if text == block.text else TextBlock(text)
        if isinstance(block, ThinkingBlock) and not block.redacted:
            text = self.redact(block.thinking)
            return block if text == block.thinking else attrs.evolve(block, thinking=text)
        if isinstance(block, ToolCall):
            arguments = self.redact(block.arguments)
            if arguments == block.arguments:
                return block
            return attrs.evolve(block, arguments=arguments)
        return block


def _replace(match: regex.Match[str], *, mark: str) -> str:
    """The match replaced by ``mark``; only its ``secret`` group when it has one."""
    if "secret" not in match.re.groupindex or match.start("secret") < 0:
        return mark
    offset = match.start()
    whole = match.group(0)
    return whole[: match.start("secret") - offset] + mark + whole[match.end("secret") - offset :]


def redact_messages(messages: Sequence[Message], redactor: Redactor) -> tuple[Message, ...]:
    """The messages with secrets removed by ``redactor``; untouched ones are the same objects."""
    return tuple(redactor.redact_message(message) for message in messages)
