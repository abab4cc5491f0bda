"""End-to-end checks of the compose smoke (scripts/compose-smoke.sh), run from the host against the
ports the smoke publishes: a decision with its proposals on decisions.v1, the referee's ActionResult
for that decision on actions.v1, the decision's trace in the containerised Jaeger and the dashboard
page. Prints one line per check with its duration; exit 1 names the check that failed.

    python infra/compose/smoke_checks.py --bootstrap 127.0.0.1:PORT --jaeger http://127.0.0.1:PORT \
        --dashboard http://127.0.0.1:PORT --timeout 240
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aiokafka import AIOKafkaConsumer

from borgctl.errors import UserError
from borgctl.trace import find_trace_ids
from contracts.codec import ContractError, decode
from contracts.models import ActionResult, Decision

MIN_SERVICES = 5


class CheckError(Exception):
    pass


@dataclass
class Seen:
    decisions: dict[str, Decision] = field(default_factory=dict)
    results: dict[str, ActionResult] = field(default_factory=dict)

    def match(self) -> tuple[Decision, ActionResult] | None:
        # The first decision that weighed proposals and that the referee answered.
        for decision_id, decision in self.decisions.items():
            if decision.proposals and decision_id in self.results:
                return decision, self.results[decision_id]
        return None


def _ok(name: str, started: float, detail: str) -> None:
    print(f"  ok   {name:<34} {time.monotonic() - started:6.1f} s  {detail}", flush=True)


async def decision_and_action(bootstrap: str, prefix: str, deadline: float) -> tuple[Decision, ActionResult]:
    decisions, actions = f"{prefix}decisions.v1", f"{prefix}actions.v1"
    consumer = AIOKafkaConsumer(
        decisions,
        actions,
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    seen = Seen()
    try:
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    try:
                        if record.topic == decisions:
                            decision = decode(Decision, record.value)
                            seen.decisions.setdefault(decision.decision_id, decision)
                        else:
                            result = decode(ActionResult, record.value)
                            seen.results.setdefault(result.decision_id, result)
                    except ContractError as exc:
                        raise CheckError(f"{record.topic}: a record that breaks its contract: {exc}") from None
            found = seen.match()
            if found is not None:
                return found
    finally:
        await consumer.stop()
    raise CheckError(
        f"no decision with proposals and an ActionResult in time: {len(seen.decisions)} decisions, "
        f"{len(seen.results)} action results seen"
    )


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        data: dict[str, Any] = json.load(response)
        return data


def trace_services(jaeger: str, decision_id: str, deadline: float) -> tuple[str, set[str]]:
    # Spans arrive in batches from every service: poll until the decision's trace holds enough of them.
    best: tuple[str, set[str]] = ("", set())
    while time.monotonic() < deadline:
        for trace_id in find_trace_ids(jaeger, decision_id, lookback="1h"):
            for trace in _get_json(f"{jaeger}/api/traces/{trace_id}").get("data") or []:
                services = {process["serviceName"] for process in trace.get("processes", {}).values()}
                if len(services) > len(best[1]):
                    best = (trace_id, services)
        if len(best[1]) >= MIN_SERVICES:
            return best
        time.sleep(2)
    raise CheckError(
        f"trace of decision {decision_id}: {len(best[1])} services {sorted(best[1])}, want >= {MIN_SERVICES}"
    )


def dashboard_page(url: str, deadline: float) -> int:
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/", timeout=10) as response:
                body = response.read().decode("utf-8", "replace")
            if "<title>borg-orchestrator" in body:
                return len(body)
            last = "the page has no borg-orchestrator title"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(1)
    raise CheckError(f"dashboard {url}/: {last}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--jaeger", required=True)
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--prefix", default="")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds for each check")
    args = parser.parse_args(argv)
    step = "decision + ActionResult"
    try:
        started = time.monotonic()
        decision, result = asyncio.run(decision_and_action(args.bootstrap, args.prefix, started + args.timeout))
        _ok(
            "decision on decisions.v1",
            started,
            f"{decision.decision_id} action={decision.action} proposals={len(decision.proposals)} mode={decision.mode}",
        )
        print(f"  ok   {'ActionResult on actions.v1':<34} {'':>8}  outcome={result.outcome}", flush=True)
        step = "trace in Jaeger"
        started = time.monotonic()
        trace_id, services = trace_services(args.jaeger, decision.decision_id, started + args.timeout)
        _ok("trace in the compose Jaeger", started, f"{trace_id}: {len(services)} services {sorted(services)}")
        step = "dashboard page"
        started = time.monotonic()
        size = dashboard_page(args.dashboard, started + args.timeout)
        _ok("dashboard page", started, f"{size} bytes")
    except (CheckError, UserError, urllib.error.URLError, OSError) as exc:
        print(f"  FAIL {step}: {exc}", flush=True)
        return 1
    print(f"DECISION_ID={decision.decision_id}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
