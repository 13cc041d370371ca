"""The ``context-engine`` command: inspect, compact and replay transcripts, and a demo.

Install the ``cli`` extra for tables and a progress bar (``pip install
'context-engine[cli]'``); without ``rich`` the output is plain text. See
docs/cli.md for every command, option and exit code.
"""

from context_engine.cli._app import build_parser, main

__all__ = ["build_parser", "main"]
