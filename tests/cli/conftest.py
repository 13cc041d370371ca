"""Running the real ``context-engine`` script, and transcripts written for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs
import pytest

from context_engine import Message, ToolCall, Usage
from context_engine.formats.readers import write_transcript
from context_engine.testing import synthetic_session

SCRIPT = Path(sys.executable).with_name("context-engine")


@attrs.frozen
class Ran:
    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, object]:
        data: dict[str, object] = json.loads(self.stdout)
        return data


Runner = Callable[..., Ran]


def run_cli(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    drop_env: Sequence[str] = (),
    prelude: str | None = None,
) -> Ran:
    """Run the console script; with ``prelude``, run ``main`` after that Python code instead."""
    argv = [str(a) for a in args]
    if prelude is None:
        command = [str(SCRIPT), *argv]
    else:
        code = f"import sys\n{prelude}\nfrom context_engine.cli import main\nsys.exit(main())"
        command = [sys.executable, "-c", code, *argv]
    environment = {k: v for k, v in os.environ.items() if k not in drop_env}
    environment.update({"CONTEXT_ENGINE_OFFLINE": "1", "COLUMNS": "140", **(env or {})})
    done = subprocess.run(
        command, capture_output=True, text=True, env=environment, timeout=120, check=False
    )
    return Ran(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli() -> Runner:
    """Runs ``context-engine`` in a subprocess and returns its exit code and output."""
    if not SCRIPT.exists():
        pytest.fail(f"{SCRIPT} is missing: reinstall with pip install -e '.[dev]'")
    return run_cli


def small_session() -> list[Message]:
    """A short session with a provider usage anchor and two tools, well under 128k tokens."""
    listing = "\n".join(f"src/module_{n}.py" for n in range(400))
    return [
        Message.system("You are a coding agent."),
        Message.user("List the files, then read the parser."),
        Message.assistant(
            "Listing.", [ToolCall("c1", "bash", '{"command": "ls -R"}')], usage=Usage(120, 12)
        ),
        Message.tool("c1", listing, name="bash"),
        Message.assistant(None, [ToolCall("c2", "read_file", '{"path": "src/parser.py"}')]),
        Message.tool("c2", "def parse(text):\n    return text\n", name="read_file"),
        Message.assistant("The parser returns its input unchanged."),
    ]


@pytest.fixture
def small_file(tmp_path: Path) -> Path:
    """`small_session` written as OpenAI JSONL."""
    path = tmp_path / "small.jsonl"
    write_transcript(path, small_session())
    return path


@pytest.fixture
def long_file(tmp_path: Path) -> Path:
    """A generated 60-step coding session (about 30k tokens) as OpenAI JSONL."""
    path = tmp_path / "long.jsonl"
    write_transcript(path, synthetic_session(60))
    return path
