"""``python -m context_engine.cli``: the same as the ``context-engine`` command."""

from context_engine.cli._app import main

raise SystemExit(main())
