"""Thin adapters that plug `ContextEngine` into agent runtimes.

Each module is an optional extra and imports its runtime only when imported
itself: ``context_engine.integrations.langchain`` (``pip install
context-engine[langchain]``), ``.strands``, ``.pydantic_ai`` and
``.openai_agents``. An adapter converts the runtime's messages, calls the
engine, and converts back; it holds no pipeline logic of its own.
"""
