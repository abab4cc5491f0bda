"""The switch every hand-written fast path sits behind: on only while what it mirrors is unchanged.

A fast path copies rules it does not own: pydantic's strict-JSON validation of one contract,
OpenTelemetry's W3C formatting or its SDK's span construction. A :class:`Mirror` names what was
copied: the library releases it was checked against and, for a contract, the hash of the model's
JSON schema. :func:`enabled` compares them with what is installed; on any difference it logs one
warning and the caller takes the library's own path from then on (slower, never wrong). The unit
tests assert every mirror is enabled here, so an upgrade or a model change fails them until the
copy is re-checked and re-pinned.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata

import orjson

log = logging.getLogger(__name__)


def installed(distribution: str) -> str | None:
    """The installed release of ``distribution`` (None: not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def schema_sha256(schema: Mapping[str, object]) -> str:
    """The hash a mirror pins a model's JSON schema by (keys sorted, so only content counts)."""
    return hashlib.sha256(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True)
class Mirror:
    """What one fast path hand-copies, as it was when its rules were checked."""

    name: str
    versions: Mapping[str, str]
    """Distribution -> the exact release the copied rules were checked against."""
    schema: Callable[[], Mapping[str, object]] | None = None
    """The mirrored model's JSON schema (None: no schema is mirrored)."""
    schema_sha256: str | None = None
    extra: Callable[[], str | None] = field(default=lambda: None)
    """A further check of the fast path's own (e.g. a span made both ways): why it may not run, or None."""

    def problem(self) -> str | None:
        """Why the fast path may not run now (None: everything it mirrors is as pinned)."""
        for distribution, pinned in self.versions.items():
            found = installed(distribution)
            if found != pinned:
                return f"{distribution} {found or 'missing'} is installed, its rules were checked against {pinned}"
        if self.schema is not None:
            found_hash = schema_sha256(self.schema())
            if found_hash != self.schema_sha256:
                return f"the mirrored schema changed (sha256 {found_hash}, pinned {self.schema_sha256})"
        return self.extra()


def enabled(mirror: Mirror) -> bool:
    """Whether ``mirror``'s fast path may run; a warning names the reason when it may not."""
    problem = mirror.problem()
    if problem is not None:
        log.warning("fast path %s off: %s; the library path is used (slower, same results)", mirror.name, problem)
    return problem is None
