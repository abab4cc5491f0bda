"""orjson encoding and strict decoding of wire models, with errors that name the field."""

from __future__ import annotations

from typing import TypeVar

import orjson
from pydantic import ValidationError

from contracts.base import Contract

M = TypeVar("M", bound=Contract)


class ContractError(ValueError):
    """A value that is not valid JSON (`malformed`) or not a valid model (`schema`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def encode(model: Contract) -> bytes:
    return orjson.dumps(model.model_dump(mode="json"))


def _describe(error: ValidationError, model: type[Contract]) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "<root>"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - 5
    suffix = f" (+{more} more)" if more > 0 else ""
    return f"{model.__name__}: " + "; ".join(parts) + suffix


def decode(model: type[M], data: bytes | None) -> M:
    """Parse and validate one message value; raise ContractError naming the bad field."""
    if data is None:
        raise ContractError("malformed", f"{model.__name__}: empty value (tombstone)")
    try:
        # pydantic-core parses JSON itself (one pass, strict types, JSON spellings
        # such as arrays for tuples); a parse failure is reported as malformed.
        return model.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            detail = first.get("ctx", {}).get("error", first["msg"])
            raise ContractError("malformed", f"{model.__name__}: invalid JSON: {detail}") from None
        raise ContractError("schema", _describe(exc, model)) from None


def validate_python(model: type[M], obj: object) -> M:
    """Validate an already-parsed object (used by producers building messages from dicts)."""
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise ContractError("schema", _describe(exc, model)) from None
