"""A compact, equivalent ONNX graph for the skl2onnx isolation forest (built in memory at load time).

skl2onnx exports an ``IsolationForest`` pipeline as one ``TreeEnsembleRegressor`` per tree plus
~26 nodes of per-tree arithmetic (2,711 nodes for 100 trees); onnxruntime's per-node overhead then
dominates small batches. The exported graph (opset 15 / ai.onnx.ml 3) computes, per row::

    x'     = Imputer(x)                       # NaN -> training median (shared by all trees)
    leaf_t = TreeEnsembleRegressor_t(Gather(x', cols_t))   # float leaf node id of tree t
    ns_t   = LabelEncoder(Cast<int64>(leaf_t))  # training samples in that leaf
    pl_t   = LabelEncoder(Cast<int64>(leaf_t))  # decision-path length (nodes on the path)
    d_t    = pl_t + [ns_t == 2] + [ns_t > 2] * (2 (ln(ns_t - 1) + 0.5772157) - 2 (ns_t - 1) / ns_t) - 1
    scores = -(2 ** -(sum_t d_t / (n_trees * c(max_samples)))) + 0.5   # decision_function
    label  = 1 - 2 [scores < 0]

``d_t`` is sklearn's per-tree depth (``_average_path_length``); it depends only on the leaf, so
it can be precomputed per leaf. The compact graph is ``Imputer`` (copied) -> ONE
``TreeEnsembleRegressor`` holding every tree (feature ids remapped through each tree's
``Gather``; leaf weight = that leaf's ``d_t``; SUM aggregation) -> the graph's own tail nodes
from the ``Sum`` to the score output (copied verbatim). Only the score output is kept.

The per-leaf values are not taken from a formula: the converter *interprets the graph's own
per-tree nodes* (Cast, LabelEncoder, Reshape, elementwise arithmetic with scalar constants) on
the vector of leaf outputs of each tree in float32, so it reproduces what the graph computes.
Anything it does not recognise raises :class:`UnsupportedGraphError`; :func:`compact_session`
then reports why, and the caller keeps the original graph. A parity check on a few thousand
rows (random values across each feature's split range, exact split thresholds and their
neighbours, NaNs, an all-NaN row, ±inf) must agree within :data:`PARITY_TOLERANCE`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

PARITY_TOLERANCE: Final = 1e-6
ML_DOMAIN: Final = "ai.onnx.ml"
TREE_OP: Final = "TreeEnsembleRegressor"

_TREE_ATTRS: Final = frozenset({
    "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes", "nodes_truenodeids",
    "nodes_falsenodeids", "nodes_missing_value_tracks_true", "nodes_hitrates", "target_ids", "target_nodeids",
    "target_treeids", "target_weights", "n_targets", "post_transform", "aggregate_function", "base_values",
})
_BINARY: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
    "Equal": np.equal, "Greater": np.greater, "Less": np.less, "GreaterOrEqual": np.greater_equal,
    "LessOrEqual": np.less_equal,
}
_VARIADIC: Final[dict[str, Callable[[Any, Any], Any]]] = {"Max": np.maximum, "Min": np.minimum, "Sum": np.add}
_UNARY: Final[dict[str, Callable[[Any], Any]]] = {
    "Neg": np.negative, "Log": np.log, "Exp": np.exp, "Abs": np.abs, "Sqrt": np.sqrt, "Identity": lambda v: v,
}


class UnsupportedGraphError(ValueError):
    """The graph is not an isolation forest this converter understands."""


@dataclass(frozen=True)
class CompactResult:
    """``session`` is None when the original graph must be kept; ``reason`` says why (or what was built)."""

    session: ort.InferenceSession | None
    reason: str
    original_nodes: int
    compact_nodes: int
    max_abs_diff: float | None


def session_options() -> ort.SessionOptions:
    """The options of ``services.runtime.model_watch.onnx_session`` (single-threaded CPU)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


# ------------------------------------------------------------------------------------ conversion


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _label(node: onnx.NodeProto) -> str:
    return node.name or node.op_type


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class _Tree:
    """One single-tree ensemble of the original graph, with its leaves' outputs."""

    attrs: dict[str, Any]
    columns: np.ndarray | None  # the Gather's global column per local feature id (None: no Gather)
    leaves: np.ndarray  # leaf node ids
    leaf_out: np.ndarray  # float32 output of the ensemble at each leaf


def _tree(node: onnx.NodeProto, columns: np.ndarray | None) -> _Tree:
    if node.domain != ML_DOMAIN or len(node.input) != 1 or len(node.output) != 1:
        raise UnsupportedGraphError(f"{_label(node)}: unexpected {TREE_OP} signature")
    attrs = _attrs(node)
    extra = set(attrs) - _TREE_ATTRS
    if extra:
        raise UnsupportedGraphError(f"{_label(node)}: unsupported attributes {sorted(extra)}")
    if int(attrs.get("n_targets", 0)) != 1 or _text(attrs.get("post_transform", "NONE")) != "NONE":
        raise UnsupportedGraphError(f"{_label(node)}: needs n_targets=1 and post_transform=NONE")
    if _text(attrs.get("aggregate_function", "SUM")) != "SUM":
        raise UnsupportedGraphError(f"{_label(node)}: aggregate_function is not SUM")
    if any(float(b) != 0.0 for b in attrs.get("base_values", [])):
        raise UnsupportedGraphError(f"{_label(node)}: non-zero base_values")
    tree_ids = np.asarray(attrs["nodes_treeids"], dtype=np.int64)
    node_ids = np.asarray(attrs["nodes_nodeids"], dtype=np.int64)
    n = len(node_ids)
    for key in ("nodes_featureids", "nodes_values", "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids"):
        if len(attrs[key]) != n:
            raise UnsupportedGraphError(f"{_label(node)}: {key} has {len(attrs[key])} entries for {n} nodes")
    for key in ("nodes_missing_value_tracks_true", "nodes_hitrates"):
        if key in attrs and len(attrs[key]) != n:
            raise UnsupportedGraphError(f"{_label(node)}: {key} has {len(attrs[key])} entries for {n} nodes")
    if n == 0 or len(set(tree_ids.tolist())) != 1 or len(set(node_ids.tolist())) != n:
        raise UnsupportedGraphError(f"{_label(node)}: not exactly one tree with unique node ids")
    modes = [_text(m) for m in attrs["nodes_modes"]]
    leaves = node_ids[[m == "LEAF" for m in modes]]
    if columns is not None:
        features = np.asarray(attrs["nodes_featureids"], dtype=np.int64)[[m != "LEAF" for m in modes]]
        if len(features) and (features.min() < 0 or features.max() >= len(columns)):
            raise UnsupportedGraphError(f"{_label(node)}: feature id outside its Gather's columns")
    t_nodes = np.asarray(attrs.get("target_nodeids", []), dtype=np.int64)
    if (any(int(i) != 0 for i in attrs.get("target_ids", []))
            or any(int(i) != int(tree_ids[0]) for i in attrs.get("target_treeids", []))
            or len(set(t_nodes.tolist())) != len(t_nodes) or not set(t_nodes.tolist()) <= set(leaves.tolist())):
        raise UnsupportedGraphError(f"{_label(node)}: targets are not one weight per leaf")
    weight = dict(zip(t_nodes.tolist(), np.asarray(attrs["target_weights"], dtype=np.float32).tolist(), strict=True))
    leaf_out = np.array([weight.get(int(leaf), 0.0) for leaf in leaves], dtype=np.float32)
    return _Tree(attrs, columns, leaves, leaf_out)


def _scalar(init: dict[str, np.ndarray], name: str, node: onnx.NodeProto) -> np.ndarray:
    value = init.get(name)
    if value is None or value.size != 1 or value.ndim > 2:
        raise UnsupportedGraphError(f"{_label(node)}: input {name!r} is neither per-tree nor a scalar constant")
    return value.reshape(())


def _label_encoder(node: onnx.NodeProto, value: np.ndarray) -> np.ndarray:
    attrs = _attrs(node)
    if node.domain != ML_DOMAIN or set(attrs) - {"keys_int64s", "values_floats", "default_float"}:
        raise UnsupportedGraphError(f"{_label(node)}: only int64 -> float LabelEncoders are supported")
    keys = np.asarray(attrs.get("keys_int64s", []), dtype=np.int64)
    values = np.asarray(attrs.get("values_floats", []), dtype=np.float32)
    if value.dtype != np.int64 or len(keys) != len(values) or len(set(keys.tolist())) != len(keys):
        raise UnsupportedGraphError(f"{_label(node)}: malformed LabelEncoder")
    order = np.argsort(keys)
    keys, values = keys[order], values[order]
    pos = np.clip(np.searchsorted(keys, value), 0, max(len(keys) - 1, 0))
    found = keys[pos] == value if len(keys) else np.zeros(value.shape, dtype=bool)
    default = np.float32(attrs.get("default_float", -0.0))
    return np.where(found, values[pos] if len(keys) else default, default).astype(np.float32)


def _eval(node: onnx.NodeProto, args: list[np.ndarray], init: dict[str, np.ndarray]) -> np.ndarray:
    """One per-tree node on a vector of per-leaf values (each row of the graph is one leaf here)."""
    op = node.op_type
    if op == "Cast":
        to = int(_attrs(node)["to"])
        if to not in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL):
            raise UnsupportedGraphError(f"{_label(node)}: Cast to type {to}")
        return args[0].astype(helper.tensor_dtype_to_np_dtype(to))
    if op == "LabelEncoder":
        return _label_encoder(node, args[0])
    if op == "Reshape":
        shape = init.get(node.input[1])
        if shape is None or shape.tolist() != [-1, 1] or _attrs(node).get("allowzero", 0):
            raise UnsupportedGraphError(f"{_label(node)}: Reshape other than to [-1, 1]")
        return args[0]
    if node.domain not in ("", "ai.onnx") or node.attribute:
        raise UnsupportedGraphError(f"{_label(node)}: unsupported per-tree node {node.domain}:{op}")
    if op == "Div" and any(np.issubdtype(a.dtype, np.integer) for a in args):
        raise UnsupportedGraphError(f"{_label(node)}: integer Div")
    if op in _UNARY and len(args) == 1:
        return np.asarray(_UNARY[op](args[0]))
    if op in _BINARY and len(args) == 2:
        return np.asarray(_BINARY[op](args[0], args[1]))
    if op in _VARIADIC and args:
        out = args[0]
        for arg in args[1:]:
            out = _VARIADIC[op](out, arg)
        return np.asarray(out)
    raise UnsupportedGraphError(f"{_label(node)}: unsupported per-tree node {op}")


def compact_model(model: onnx.ModelProto, *, output_name: str) -> onnx.ModelProto:
    """The compact equivalent of ``model``'s ``output_name``; raises :class:`UnsupportedGraphError`."""
    graph = model.graph
    if len(graph.input) != 1:
        raise UnsupportedGraphError("the graph needs exactly one input")
    source_input = graph.input[0].name
    outputs = {o.name: o for o in graph.output}
    if output_name not in outputs:
        raise UnsupportedGraphError(f"no graph output {output_name!r}")
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    order = {id(node): i for i, node in enumerate(graph.node)}

    # backward slice: the nodes the score output needs, in graph (topological) order
    needed: dict[int, onnx.NodeProto] = {}
    stack = [output_name]
    while stack:
        name = stack.pop()
        node = producer.get(name)
        if node is None or id(node) in needed:
            continue
        needed[id(node)] = node
        stack.extend(i for i in node.input if i)
    nodes = sorted(needed.values(), key=lambda nd: order[id(nd)])

    # which trees each tensor depends on
    trees: list[tuple[onnx.NodeProto, np.ndarray | None]] = []
    deps: dict[str, frozenset[int]] = {}
    imputer: onnx.NodeProto | None = None
    source = source_input
    for node in nodes:
        dep = frozenset().union(*(deps.get(i, frozenset()) for i in node.input))
        if node.op_type == TREE_OP:
            if dep:
                raise UnsupportedGraphError(f"{_label(node)}: a tree fed by another tree")
            columns = None
            feed = producer.get(node.input[0])
            if feed is not None and feed.op_type == "Gather":
                indices = init.get(feed.input[1])
                if feed.input[0] != source or indices is None or indices.ndim != 1 \
                        or int(_attrs(feed).get("axis", 0)) != 1:
                    raise UnsupportedGraphError(f"{_label(feed)}: not a column Gather of the (imputed) input")
                columns = indices.astype(np.int64)
            elif node.input[0] != source:
                raise UnsupportedGraphError(f"{_label(node)}: fed by neither the input nor a Gather")
            trees.append((node, columns))
            dep = frozenset({len(trees) - 1})
        elif not dep:
            if node.op_type == "Imputer" and imputer is None and list(node.input) == [source_input]:
                imputer, source = node, node.output[0]
            elif node.op_type != "Gather":  # Gathers are checked with the tree they feed
                raise UnsupportedGraphError(f"{_label(node)}: unexpected {node.op_type} before the trees")
        for out in node.output:
            deps[out] = dep
    if not trees:
        raise UnsupportedGraphError("no TreeEnsembleRegressor feeds the score output")
    tree_inputs = {node.input[0] for node, _ in trees}
    if any(g.op_type == "Gather" and g.output[0] not in tree_inputs for g in nodes):
        raise UnsupportedGraphError("a Gather that feeds no tree")

    # the single Sum that merges one term per tree; everything after it is the tail
    everything = frozenset(range(len(trees)))
    merges = [nd for nd in nodes if len(deps[nd.output[0]]) > 1
              and not any(len(deps.get(i, frozenset())) > 1 for i in nd.input)]
    if len(merges) != 1 or merges[0].op_type != "Sum" or deps[merges[0].output[0]] != everything:
        raise UnsupportedGraphError("the trees are not merged by one Sum")
    merge = merges[0]
    terms = {next(iter(deps[i])): i for i in merge.input if len(deps.get(i, frozenset())) == 1}
    if len(terms) != len(trees) or len(merge.input) != len(trees):
        raise UnsupportedGraphError(f"{_label(merge)}: not one term per tree")
    tail_tensors = {merge.output[0]}
    tail: list[onnx.NodeProto] = []
    for node in nodes[nodes.index(merge) + 1:]:
        if deps[node.output[0]] != everything:
            continue
        if any(i not in tail_tensors and i not in init for i in node.input if i) or len(node.output) != 1:
            raise UnsupportedGraphError(f"{_label(node)}: the tail after the Sum mixes in other tensors")
        tail.append(node)
        tail_tensors.add(node.output[0])

    # per tree: interpret its own nodes on the vector of its leaves' outputs
    per_tree: list[list[onnx.NodeProto]] = [[] for _ in trees]
    for node in nodes:
        dep = deps[node.output[0]]
        if len(dep) == 1 and node.op_type != TREE_OP:
            per_tree[next(iter(dep))].append(node)
    built = [_tree(node, columns) for node, columns in trees]
    leaf_values: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for t, ((node, _), tree) in enumerate(zip(trees, built, strict=True)):
            env = {node.output[0]: tree.leaf_out}
            for step in per_tree[t]:
                args = []
                for i, name in enumerate(step.input):
                    if name in env:
                        args.append(env[name])
                    elif step.op_type == "Reshape" and i == 1:
                        continue
                    else:
                        args.append(_scalar(init, name, step))
                if len(step.output) != 1:
                    raise UnsupportedGraphError(f"{_label(step)}: several outputs")
                env[step.output[0]] = np.broadcast_to(_eval(step, args, init), tree.leaf_out.shape)
            term = env.get(terms[t])
            if term is None or term.dtype != np.float32 or not np.all(np.isfinite(term)):
                raise UnsupportedGraphError(f"tree {t}: per-leaf value is not a finite float32")
            leaf_values.append(np.array(term, dtype=np.float32))

    merged = _merged_tree(built, leaf_values, source, merge.output[0])
    nodes_out = ([] if imputer is None else [imputer]) + [merged] + tail
    used = {i for nd in tail for i in nd.input}
    compact_graph = helper.make_graph(
        nodes_out, "compact_isolation_forest", [graph.input[0]], [outputs[output_name]],
        initializer=[t for t in graph.initializer if t.name in used],
    )
    compact = helper.make_model(compact_graph, opset_imports=list(model.opset_import),
                                producer_name="borg compact_forest")
    compact.ir_version = model.ir_version
    onnx.checker.check_model(compact)
    return compact


def _merged_tree(built: list[_Tree], leaf_values: list[np.ndarray], source: str, output: str) -> onnx.NodeProto:
    keys = ("nodes_nodeids", "nodes_values", "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids")
    merged: dict[str, list[Any]] = {k: [] for k in (*keys, "nodes_treeids", "nodes_featureids",
                                                    "nodes_missing_value_tracks_true", "nodes_hitrates",
                                                    "target_ids", "target_nodeids", "target_treeids",
                                                    "target_weights")}
    hitrates = all("nodes_hitrates" in tree.attrs for tree in built)
    for t, (tree, values) in enumerate(zip(built, leaf_values, strict=True)):
        n = len(tree.attrs["nodes_nodeids"])
        for key in keys:
            merged[key].extend(tree.attrs[key])
        merged["nodes_treeids"].extend([t] * n)
        features = [int(f) for f in tree.attrs["nodes_featureids"]]
        if tree.columns is not None:
            leaf = [_text(m) == "LEAF" for m in tree.attrs["nodes_modes"]]
            features = [f if is_leaf else int(tree.columns[f]) for f, is_leaf in zip(features, leaf, strict=True)]
        merged["nodes_featureids"].extend(features)
        merged["nodes_missing_value_tracks_true"].extend(tree.attrs.get("nodes_missing_value_tracks_true", [0] * n))
        if hitrates:
            merged["nodes_hitrates"].extend(tree.attrs["nodes_hitrates"])
        merged["target_ids"].extend([0] * len(tree.leaves))
        merged["target_treeids"].extend([t] * len(tree.leaves))
        merged["target_nodeids"].extend(int(v) for v in tree.leaves)
        merged["target_weights"].extend(float(v) for v in values)
    if not hitrates:
        del merged["nodes_hitrates"]
    attrs: dict[str, Any] = {"n_targets": 1, "post_transform": "NONE", "aggregate_function": "SUM", **merged}
    return helper.make_node(TREE_OP, [source], [output], name="compact_forest", domain=ML_DOMAIN, **attrs)


# ------------------------------------------------------------------------------------ parity


def parity_rows(model: onnx.ModelProto, n_features: int, *, seed: int = 0, rows: int = 2048) -> np.ndarray:
    """Rows exercising the compact graph: split ranges, exact thresholds (± 1 ulp), NaNs, all-NaN, ±inf."""
    rng = np.random.default_rng(seed)
    thresholds: list[list[float]] = [[] for _ in range(n_features)]
    for node in model.graph.node:
        if node.op_type != TREE_OP:
            continue
        attrs = _attrs(node)
        for f, v, m in zip(attrs["nodes_featureids"], attrs["nodes_values"], attrs["nodes_modes"], strict=True):
            if _text(m) != "LEAF" and 0 <= int(f) < n_features:
                thresholds[int(f)].append(float(v))
    lo = np.array([min(t) if t else -1.0 for t in thresholds])
    hi = np.array([max(t) if t else 1.0 for t in thresholds])
    span = np.maximum(hi - lo, 1e-3)
    uniform = rng.uniform(lo - 0.1 * span, hi + 0.1 * span, size=(rows, n_features)).astype(np.float32)
    exact = uniform[: rows // 4].copy()
    for f, ts in enumerate(thresholds):
        if ts:
            picked = np.asarray(rng.choice(ts, size=len(exact)), dtype=np.float32)
            nudge = rng.integers(-1, 2, size=len(exact))
            picked = np.where(nudge < 0, np.nextafter(picked, np.float32(-np.inf)),
                              np.where(nudge > 0, np.nextafter(picked, np.float32(np.inf)), picked))
            exact[:, f] = picked
    holes = []
    for p in (0.1, 0.5, 0.9):
        part = uniform[rng.integers(0, rows, size=rows // 4)].copy()
        part[rng.random(part.shape) < p] = np.nan
        holes.append(part)
    edge = np.stack([np.full(n_features, np.nan), np.full(n_features, np.inf), np.full(n_features, -np.inf),
                     np.zeros(n_features), lo, hi]).astype(np.float32)
    return np.ascontiguousarray(np.concatenate([uniform, exact, *holes, edge]), dtype=np.float32)


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)
    if a64.shape != b64.shape or not np.array_equal(np.isnan(a64), np.isnan(b64)):
        return float("inf")
    both = ~np.isnan(a64)
    return float(np.max(np.abs(a64[both] - b64[both]), initial=0.0))


def compact_session(model_bytes: bytes, original: ort.InferenceSession, *, input_name: str, output_name: str,
                    extra_rows: np.ndarray | None = None) -> CompactResult:
    """A session on the compact graph when it matches ``original`` within the tolerance, else None + reason."""
    n_original = 0
    try:
        model = onnx.load_from_string(model_bytes)
        n_original = len(model.graph.node)
        if model.graph.input[0].name != input_name:
            raise UnsupportedGraphError(f"input is {model.graph.input[0].name!r}, not {input_name!r}")
        dims = model.graph.input[0].type.tensor_type.shape.dim
        if len(dims) != 2 or not dims[1].HasField("dim_value"):
            raise UnsupportedGraphError("the input is not float[N, n_features]")
        n_features = int(dims[1].dim_value)
        compact = compact_model(model, output_name=output_name)
        session = ort.InferenceSession(compact.SerializeToString(), sess_options=session_options(),
                                       providers=["CPUExecutionProvider"])
    except Exception as exc:  # anything not understood: keep the original graph
        return CompactResult(None, f"cannot compact the graph ({exc})", n_original, 0, None)
    n_compact = len(compact.graph.node)
    try:
        x = parity_rows(compact, n_features)
        if extra_rows is not None and len(extra_rows):
            x = np.concatenate([x, np.asarray(extra_rows, dtype=np.float32).reshape(-1, n_features)])
        want = np.asarray(original.run([output_name], {input_name: x})[0])
        got = np.asarray(session.run([output_name], {input_name: x})[0])
        diff = max_abs_diff(want, got)
        for lo in range(0, 60, 20):  # small batches and single rows take other code paths in onnxruntime
            diff = max(diff, max_abs_diff(want[lo:lo + 20], session.run([output_name], {input_name: x[lo:lo + 20]})[0]))
            diff = max(diff, max_abs_diff(want[lo:lo + 1], session.run([output_name], {input_name: x[lo:lo + 1]})[0]))
    except Exception as exc:
        return CompactResult(None, f"parity check failed to run ({exc})", n_original, n_compact, None)
    if not diff <= PARITY_TOLERANCE:
        return CompactResult(None, f"compact graph differs by {diff:.3g} on {len(x)} rows (> {PARITY_TOLERANCE})",
                             n_original, n_compact, diff)
    return CompactResult(session, f"{n_original} -> {n_compact} nodes, parity max |diff| {diff:.2e} on {len(x)} rows",
                         n_original, n_compact, diff)
