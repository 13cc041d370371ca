"""Redactor: secrets become ``[REDACTED:<kind>]``; prose and lookalikes stay as they are."""

from __future__ import annotations

import json

import attrs
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine import ContextSummary, ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall
from context_engine.errors import ConfigurationError
from context_engine.redact import DEFAULT_SECRET_PATTERNS, Redactor, SecretPattern, redact_messages

REDACTOR = Redactor()

OPENAI = "sk-proj-4f9a2c1b8e7d6a5f3c2b1a0e9d8c7b6a"
ANTHROPIC = "sk-ant-api03-Xy9_aB3cD4eF5gH6iJ7kL8mN9oP0qR-sT1uV2"
AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
GITHUB_PAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
SLACK = "xoxb-123456789012-abcdefghijkl"
GOOGLE = "AIza" + "Sy0123456789abcdefghijklmnopqrstuvw"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n"
    "aFDrBz9vFqU4yQ0=\n"
    "-----END RSA PRIVATE KEY-----"
)
SECRETS = [OPENAI, ANTHROPIC, AWS, GITHUB, GITHUB_PAT, SLACK, GOOGLE, JWT, PEM, "hunter2"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"OPENAI_API_KEY={OPENAI}", "OPENAI_API_KEY=[REDACTED:openai-key]"),
        ("key: sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2", "key: [REDACTED:openai-key]"),
        (
            f"export ANTHROPIC_API_KEY='{ANTHROPIC}'",
            "export ANTHROPIC_API_KEY='[REDACTED:anthropic-key]'",
        ),
        (f"aws_access_key_id = {AWS}", "aws_access_key_id = [REDACTED:aws-access-key]"),
        (f"token {GITHUB} end", "token [REDACTED:github-token] end"),
        (f"GH={GITHUB_PAT}", "GH=[REDACTED:github-token]"),
        (f"slack {SLACK}", "slack [REDACTED:slack-token]"),
        (f"maps key {GOOGLE}.", "maps key [REDACTED:google-api-key]."),
        (f"Authorization: Bearer {JWT}", "Authorization: Bearer [REDACTED:bearer-token]"),
        (
            f'{{"headers": {{"authorization": "bearer {JWT}"}}}}',
            '{"headers": {"authorization": "bearer [REDACTED:bearer-token]"}}',
        ),
        (f"key:\n{PEM}\ndone", "key:\n[REDACTED:private-key]\ndone"),
        (f"cookie session={JWT};", "cookie session=[REDACTED:jwt];"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\nAAAA\n"
            "[... 900 characters clipped ...]\nthe rest",
            "[REDACTED:private-key]\n[... 900 characters clipped ...]\nthe rest",
        ),
        (
            "postgres://app:hunter2@db.internal:5432/prod",
            "postgres://app:[REDACTED:url-password]@db.internal:5432/prod",
        ),
        (
            "git clone https://bot:ghs_tok3n@github.com/o/r",
            "git clone https://bot:[REDACTED:url-password]@github.com/o/r",
        ),
        ("redis://default:p%40ss@cache:6379", "redis://default:[REDACTED:url-password]@cache:6379"),
    ],
    ids=[
        "openai-project",
        "openai-legacy",
        "anthropic",
        "aws",
        "github",
        "github-pat",
        "slack",
        "google",
        "bearer",
        "bearer-in-json",
        "pem",
        "jwt",
        "pem-clipped",
        "postgres-url",
        "git-url",
        "redis-url",
    ],
)
def test_default_patterns_redact_each_kind_of_secret(text: str, expected: str) -> None:
    assert REDACTOR.redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "we use sk-learn-compatible-estimators-everywhere here",
        "the task-force met; risk-assessment-for-the-2024-quarterly-review is done",
        "a bearer of bad news; Bearer authentication is described in RFC 6750",
        "https://example.com:8443/path/to@sign and mailto:someone@example.com",
        "git@github.com:org/repo.git and ssh://git@host/repo",
        "commit 3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c, "
        "uuid 123e4567-e89b-12d3-a456-426614174000",
        "AKIA is a prefix; AKIAshort is not a key",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n"
        "-----END PUBLIC KEY-----",
        "ghp_short and xoxb- alone",
        "请帮我修改这个函数 🎉 naïve café",
    ],
    ids=[
        "sk-learn",
        "hyphenated-prose",
        "bearer-prose",
        "url-without-password",
        "ssh-urls",
        "hashes-and-uuids",
        "aws-prefix-prose",
        "public-key",
        "short-prefixes",
        "cjk-emoji",
    ],
)
def test_prose_and_lookalikes_are_left_alone(text: str) -> None:
    assert REDACTOR.redact(text) == text


def test_extra_patterns_extend_the_defaults_and_may_replace_only_a_group() -> None:
    redactor = Redactor(
        extra_patterns={
            "internal-token": r"itk_[0-9a-f]{16}",
            "db-password": r"(?i)DB_PASSWORD=(?P<secret>\S+)",
        }
    )
    text = f"itk_0123456789abcdef DB_PASSWORD=swordfish {OPENAI}"
    assert redactor.redact(text) == (
        "[REDACTED:internal-token] DB_PASSWORD=[REDACTED:db-password] [REDACTED:openai-key]"
    )
    assert [p.kind for p in redactor.patterns[-2:]] == ["internal-token", "db-password"]


@pytest.mark.parametrize(
    "extra",
    [
        [("ticket", r"TICKET-\d+")],
        [SecretPattern.of("ticket", r"TICKET-\d+")],
        {"ticket": regex.compile(r"TICKET-\d+")},
    ],
    ids=["pairs", "secret-patterns", "compiled"],
)
def test_extra_patterns_accept_pairs_objects_and_compiled_expressions(extra: object) -> None:
    redactor = Redactor(extra_patterns=extra, defaults=False, replacement="<{kind}>")
    assert redactor.redact(f"TICKET-42 {OPENAI}") == f"<ticket> {OPENAI}"
    assert len(redactor.patterns) == 1


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"extra_patterns": {"x": "("}}, "not a valid regular expression"),
        ({"extra_patterns": {"x": ""}}, "non-empty regular expression"),
        ({"extra_patterns": {"Has Space": "x"}}, "short lowercase name"),
        ({"extra_patterns": "sk-.*"}, "must map kinds"),
        ({"extra_patterns": [42]}, "SecretPattern or (kind, regex) pairs"),
        ({"replacement": "[hidden]"}, "containing '{kind}'"),
    ],
    ids=["bad-regex", "empty-regex", "bad-kind", "str", "bad-item", "no-kind-in-replacement"],
)
def test_bad_redactor_settings_say_how_to_fix_them(
    options: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        Redactor(**options)  # type: ignore[arg-type]
    assert problem in str(info.value)


def test_secret_pattern_requires_a_compiled_expression() -> None:
    with pytest.raises(ConfigurationError, match=r"SecretPattern\.of"):
        SecretPattern("x", "not compiled")  # type: ignore[arg-type]


_PIECES = st.sampled_from(
    [*SECRETS, " ", "\n", "Bearer ", "https://u:", "@host/", "sk-", "text", '{"k": "', '"}', "🎉"]
)


_SEPARATORS = st.sampled_from([" ", "\n", "=", ": ", "'", '"', ",", "(", "\t"])


@settings(max_examples=200, deadline=None)
@given(st.lists(_PIECES | st.text(max_size=20), max_size=12).map("".join))
def test_redacting_twice_changes_nothing_more(text: str) -> None:
    once = REDACTOR.redact(text)
    assert REDACTOR.redact(once) == once


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_PIECES | st.text(max_size=20), _SEPARATORS), max_size=12))
def test_no_known_secret_survives_among_other_text(pieces: list[tuple[str, str]]) -> None:
    """Secrets delimited the way shells, JSON and logs delimit them are all removed."""
    once = REDACTOR.redact("".join(piece + separator for piece, separator in pieces))
    for secret in SECRETS[:-1]:  # the URL password "hunter2" is only a secret inside a URL
        assert secret not in once


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["key", "token", "url", "note"]),
        st.sampled_from([*SECRETS, "plain", "x y"]) | st.text(max_size=10),
    )
)
def test_tool_call_arguments_stay_valid_json(arguments: dict[str, str]) -> None:
    call = ToolCall("c1", "bash", json.dumps(arguments))
    (message,) = redact_messages([Message.assistant(tool_calls=[call])], REDACTOR)
    assert isinstance(json.loads(message.tool_calls[0].arguments), dict)


def test_messages_are_redacted_block_by_block_and_clean_ones_are_kept_as_they_are() -> None:
    clean = Message.user("nothing secret here")
    dirty = Message(
        "assistant",
        [
            ThinkingBlock(f"the key is {OPENAI}", signature="sig"),
            ThinkingBlock(f"opaque {OPENAI}", redacted=True),
            TextBlock(f"using {AWS}"),
            ToolCall("c1", "bash", json.dumps({"cmd": f"curl -H 'Authorization: Bearer {JWT}'"})),
        ],
        metadata={"raw": OPENAI},
    )
    image = Message("user", [ImageBlock(url=f"https://u:{OPENAI}@host/i.png")])
    checkpoint = ContextSummary(summary=f"earlier: {GITHUB}", read_files=("a.py",))
    out = redact_messages([clean, dirty, image, checkpoint], REDACTOR)
    assert out[0] is clean
    assert out[2] is image
    thinking, opaque, text, call = out[1].content
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.thinking == "the key is [REDACTED:openai-key]"
    assert thinking.signature == "sig"
    assert opaque is dirty.content[1]  # encrypted reasoning is an opaque payload
    assert text == TextBlock("using [REDACTED:aws-access-key]")
    assert isinstance(call, ToolCall)
    assert "[REDACTED:bearer-token]" in call.arguments
    assert out[1].metadata == dirty.metadata  # metadata is not sent to a summarizer
    assert isinstance(out[3], ContextSummary)
    assert out[3].summary == "earlier: [REDACTED:github-token]"
    assert out[3].read_files == ("a.py",)
    assert out[3].text == attrs.evolve(checkpoint, summary=out[3].summary).text


def test_the_default_pattern_list_names_every_kind_once() -> None:
    kinds = [p.kind for p in DEFAULT_SECRET_PATTERNS]
    assert len(kinds) == len(set(kinds))
    assert {
        "openai-key",
        "anthropic-key",
        "aws-access-key",
        "github-token",
        "bearer-token",
        "private-key",
        "url-password",
    } <= set(kinds)


def test_inspect_previews_never_show_a_secret() -> None:
    from context_engine import Message
    from context_engine.cli._inspect import preview

    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
    shown = preview(Message.user(f"use the key {secret} please"), width=200)
    assert secret not in shown
    assert "REDACTED" in shown


def test_the_default_engine_passes_a_redactor_to_its_summary() -> None:
    from context_engine import ContextEngine
    from context_engine.strategies import FullSummary
    from context_engine.testing import FixedTokenCounter, RecordingSummarizer

    redactor = Redactor()
    engine = ContextEngine.default(
        10_000,
        summarizer=RecordingSummarizer(),
        redactor=redactor,
        token_counter=FixedTokenCounter(),
    )
    summary = next(s for s in engine.strategies if isinstance(s, FullSummary))
    assert summary.redactor is redactor


def test_a_checkpoints_file_lists_are_redacted_too() -> None:
    """Paths come from tool calls: a URL with its password or a key in a file name."""
    checkpoint = ContextSummary(
        summary="earlier work",
        read_files=(f"/home/dev/{AWS}_accessKeys.csv", "src/app.py"),
        modified_files=(f"https://bot:{OPENAI}@example.com/notes.md",),
    )
    (out,) = redact_messages([checkpoint], REDACTOR)
    assert isinstance(out, ContextSummary)
    assert out.read_files == ("/home/dev/[REDACTED:aws-access-key]_accessKeys.csv", "src/app.py")
    assert AWS not in out.text
    assert OPENAI not in out.text
    assert out.summary == "earlier work"
