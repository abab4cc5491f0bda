"""`borgctl trace` renders Jaeger's trace JSON as a tree with durations and links."""

from __future__ import annotations

from borgctl.trace import build_tree, render

TRACE = {
    "traceID": "t1",
    "processes": {
        "p1": {"serviceName": "node-agent"},
        "p2": {"serviceName": "features"},
        "p3": {"serviceName": "referee"},
    },
    "spans": [
        {
            "spanID": "a",
            "operationName": "nodestate.v1 publish",
            "processID": "p1",
            "startTime": 1_000_000,
            "duration": 1500,
            "tags": [{"key": "borg.node.name", "value": "n1"}],
            "references": [],
        },
        {
            "spanID": "b",
            "operationName": "nodestate.v1 process",
            "processID": "p2",
            "startTime": 1_002_000,
            "duration": 800,
            "tags": [],
            "references": [{"refType": "CHILD_OF", "traceID": "t1", "spanID": "a"}],
        },
        {
            "spanID": "c",
            "operationName": "referee decide",
            "processID": "p3",
            "startTime": 1_010_000,
            "duration": 2500,
            "tags": [{"key": "borg.decision.id", "value": "d-1"}],
            "references": [
                {"refType": "CHILD_OF", "traceID": "t1", "spanID": "b"},
                {"refType": "FOLLOWS_FROM", "traceID": "t9", "spanID": "zz"},
            ],
        },
    ],
}


def test_tree_shape_durations_and_links() -> None:
    roots = build_tree(TRACE)
    assert [r.span_id for r in roots] == ["a"]
    assert roots[0].children[0].children[0].links == ["t9…/zz"]
    lines = render(roots)
    assert lines[0].startswith("node-agent: nodestate.v1 publish  [1.50 ms @+0.0 ms]")
    assert "borg.node.name=n1" in lines[0]
    assert lines[1].startswith("└─ features: nodestate.v1 process  [0.80 ms @+2.0 ms]")
    assert "referee: referee decide  [2.50 ms @+10.0 ms] links=1" in lines[2]
    assert "borg.decision.id=d-1" in lines[2]
