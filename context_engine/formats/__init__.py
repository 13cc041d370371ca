"""Converters between provider message formats and `context_engine.Message`."""
