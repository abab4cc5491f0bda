"""The compact isolation-forest graph built at load: same scores as the skl2onnx graph, or a fallback."""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import orjson
import pytest
from onnx import TensorProto, helper

from featurelib.node.schema import N_FEATURES
from services.anomaly import compact_forest
from services.anomaly.model import AnomalyModel, load_anomaly_model
from services.runtime.model_watch import onnx_session, resolve

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-6


@pytest.fixture(scope="module")
def trained(quick_anomaly_model: Path) -> Path:
    return resolve(quick_anomaly_model)  # `train anomaly --quick`, once per session (tests/conftest.py)


def forest_path(version_dir: Path) -> Path:
    card = orjson.loads((version_dir / "model_card.json").read_bytes())
    name: str = card["onnx"]["files"]["forest"]
    return version_dir / name


def fresh_rows(n: int, seed: int) -> np.ndarray:
    """Full feature rows: values on several scales, some NaNs, an all-NaN and an all-zero row."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.integers(-2, 3, size=N_FEATURES)
    x = (rng.lognormal(0.0, 1.0, size=(n, N_FEATURES)) * scale).astype(np.float32)
    x[rng.random(x.shape) < 0.15] = np.nan
    x[0] = np.nan
    x[1] = 0.0
    return x


def original_scores(model: AnomalyModel, version_dir: Path, x_full: np.ndarray) -> np.ndarray:
    """What the service computed before: the shipped graph's scores, oriented and clipped."""
    session = onnx_session(forest_path(version_dir))
    _, scores = session.run(None, {model.input_name: np.ascontiguousarray(x_full[:, model.columns])})
    return np.asarray(np.clip(-(np.asarray(scores, dtype=np.float64).reshape(-1) + model.offset), 0.0, 1.0))


def assert_compact_matches(version_dir: Path, seed: int) -> AnomalyModel:
    model = load_anomaly_model(version_dir)
    assert model.compact
    assert [o.name for o in model.session.get_outputs()] == [model.output_name] == ["scores"]  # compact: no label
    x = fresh_rows(3000, seed)
    (got,) = model(x)
    want = original_scores(model, version_dir, x)
    assert got.shape == want.shape == (3000,)
    assert np.all(np.isfinite(got))
    assert float(np.max(np.abs(got - want))) <= TOL
    # the raw graph output too (before the orientation and the clip), in small batches as the service runs it
    session = onnx_session(forest_path(version_dir))
    cols = np.ascontiguousarray(x[:, model.columns])
    for lo in (0, 20, 250):
        raw_want = session.run([model.output_name], {model.input_name: cols[lo:lo + 20]})[0]
        raw_got = model.session.run([model.output_name], {model.input_name: cols[lo:lo + 20]})[0]
        assert compact_forest.max_abs_diff(raw_want, raw_got) <= TOL
    return model


def assert_leaf_weights_are_path_lengths(path: Path) -> None:
    """Independent of the converter: each leaf weight = path length + c(n_samples_in_leaf) - 1 (sklearn)."""
    original = onnx.load(path)
    compact = compact_forest.compact_model(original, output_name="scores")
    encoders = {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute}
                for n in original.graph.node if n.op_type == "LabelEncoder"}
    (tree,) = [n for n in compact.graph.node if n.op_type == "TreeEnsembleRegressor"]
    attrs = {a.name: helper.get_attribute_value(a) for a in tree.attribute}
    weights = {(int(t), int(n)): float(w) for t, n, w in
               zip(attrs["target_treeids"], attrs["target_nodeids"], attrs["target_weights"], strict=True)}

    def c(n: float) -> float:
        return 2.0 * (np.log(n - 1.0) + np.euler_gamma) - 2.0 * (n - 1.0) / n if n > 2 else float(n == 2)

    # compact tree k = the k-th TreeEnsembleRegressor of the original graph
    order = [n.name for n in original.graph.node if n.op_type == "TreeEnsembleRegressor"]
    for t in (0, 7):  # skl2onnx names: node_sample<t>_LabelEncoder (samples), path_length<t>_LabelEncoder (depth)
        k = order.index(f"node_sample{t}_TreeEnsembleRegressor")
        ns = encoders[f"node_sample{t}_LabelEncoder"]
        pl = encoders[f"path_length{t}_LabelEncoder"]
        assert ns["keys_int64s"] == pl["keys_int64s"]
        assert sorted(n for (tree_id, n) in weights if tree_id == k) == sorted(ns["keys_int64s"])
        for leaf, n, depth in zip(ns["keys_int64s"], ns["values_floats"], pl["values_floats"], strict=True):
            assert weights[(k, int(leaf))] == pytest.approx(depth + c(n) - 1.0, abs=1e-5)


def test_trained_model_uses_the_compact_graph_and_matches(trained: Path) -> None:
    model = assert_compact_matches(trained, seed=1)
    assert model.threshold > 0
    assert_leaf_weights_are_path_lengths(forest_path(trained))


def test_compact_graph_is_one_ensemble_with_the_imputer(trained: Path) -> None:
    original = onnx.load(forest_path(trained))
    compact = compact_forest.compact_model(original, output_name="scores")
    ops = [n.op_type for n in compact.graph.node]
    assert ops[0] == "Imputer" and ops.count("TreeEnsembleRegressor") == 1 and len(ops) <= 8
    n_trees = sum(n.op_type == "TreeEnsembleRegressor" for n in original.graph.node)
    (tree,) = [n for n in compact.graph.node if n.op_type == "TreeEnsembleRegressor"]
    attrs = {a.name: helper.get_attribute_value(a) for a in tree.attribute}
    assert len(set(attrs["nodes_treeids"])) == n_trees == 50  # --quick trains 50 trees
    imputer = {a.name: helper.get_attribute_value(a) for a in compact.graph.node[0].attribute}
    assert np.isnan(imputer["replaced_value_float"])
    assert [o.name for o in compact.graph.output] == ["scores"]


def test_shipped_model_uses_the_compact_graph_and_matches() -> None:
    version_dir = resolve(ROOT / "models" / "anomaly")
    card = orjson.loads((version_dir / "model_card.json").read_bytes())
    digest = card["onnx"]["sha256"][card["onnx"]["files"]["forest"]]
    assert_compact_matches(version_dir, seed=2)
    assert_leaf_weights_are_path_lengths(forest_path(version_dir))
    # the shipped artifact is untouched
    assert hashlib.sha256(forest_path(version_dir).read_bytes()).hexdigest() == digest


def republish(src: Path, dst: Path, model: onnx.ModelProto) -> Path:
    """A copy of the version dir with another forest graph (and a card listing its sha256)."""
    shutil.copytree(src, dst)
    path = forest_path(dst)
    path.write_bytes(model.SerializeToString())
    card = orjson.loads((dst / "model_card.json").read_bytes())
    card["onnx"]["sha256"][path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    (dst / "model_card.json").write_bytes(orjson.dumps(card))
    return dst


def test_unknown_graph_falls_back_to_the_original_with_a_warning(
        trained: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mutated = onnx.load(forest_path(trained))
    log_node = next(n for n in mutated.graph.node if n.op_type == "Log")
    log_node.op_type = "Softplus"  # valid ONNX, not something the converter interprets
    version_dir = republish(trained, tmp_path / "a1-mutated", mutated)
    with caplog.at_level(logging.WARNING, logger="services.anomaly.model"):
        model = load_anomaly_model(version_dir)
    assert not model.compact and len(model.session.get_outputs()) == 2
    assert any("keeping the original" in r.getMessage() and "Softplus" in r.getMessage() for r in caplog.records)
    x = fresh_rows(200, seed=3)
    (got,) = model(x)
    assert np.array_equal(got, original_scores(model, version_dir, x))


def test_compact_graph_that_differs_is_refused(
        trained: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    real_tree = compact_forest._tree

    def off_by_one(node: onnx.NodeProto, columns: np.ndarray | None) -> compact_forest._Tree:
        tree = real_tree(node, columns)  # leaf ids feed the LabelEncoders: shift them to the wrong leaves
        return compact_forest._Tree(tree.attrs, tree.columns, tree.leaves, np.roll(tree.leaf_out, 1))

    monkeypatch.setattr(compact_forest, "_tree", off_by_one)
    with caplog.at_level(logging.WARNING, logger="services.anomaly.model"):
        model = load_anomaly_model(trained)
    assert not model.compact
    assert any("differs by" in r.getMessage() for r in caplog.records)
    x = fresh_rows(100, seed=4)
    assert np.array_equal(model(x)[0], original_scores(model, trained, x))


def test_hand_built_graph_without_trees_is_not_compacted() -> None:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 3])
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 1])
    label = helper.make_tensor_value_info("label", TensorProto.INT64, [None, 1])
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["input"], ["scores"], keepdims=1),
         helper.make_node("Cast", ["scores"], ["label"], to=TensorProto.INT64)],
        "tiny", [x], [label, scores])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    data = model.SerializeToString()
    original = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    result = compact_forest.compact_session(data, original, input_name="input", output_name="scores")
    assert result.session is None
    assert "unexpected ReduceSum" in result.reason
    assert result.original_nodes == 2


def test_parity_rows_cover_nans_and_thresholds(trained: Path) -> None:
    compact = compact_forest.compact_model(onnx.load(forest_path(trained)), output_name="scores")
    n = compact.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    x = compact_forest.parity_rows(compact, n)
    assert x.dtype == np.float32 and x.shape[1] == n and len(x) >= 2000
    assert np.isnan(x).all(axis=1).any() and np.isnan(x).any(axis=1).sum() > 500
    assert np.isinf(x).any()
