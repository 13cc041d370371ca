"""The shell-read parser: which files a command shows the agent."""

from __future__ import annotations

import pytest

from context_engine.summarize.shell_reads import shell_reads

READS = [
    ("cat src/app.py", ("src/app.py",), "cat"),
    ("cat -n src/x.py | sed -n '1,5p'", ("src/x.py",), "cat-piped-into-sed"),
    ("head -50 ./tests/test_grid.py", ("tests/test_grid.py",), "head-count-as-flag"),
    ("tail -n 20 logs/run.log", ("logs/run.log",), "tail-count-as-value"),
    ("cd /repo && sed -n '308,320p' pkg/mod.py", ("/repo/pkg/mod.py",), "sed-n-after-cd"),
    ("sed -n -e 1p a.py b.py", ("a.py", "b.py"), "sed-script-given-by-option"),
    ("nl -ba Makefile | head", ("Makefile",), "nl-file-without-extension"),
    ("grep -n 'def parse' src/parse.py | head -5", ("src/parse.py",), "grep-named-file"),
    ("grep -e foo -e bar a.py notes.txt", ("a.py", "notes.txt"), "grep-pattern-by-option"),
    ("awk '{print $1}' data.csv", ("data.csv",), "awk-file"),
    ("sudo cat /etc/hosts", ("/etc/hosts",), "prefix-skipped"),
    ("cd $HOME && cat a.txt", ("a.txt",), "unknown-directory-forgotten"),
]

NOT_READS = [
    ("grep -rn 'def parse' src/", "recursive-search-of-a-directory"),
    ("sed -i 's/a/b/' src/x.py", "sed-in-place-is-a-write"),
    ("cat > fix.py <<'EOF'\nprint(open('x.py').read())\nEOF", "heredoc-written-not-read"),
    ("ls -la && find . -name '*.py'", "listing"),
    ("python reproduce.py", "running-is-not-reading"),
    ("cat $FILE /dev/null -", "expansion-device-and-stdin"),
    ("head -c 100 *.py", "glob"),
]


@pytest.mark.parametrize(("command", "read"), [r[:2] for r in READS], ids=[r[2] for r in READS])
def test_shell_reads_names_the_files_a_command_shows(command: str, read: tuple[str, ...]) -> None:
    assert shell_reads(command) == read


@pytest.mark.parametrize("command", [r[0] for r in NOT_READS], ids=[r[1] for r in NOT_READS])
def test_shell_reads_names_nothing_for_searches_writes_and_runs(command: str) -> None:
    assert shell_reads(command) == ()


def test_shell_reads_keeps_first_seen_order_without_repeats() -> None:
    assert shell_reads("cat b.py a.py && head b.py") == ("b.py", "a.py")


@pytest.mark.parametrize("command", ["cat 'unclosed", "sed -n", "grep", "cd", "<<EOF", ""])
def test_shell_reads_never_raises_on_odd_input(command: str) -> None:
    assert isinstance(shell_reads(command), tuple)
