"""``borgctl eval arena [--live]``: the offline arena (simulator/arena) or the live one (loadtests/arena_live)."""

from __future__ import annotations

from collections.abc import Sequence


def eval_arena(argv: Sequence[str]) -> int:
    args = list(argv)
    if "--live" in args:
        from loadtests.arena_live.run import main as live

        args.remove("--live")
        return live(args)
    from simulator.arena.cli import eval_arena as offline

    return offline(args)
