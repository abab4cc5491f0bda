"""Errors a user can fix; the CLI prints them as one line and exits with code 2."""

from __future__ import annotations


class UserFacingError(Exception):
    """Base class: bad input data, bad paths, bad arguments."""


class IngestError(UserFacingError):
    """A problem with the input part files (names the file, and the line when there is one)."""


class ModelDirError(UserFacingError):
    """The model path is not a usable model directory (or does not fit this code)."""


class DataError(UserFacingError):
    """The data is readable but unusable for the request (e.g. nothing to predict)."""
