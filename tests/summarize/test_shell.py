"""The shell-write parser: which files a command creates, changes or deletes."""

from __future__ import annotations

from pathlib import Path

import pytest

from context_engine.formats.openai import from_openai
from context_engine.summarize.shell import command_text, python_writes, shell_writes
from tests.conftest import load_corpus_dicts

HEREDOC_PATCH = """git apply <<'EOF'
--- a/src/m.py
+++ b/src/m.py
@@ -1 +1 @@
-a
+b
EOF"""

WRITES = [
    ("cd /testbed && sed -i 's/np\\.Inf/np.inf/g' astropy/utils/shapes.py",
     ("/testbed/astropy/utils/shapes.py",), "issue-sed-after-cd"),
    ("sed -i 's/x/y/' astropy/utils/shapes.py", ("astropy/utils/shapes.py",), "sed-i"),
    ("sed -i.bak -e 's/a/b/' -e 's/c/d/' x.py y.py", ("x.py", "y.py"), "sed-i-suffix-two-files"),
    ("sed --in-place=.orig 's/a/b/' x.py", ("x.py",), "sed-in-place-long"),
    ("sed -Ei '12 i import logging' src/L003.py", ("src/L003.py",), "sed-combined-flags"),
    ("sed 's/a/b/' f.py > g.py", ("g.py",), "sed-to-redirect"),
    ("cat > reproduce.py << 'EOF'\nimport x\nprint('a > b.py')\nEOF", ("reproduce.py",),
     "heredoc-cat-body-not-parsed"),
    ("cat <<EOF > conf.ini\n[a]\nEOF\npython run.py", ("conf.ini",), "heredoc-before-redirect"),
    ("cat <<-EOF >> notes.md\n\tline\n\tEOF", ("notes.md",), "heredoc-strip-tabs-append"),
    ("echo 'x' >> log.txt 2>&1", ("log.txt",), "echo-append-with-dup"),
    ("echo \"import os\" > src/project/file.py", ("src/project/file.py",), "echo-redirect"),
    ("pytest tests 2> err.log", ("err.log",), "stderr-to-file"),
    ("echo hi | tee -a a.txt b.txt", ("a.txt", "b.txt"), "tee-append-two"),
    ("python -c \"open('out.txt', 'w').write('x')\"", ("out.txt",), "python-c-open-w"),
    ("python3 - <<'EOF'\nfrom pathlib import Path\nPath('a/b.py').write_text('x')\nEOF",
     ("a/b.py",), "python-stdin-heredoc-path-write"),
    ("python -c \"p = 'src/x.py'\ns = open(p).read()\nopen(p, 'w').write(s)\"", ("src/x.py",),
     "python-name-bound-to-literal"),
    (HEREDOC_PATCH, ("src/m.py",), "git-apply-heredoc"),
    ("patch src/a.py fix.diff", ("src/a.py",), "patch-original-file-named"),
    ("patch -p1 <<'EOF'\n--- a/lib/c.py\n+++ b/lib/c.py\nEOF", ("lib/c.py",), "patch-heredoc"),
    ("mv a.py b.py", ("b.py", "a.py"), "mv-target-and-source"),
    ("cp pvlib/iam.py pvlib/iam.py.backup", ("pvlib/iam.py.backup",), "cp-target"),
    ("cp a.py b.py dir/", ("dir/a.py", "dir/b.py"), "cp-into-directory"),
    ("cp -t dest a.py", ("dest/a.py",), "cp-target-directory-option"),
    ("touch src/__init__.py", ("src/__init__.py",), "touch"),
    ("rm reproduce_bug.py\n", ("reproduce_bug.py",), "rm-is-a-deletion"),
    ("rm -f -- -weird.py", ("-weird.py",), "rm-after-double-dash"),
    ("perl -pi -e 's/a/b/' f.pl", ("f.pl",), "perl-pi"),
    ("perl -i.bak -pe 's/a/b/' f.pl g.pl", ("f.pl", "g.pl"), "perl-i-suffix"),
    ("cd /tmp && rm -rf r && mkdir -p r/src && touch r/src/__init__.py && cd r && echo x > a.py",
     ("/tmp/r", "/tmp/r/src/__init__.py", "/tmp/r/a.py"), "cd-chain"),
    ("cd src; sed -i 's/a/b/' ../setup.cfg", ("setup.cfg",), "cd-then-parent-path"),
    ("bash -lc \"sed -i 's/x/y/' z.py\"", ("z.py",), "bash-lc-nested"),
    ("git checkout -- src/a.py", ("src/a.py",), "git-checkout-restores"),
    ("git rm old.py && git mv a.py b.py", ("old.py", "b.py", "a.py"), "git-rm-and-mv"),
    ("FOO=1 sudo tee /etc/hosts < /dev/null", ("/etc/hosts",), "assignment-and-sudo-prefix"),
    ("git diff -- src/f.py > patch.txt", ("patch.txt",), "git-diff-to-file"),
    ("sed -n '142,300p' L003.py > /tmp/p.txt && cat /tmp/p.txt", ("/tmp/p.txt",),
     "read-into-file"),
    ("ls \\\n  > listing.txt", ("listing.txt",), "continued-line"),
]  # fmt: skip

READS = [
    ("cat f.py", "cat"),
    ("grep -rn 'x > y' src/f.py", "grep-quoted-redirect"),
    ("sed -n '1,20p' f.py", "sed-n"),
    ("sed 's/a/b/' f.py", "sed-to-stdout"),
    ("perl -ne 'print if /x/' f.pl", "perl-no-i"),
    ("python -m pytest tests -x 2>&1 | tail -50", "pytest-dup-and-pipe"),
    ("python x.py > /dev/null 2>&1", "dev-null"),
    ("ls >&2", "dup-to-stderr"),
    ("find . -name '*.py' | xargs grep -l foo", "find-xargs"),
    ("python -c \"print(open('f.py').read())\"", "python-open-read"),
    ("python -c \"items.remove('a.py'); s.replace('a', 'b.py')\"", "python-list-and-str-methods"),
    ("for f in *.py; do sed -i 's/a/b/' $f; done", "glob-and-variable-unknown"),
    ("echo 'unbalanced > x.py", "unbalanced-quote"),
    ("git apply fix.patch", "patch-text-unseen"),
    ("git status && git diff", "git-read"),
    ("# echo x > y.py", "comment"),
    ("", "empty"),
]


@pytest.mark.parametrize(("command", "expected"), [row[:2] for row in WRITES],
                         ids=[row[2] for row in WRITES])  # fmt: skip
def test_a_command_that_writes_names_its_files(command: str, expected: tuple[str, ...]) -> None:
    """Every write form of the table is found, in first-seen order, and nothing else."""
    assert shell_writes(command).modified == expected


@pytest.mark.parametrize("command", [row[0] for row in READS], ids=[row[1] for row in READS])
def test_a_command_that_only_reads_names_no_file(command: str) -> None:
    """Reads, searches, test runs, unknown values and descriptors are not writes."""
    assert shell_writes(command).modified == ()


def test_a_script_written_earlier_counts_what_it_writes_when_run() -> None:
    """``cat > fix.py <<EOF`` shows the script; ``python fix.py`` later writes its files."""
    written = shell_writes(
        "cat > fix.py << 'EOF'\nwith open('src/f.py', 'w') as f:\n    f.write('x')\nEOF"
    )
    assert written.modified == ("fix.py",)
    assert shell_writes("python fix.py").modified == ()
    assert shell_writes("python fix.py", scripts=written.contents).modified == ("src/f.py",)


def test_a_patch_file_written_earlier_names_its_files_when_applied() -> None:
    """The patch file's headers are the files ``git apply`` modifies."""
    written = shell_writes("cat > fix.patch <<'EOF'\n--- a/m.py\n+++ b/m.py\nEOF")
    assert shell_writes("git apply fix.patch", scripts=written.contents).modified == ("m.py",)


def test_paths_are_joined_with_a_literal_cd_only() -> None:
    """An unknown directory leaves the paths as written."""
    assert shell_writes("cd $HOME && touch a").modified == ("a",)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("edit_file_by_replace(\n'/workspace/src/App.css',\nto_replace='a', new_content='b')",
         ("/workspace/src/App.css",)),
        ("import shutil, os\nshutil.copy('a.py', 'b.py')\nos.remove('c.py')", ("b.py", "c.py")),
        ("from pathlib import Path\nPath('a.txt').rename('b.txt')", ("a.txt", "b.txt")),
        ("with open('x.py', mode='a') as f:\n    f.write('y')", ("x.py",)),
        ("!sed -i s/a/b/ q.py\nprint(1)", ("q.py",)),
        ("open('broken.py', 'w').write(\n", ("broken.py",)),
        ("with open('f.py') as f:\n    print(f.read())", ()),
    ],
    ids=["openhands-skill", "os-and-shutil", "path-rename", "open-mode-keyword",
         "ipython-shell-line", "unparsable-falls-back-to-patterns", "read-only"],
)  # fmt: skip
def test_python_code_writes(code: str, expected: tuple[str, ...]) -> None:
    """Python writes are read from the syntax tree, or from patterns when it does not parse."""
    assert python_writes(code) == expected


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"command": "ls -la"}, "ls -la"),
        ({"cmd": "pwd"}, "pwd"),
        ({"command": ["bash", "-lc", "sed -i s/a/b/ f"]}, "sed -i s/a/b/ f"),
        ({"command": ["rm", "my file"]}, "rm 'my file'"),
        ({"commands": ["cd src", "touch a"]}, "cd src\ntouch a"),
        ({"code": "print(1)"}, "print(1)"),
        ("raw free-form text", "raw free-form text"),
        ({"command": 3}, None),
        ({}, None),
    ],
    ids=["command", "cmd", "argv-shell-c", "argv", "list-of-commands", "code", "raw", "not-text",
         "none"],
)  # fmt: skip
def test_command_text_covers_the_argument_shapes(
    arguments: dict[str, object] | str, expected: str | None
) -> None:
    """The shapes shell and Python tools pass their command in."""
    assert command_text(arguments) == expected


@pytest.mark.parametrize(
    "command",
    ["'", '"', "<<", "cat <<EOF", "> ", "2>", "\\", "$(", "echo `", "a && || ; |", "\x00>\x01"],
)
def test_odd_text_never_raises(command: str) -> None:
    """Whatever the text, the parser answers."""
    assert isinstance(shell_writes(command).modified, tuple)


def test_corpus_shell_commands_parse_deterministically(corpus_path: Path) -> None:
    """Every shell call of the corpus parses twice to the same answer."""
    for message in from_openai(load_corpus_dicts(corpus_path)):
        for call in message.tool_calls:
            text = command_text(call.arguments)
            if text is not None:
                assert shell_writes(text) == shell_writes(text)
