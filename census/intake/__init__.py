"""Intake: reading a config, resolving it into transformers' config objects, and every refusal
that needs no model (bounds, remote code, training fields). Nothing here builds a module."""
