"""Generate (or check) the committed JSON Schemas of every registered topic.

    python -m contracts.schemagen          # rewrite contracts/schemas/*.json
    python -m contracts.schemagen --check  # exit 1 when a committed schema is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from contracts.topics import TOPICS

SCHEMA_DIR = Path(__file__).parent / "schemas"


def render(topic: str) -> bytes:
    spec = next(s for s in TOPICS if s.name == topic)
    schema = spec.model.model_json_schema(mode="validation")
    schema["$id"] = f"borg-orchestrator/{spec.name}"
    schema["x-topic"] = {"name": spec.name, "key": spec.key, "cleanup.policy": spec.cleanup_policy}
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def stale() -> list[str]:
    return [
        s.name for s in TOPICS
        if not (SCHEMA_DIR / f"{s.name}.json").exists()
        or (SCHEMA_DIR / f"{s.name}.json").read_bytes() != render(s.name)
    ]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = stale()
        for name in bad:
            print(f"contracts/schemas/{name}.json is stale: run `python -m contracts.schemagen`")
        return 1 if bad else 0
    SCHEMA_DIR.mkdir(exist_ok=True)
    for spec in TOPICS:
        (SCHEMA_DIR / f"{spec.name}.json").write_bytes(render(spec.name))
    print(f"wrote {len(TOPICS)} schemas to {SCHEMA_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
