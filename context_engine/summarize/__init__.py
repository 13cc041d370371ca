"""Helpers shared by the checkpoint strategies: cut points, serialisation, summarizers."""
