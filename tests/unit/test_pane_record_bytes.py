"""A closed pane's changelog record is the bytes ``PANE_BODY.pack`` gave, for every double (NaN payloads too)."""

from __future__ import annotations

import struct

import numpy as np

from featurelib.node.panes import PANE_BODY, PANE_HEAD
from featurelib.node.schema import M
from featurelib.node.windows import RING, NodeWindows, _NodeState


def test_pane_record_is_the_struct_packing_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    ring = rng.normal(scale=1e6, size=(RING, 3, M))
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1.7976931348623157e308,
                struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\x7f")[0]]  # a NaN with a payload
    ring[1].flat[: len(specials)] = specials
    meta = np.array([[i, 10, 1_700_000_000_000 + i, 10] for i in range(RING)], dtype=np.int64)
    st = _NodeState(None, [], [], ring, meta)
    for slot in range(RING):
        want = PANE_HEAD.pack(*meta[slot].tolist()) + PANE_BODY.pack(*ring[slot].ravel().tolist())
        assert NodeWindows._pane_record(st, slot) == want
