"""Which line of a failed command's output `outcome` quotes as its key line."""

from __future__ import annotations

import pytest

from context_engine.messages import Message, ToolCall
from context_engine.strategies._placeholder import describe
from context_engine.summarize.outcome import outcome

TRACEBACK_THEN_OUTPUT = """<returncode>1</returncode>
<output>
Running reproduction...
Traceback (most recent call last):
  File "/repo/reproduce.py", line 12, in <module>
    result = manager.infer(node)
  File "/repo/astroid/manager.py", line 88, in infer
    return self._cache[node](context=ctx)
           ~~~~~~~~~~~~~~~~^^^^^^^^^^^^^
TypeError: _infer() got an unexpected keyword argument 'context'
Cleaning up...
  Error: AstroidManager could not clear its cache
  ERROR: 1 check(s) left unfinished
</output>"""

PYTEST_FAILURE = """<returncode>1</returncode>
<output>
============================= test session starts ==============================
collected 2 items

tests/test_dates.py .F                                                   [100%]

=================================== FAILURES ===================================
________________________________ test_parse_iso ________________________________

    def test_parse_iso():
>       assert parse("2024-01-01") == date(2024, 1, 2)
E       AssertionError: assert datetime.date(2024, 1, 1) == datetime.date(2024, 1, 2)
E        +  where datetime.date(2024, 1, 1) = parse('2024-01-01')

tests/test_dates.py:8: AssertionError
=========================== short test summary info ============================
FAILED tests/test_dates.py::test_parse_iso - AssertionError: assert datetime.date(2024, 1, 1)...
========================= 1 failed, 1 passed in 0.04s ==========================
</output>"""

PYTEST_BARE_ASSERT = """<returncode>1</returncode>
tests/test_add.py::test_add FAILED                                       [100%]

=================================== FAILURES ===================================
___________________________________ test_add ___________________________________

    def test_add():
>       assert add(1, 2) == 4
E       assert 3 == 4
E        +  where 3 = add(1, 2)

tests/test_add.py:5: AssertionError
========================= 1 failed in 0.02s ========================="""

COMMAND_NOT_FOUND = """<returncode>127</returncode>
<output>
bash: line 1: pytets: command not found
</output>"""

COMPILER_ERROR = """<returncode>1</returncode>
<output>
src/main.c: In function 'main':
src/main.c:4:13: warning: unused variable 'n' [-Wunused-variable]
src/main.c:7:5: error: expected ';' before 'return'
make: *** [Makefile:3: main] Error 1
</output>"""

TRACEBACK_BEHIND_LOG_PREFIX = """\
2026-01-02 10:00:01 ERROR worker: Traceback (most recent call last):
  File "/app/worker.py", line 40, in run
    job.execute()
app.errors.JobFailed: job 17 timed out
2026-01-02 10:00:02 ERROR worker: giving up after 3 attempts"""

TRACEBACK_CUT_SHORT = """<returncode>1</returncode>
Traceback (most recent call last):
  File "/repo/run.py", line 3, in <module>
[5120 characters trimmed]
  ValueError: not the exception line, but the last one there is"""

TRACEBACKS_CUT_BY_HEAD = """<returncode>0</returncode>
<output>
=== Testing: select 1;; ===
Traceback (most recent call last):
  File "/usr/bin/sqlfluff", line 33, in <module>
    sys.exit(main())
  File "/usr/lib/python3.11/site-packages/click/core.py", line 1485, in __call__
=== Testing: ;; ===
== [stdin] FAIL
=== Testing: select 1;;; ===
Traceback (most recent call last):
  File "/usr/bin/sqlfluff", line 33, in <module>
    sys.exit(main())
  File "/usr/lib/python3.11/site-packages/click/core.py", line 1406, in main
</output>"""


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (TRACEBACK_THEN_OUTPUT, "TypeError: _infer() got an unexpected keyword argument 'context'"),
        (
            PYTEST_FAILURE,
            "E AssertionError: assert datetime.date(2024, 1, 1) == datetime.date(2024, 1, 2)",
        ),
        (PYTEST_BARE_ASSERT, "E assert 3 == 4"),
        (COMMAND_NOT_FOUND, "bash: line 1: pytets: command not found"),
        (COMPILER_ERROR, "src/main.c:7:5: error: expected ';' before 'return'"),
        (TRACEBACK_BEHIND_LOG_PREFIX, "app.errors.JobFailed: job 17 timed out"),
        (TRACEBACK_CUT_SHORT, "ValueError: not the exception line, but the last one there is"),
        (
            TRACEBACKS_CUT_BY_HEAD,
            'File "/usr/lib/python3.11/site-packages/click/core.py", line 1406, in main',
        ),
    ],
    ids=[
        "traceback-then-more-output",
        "pytest-failure-summary",
        "pytest-bare-assert",
        "command-not-found",
        "compiler-error",
        "traceback-behind-log-prefix",
        "traceback-cut-short",
        "output-ends-inside-a-traceback",
    ],
)
def test_a_failure_quotes_the_line_that_says_what_went_wrong(text: str, key: str) -> None:
    ended = outcome(Message.tool("c", text, name="bash"))
    assert ended.failed
    assert ended.key_line == key


def test_a_cleared_traceback_keeps_its_exception_line_not_the_log_after_it() -> None:
    """The placeholder left for a traceback followed by more output quotes what was raised."""
    call = ToolCall("c", "bash", '{"command": "python reproduce.py"}')
    placeholder = describe(call, Message.tool("c", TRACEBACK_THEN_OUTPUT, name="bash"))
    assert "key line: TypeError: _infer() got an unexpected keyword argument" in placeholder
    assert "AstroidManager" not in placeholder
