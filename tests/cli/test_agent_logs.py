"""Agent logs and damaged files through the console script.

Claude Code compaction records, API-error notes and screenshots; Codex rollouts
with odd roles; corrupt numbers and bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from context_engine.formats.readers import read_transcript
from tests.cli.conftest import Runner


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _claude(kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "sessionId": "s1",
        "uuid": f"u{abs(hash(json.dumps(content))) % 10_000}",
        "message": {"role": kind, "content": content, **extra.pop("message", {})},
        **extra,
    }


def _claude_session(tmp_path: Path) -> Path:
    old = "x " * 4000
    return _jsonl(
        tmp_path / "claude.jsonl",
        [
            _claude("user", f"read everything: {old}"),
            _claude("assistant", [{"type": "text", "text": f"done {old}"}], message={"id": "m1"}),
            {
                "type": "system",
                "subtype": "compact_boundary",
                "sessionId": "s1",
                "uuid": "b1",
                "content": "Conversation compacted",
                "compactMetadata": {"trigger": "manual", "preTokens": 8000},
            },
            _claude(
                "user",
                "This session is being continued from a previous conversation. Summary: read it.",
                isCompactSummary=True,
            ),
            _claude("user", "take a screenshot"),
            _claude(
                "assistant",
                [{"type": "tool_use", "id": "t1", "name": "screenshot", "input": {}}],
                message={"id": "m2"},
            ),
            _claude(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "iVBORw0KGgo=",
                                },
                            }
                        ],
                    }
                ],
            ),
            _claude(
                "assistant",
                [{"type": "text", "text": "API Error: 529 overloaded"}],
                message={"id": "e1", "model": "<synthetic>"},
                isApiErrorMessage=True,
            ),
            _claude(
                "assistant", [{"type": "text", "text": "The page is blank."}], message={"id": "m3"}
            ),
        ],
    )


def test_claude_code_is_counted_from_the_last_compact_boundary(cli: Runner, tmp_path: Path) -> None:
    path = _claude_session(tmp_path)
    data: dict[str, Any] = json.loads(cli("inspect", path, "--json", "-").stdout)
    by_role = {row["role"]: row["messages"] for row in data["by_role"]}
    assert data["messages"] == 5
    assert by_role["checkpoint"] == 1
    assert data["tokens"] < 2_000  # the 8000 tokens before the boundary are not counted
    first = read_transcript(path).messages[0]
    assert first.is_summary
    assert "Summary: read it." in first.text


def test_claude_code_api_error_notes_are_not_model_messages(cli: Runner, tmp_path: Path) -> None:
    transcript = read_transcript(_claude_session(tmp_path))
    assert all("API Error" not in message.text for message in transcript.messages)
    assert transcript.messages[-1].text == "The page is blank."


def test_an_image_only_tool_result_shows_as_an_image(cli: Runner, tmp_path: Path) -> None:
    ran = cli("inspect", _claude_session(tmp_path), "--top", "10", "--json", "-")
    data: dict[str, Any] = json.loads(ran.stdout)
    previews = [row["preview"] for row in data["largest"]]
    assert "[image image/png]" in previews


def _rollout(tmp_path: Path, role: Any) -> Path:
    return _jsonl(
        tmp_path / "rollout.jsonl",
        [
            {"timestamp": "2025-01-01T00:00:00Z", "type": "session_meta", "payload": {}},
            {
                "timestamp": "2025-01-01T00:00:01Z",
                "type": "response_item",
                "payload": {"type": "message", "role": role, "content": "hi"},
            },
        ],
    )


def test_a_codex_role_that_is_a_list_or_object_is_an_error_with_its_line(
    cli: Runner, tmp_path: Path
) -> None:
    for role in (["user"], {"name": "user"}):
        path = _rollout(tmp_path, role)
        ran = cli("inspect", path)
        assert ran.code == 2
        assert "Traceback" not in ran.stderr
        assert f"{path}: line 2: a message item has an unknown role" in ran.stderr


def test_a_usage_number_beyond_any_window_is_an_error_not_an_overflow(
    cli: Runner, tmp_path: Path
) -> None:
    path = tmp_path / "huge.jsonl"
    path.write_text(
        '{"role": "user", "content": "hi"}\n'
        '{"role": "assistant", "content": "yo", "usage": {"prompt_tokens": '
        + "9" * 400
        + ', "completion_tokens": 1}}\n{"role": "user", "content": "again"}\n',
        encoding="utf-8",
    )
    ran = cli("inspect", path)
    assert ran.code == 2
    assert "OverflowError" not in ran.stderr
    assert "line 2: Usage.input_tokens must be at most 2**53" in ran.stderr


def test_invalid_utf8_names_the_line_and_offset_and_the_path_once(
    cli: Runner, tmp_path: Path
) -> None:
    path = tmp_path / "bytes.jsonl"
    data = b'{"role": "user", "content": "hi"}\n{"role": "user", "content": "b\xffd"}\n'
    path.write_bytes(data)
    ran = cli("inspect", path)
    assert ran.code == 2
    assert ran.stderr.count(str(path)) == 1, ran.stderr
    offset = data.index(b"\xff")
    assert f"line 2: is not UTF-8 text: byte 0xff at offset {offset}" in ran.stderr


def test_a_lone_surrogate_in_a_message_is_printed_escaped(cli: Runner, tmp_path: Path) -> None:
    path = tmp_path / "surrogate.jsonl"
    path.write_text('{"role": "user", "content": "bad \\ud800 text"}\n', encoding="utf-8")
    ran = cli("inspect", path)
    assert ran.code == 0, ran.stderr
    assert "Traceback" not in ran.stderr
    assert "bad \\ud800 text" in ran.stdout
