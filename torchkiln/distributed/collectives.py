"""Functional collectives in captured graphs (filled in by a later piece)."""
