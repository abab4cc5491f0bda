"""`borgctl bench {pipeline,inference,agent,referee,extender,tracing,stages,restore,reference,all} [--quick]`.

Every benchmark shares this harness and writes the one result format
(`loadtests.bench_format`), with reference ceilings measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtests.bench_format import Result, write_results

# Each bench module is imported when its benchmark runs (some pull in onnxruntime, xgboost or
# the Kubernetes client), with plain imports so that import-linter sees every edge.


def _pipeline(quick: bool, bootstrap: str) -> list[Any]:
    from loadtests.bench_pipeline import run_pipeline_bench

    return run_pipeline_bench(quick, bootstrap)


def _inference(quick: bool, bootstrap: str) -> list[Any]:
    from loadtests.bench_inference import run_inference_bench

    return run_inference_bench(quick)


def _agent(quick: bool, bootstrap: str) -> list[Any]:
    from loadtests.bench_agent import run_agent_bench

    return run_agent_bench(quick)


def _referee(quick: bool, bootstrap: str) -> list[Any]:
    from loadtests.bench_referee import run_referee_bench

    return run_referee_bench(quick, bootstrap)


def _extender(quick: bool, bootstrap: str) -> list[Any]:
    from loadtests.bench_extender import run_extender_bench

    return run_extender_bench(quick)


def _tracing(quick: bool, bootstrap: str) -> list[Any]:
    from loadtests.bench_tracing import run_tracing_bench

    return run_tracing_bench(quick, bootstrap)


def _stages(quick: bool, bootstrap: str) -> list[Any]:
    from loadtests.bench_stages import run_stages_bench

    return run_stages_bench(quick, bootstrap)


def _restore(quick: bool, bootstrap: str) -> list[Any]:
    from loadtests.bench_restore import run_restore_bench

    return run_restore_bench(quick, bootstrap)


BENCHES: dict[str, Callable[[bool, str], list[Any]]] = {
    "pipeline": _pipeline,
    "inference": _inference,
    "agent": _agent,
    "referee": _referee,
    "extender": _extender,
    "tracing": _tracing,
    "stages": _stages,
    "restore": _restore,
}


def _rows(results: list[Any]) -> list[dict[str, Any]]:
    return [r.row() if isinstance(r, Result) else dict(r) for r in results]


def _run_one(name: str, quick: bool, bootstrap: str) -> list[dict[str, Any]]:
    print(f"bench {name}: running{' (quick)' if quick else ''}", file=sys.stderr, flush=True)
    started = time.monotonic()
    rows = _rows(BENCHES[name](quick, bootstrap))
    print(f"bench {name}: {len(rows)} results in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="borgctl bench", description=__doc__)
    parser.add_argument("which", choices=[*BENCHES, "reference", "all"])
    parser.add_argument("--quick", action="store_true", help="a run under two minutes per benchmark")
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    parser.add_argument(
        "--bootstrap", default=None, help="Kafka bootstrap (default $KAFKA_BOOTSTRAP or 127.0.0.1:9092)"
    )
    parser.add_argument("--no-reference", action="store_true", help="skip the Kafka/aiokafka reference ceilings")
    args = parser.parse_args(argv)
    from borgctl.paths import bootstrap as default_bootstrap

    bootstrap = args.bootstrap or default_bootstrap()
    rows: list[dict[str, Any]] = []
    needs_broker = args.which in ("pipeline", "referee", "tracing", "reference", "all")
    if needs_broker and not args.no_reference:
        from loadtests.bench_reference import kafka_native, passthrough

        print("bench reference: Kafka's own producer/consumer perf and raw aiokafka pass-through", file=sys.stderr)
        try:
            rows += _rows(kafka_native(bootstrap, args.quick))
            rows += _rows(passthrough(bootstrap, args.quick))
        except Exception as exc:  # report, then still run the benchmark itself
            print(f"bench reference: failed: {exc}", file=sys.stderr)
    names = list(BENCHES) if args.which == "all" else ([] if args.which == "reference" else [args.which])
    for name in names:
        rows += _run_one(name, args.quick, bootstrap)
    write_results(args.out, rows)
    for row in rows:
        print(f"{row['bench']:<10} {row['case']:<28} {row['metric']:<12} {row['value']:>12.2f} {row['unit']}")
    print(f"wrote {len(rows)} results to {args.out}", file=sys.stderr)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
