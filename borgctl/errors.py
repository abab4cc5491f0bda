"""User-facing errors: one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix (bad argument, missing file, stack not running)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
