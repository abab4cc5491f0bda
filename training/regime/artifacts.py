"""Versioned model directories (``<root>/<version>/`` + ``model_card.json`` + ``<root>/CURRENT``).

The layout is what ``services/runtime/model_watch.py`` loads: the card names the files,
their sha256 and the feature-schema hash; ``CURRENT`` names the version in use and is
replaced atomically, which is how a running service picks up a new model.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import onnx
import onnxruntime as ort
import orjson

CARD_FILE: Final = "model_card.json"
CURRENT_FILE: Final = "CURRENT"
INPUT_NAME: Final = "input"


class ParityError(RuntimeError):
    """The exported ONNX model does not reproduce the trained model."""


def new_version(tag: str) -> str:
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    return f"{now:%Y%m%d-%H%M%S}-{tag}"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_json(path: Path, payload: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                                 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    tmp.replace(path)


def session(model: onnx.ModelProto | bytes) -> ort.InferenceSession:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])


def save_onnx(model: onnx.ModelProto, path: Path, metadata: dict[str, str]) -> str:
    onnx.helper.set_model_props(model, metadata)
    path.write_bytes(model.SerializeToString())
    return sha256_file(path)


def mean_of_classifiers(models: Sequence[onnx.ModelProto], opset: int) -> onnx.ModelProto:
    """One ONNX graph averaging the probabilities of ``models`` (converted classifiers sharing one input and
    the outputs ``label``, ``probabilities``), with the same two outputs: ``label`` = argmax of the mean. A single
    file, so the loader that runs one classifier runs the ensemble unchanged."""
    if not models:
        raise ValueError("an ensemble needs at least one classifier")
    first = models[0].graph
    if [o.name for o in first.output] != ["label", "probabilities"] or len(first.input) != 1:
        raise ValueError("expected classifiers with one input and the outputs label, probabilities")
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    probabilities: list[str] = []
    for i, model in enumerate(models):
        renamed = onnx.compose.add_prefix(model, f"member{i}_", rename_inputs=False)
        nodes.extend(renamed.graph.node)
        initializers.extend(renamed.graph.initializer)
        probabilities.append(renamed.graph.output[1].name)
    nodes.append(onnx.helper.make_node("Mean", probabilities, ["probabilities"], name="ensemble_mean"))
    nodes.append(onnx.helper.make_node("ArgMax", ["probabilities"], ["label"], axis=1, keepdims=0,
                                       name="ensemble_label"))
    outputs = [onnx.helper.make_tensor_value_info("label", onnx.TensorProto.INT64, [None]),
               onnx.helper.make_tensor_value_info("probabilities", onnx.TensorProto.FLOAT, [None, None])]
    graph = onnx.helper.make_graph(nodes, "mean_of_classifiers", [first.input[0]], outputs, initializers)
    imports = [op for op in models[0].opset_import if op.domain != ""] + [onnx.helper.make_opsetid("", opset)]
    merged = onnx.helper.make_model(graph, opset_imports=imports)
    onnx.checker.check_model(merged)
    return merged


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)))) if len(a) else 0.0


class VersionDir:
    """Build a version in ``<root>/.<version>.partial`` and publish it with one rename."""

    def __init__(self, root: Path, version: str) -> None:
        self.root = root
        self.version = version
        self.final = root / version
        if self.final.exists():
            raise FileExistsError(f"{self.final} already exists; choose another --version")
        self.work = root / f".{version}.partial"
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)

    def publish(self, card: dict[str, Any], *, set_current: bool) -> Path:
        write_json(self.work / CARD_FILE, card)
        self.work.replace(self.final)
        if set_current:
            point_current(self.root, self.version)
        return self.final


def point_current(root: Path, version: str) -> None:
    """Atomically point ``root/CURRENT`` at ``version`` (running services hot-reload on change)."""
    tmp = root / f".{CURRENT_FILE}.{os.getpid()}.tmp"
    tmp.write_text(version + "\n")
    tmp.replace(root / CURRENT_FILE)
