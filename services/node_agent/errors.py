"""Errors about recorded input, always naming the file and line."""

from __future__ import annotations


class InputLineError(ValueError):
    """A line of recorded input that cannot be used: ``<file>:<line>: <reason>[: 'text']``."""

    def __init__(self, path: str, line: int, reason: str, text: str = "") -> None:
        snippet = text.strip()
        if len(snippet) > 80:
            snippet = snippet[:77] + "..."
        message = f"{path}:{line}: {reason}" + (f": {snippet!r}" if snippet else "")
        super().__init__(message)
        self.path = path
        self.line = line
        self.reason = reason
