"""The Q-table as ONNX: one ``ai.onnx.ml`` LabelEncoder (state key string → Q value, unseen → the mean).

A tabular Q-function is a lookup, which LabelEncoder is exactly; a service scores a pod's candidates by
feeding their state keys (:func:`simulator.arena.learned.state_key`) as one string tensor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from simulator.arena.learned import PlacementModel


def export_onnx(model: PlacementModel, path: Path) -> None:
    keys = sorted(model.values)
    node = helper.make_node("LabelEncoder", ["state_key"], ["q"], domain="ai.onnx.ml",
                            keys_strings=keys, values_floats=[model.values[k] for k in keys],
                            default_float=model.q("\0"))
    graph = helper.make_graph([node], "placement_q_table",
                              [helper.make_tensor_value_info("state_key", TensorProto.STRING, ["N"])],
                              [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["N"])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)],
                              producer_name="borg-orchestrator training.placement")
    proto.ir_version = 8
    onnx.checker.check_model(proto)
    path.write_bytes(proto.SerializeToString())


def onnx_q(path: Path, keys: list[str]) -> np.ndarray:
    """Q values of ``keys`` through onnxruntime (the parity check and what a service would call)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: np.ndarray = sess.run(["q"], {"state_key": np.asarray(keys, dtype=object)})[0]
    return out


def parity_error(model: PlacementModel, path: Path) -> float:
    """Largest |ONNX − table| over every key and one unseen key (float32 rounding only)."""
    keys = [*sorted(model.values), "unseen|key"]
    want = np.asarray([model.q(k) for k in keys], dtype=np.float64)
    return float(np.abs(onnx_q(path, keys).astype(np.float64) - want).max())
