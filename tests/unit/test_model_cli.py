"""`borgctl model status|promote|rollback` on a model root the test builds (no shipped model touched)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pytest

from borgctl.main import main as borgctl
from borgctl.model import HISTORY_FILE, current


def version(root: Path, name: str, kind: str = "regime", corrupt: bool = False) -> None:
    d = root / kind / name
    d.mkdir(parents=True)
    (d / "m.onnx").write_bytes(b"model " + name.encode())
    digest = hashlib.sha256(b"other" if corrupt else b"model " + name.encode()).hexdigest()
    (d / "model_card.json").write_bytes(orjson.dumps({"model": kind, "version": name, "created_at": "2026-11-27",
                                                      "onnx": {"sha256": {"m.onnx": digest}}}))


def test_promote_checks_the_version_and_rollback_goes_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    version(tmp_path, "v1")
    version(tmp_path, "v2")
    version(tmp_path, "v3-bad", corrupt=True)
    (tmp_path / "regime" / "CURRENT").write_text("v1\n")
    models = ["--models", str(tmp_path)]
    assert borgctl(["model", *models, "promote", "regime", "v2"]) == 0
    assert current(tmp_path / "regime") == "v2"
    assert (tmp_path / "regime" / HISTORY_FILE).read_text() == "v1\n"
    # a version whose files differ from its card is refused and nothing moves
    assert borgctl(["model", *models, "promote", "regime", "v3-bad"]) == 2
    assert "sha256 differs" in capsys.readouterr().err
    assert borgctl(["model", *models, "promote", "regime", "v9"]) == 2
    assert "versions of regime: v1, v2, v3-bad" in capsys.readouterr().err
    assert current(tmp_path / "regime") == "v2"
    assert borgctl(["model", *models, "status"]) == 0
    out = capsys.readouterr().out
    assert "regime: serving v2" in out and "* v2" in out and "rollback → v1" in out
    assert borgctl(["model", *models, "rollback", "regime"]) == 0
    assert current(tmp_path / "regime") == "v1"
    assert borgctl(["model", *models, "rollback", "regime"]) == 2, "nothing left to roll back to"
    assert "no earlier version" in capsys.readouterr().err


def test_a_version_of_another_kind_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    version(tmp_path, "v1")
    version(tmp_path, "f1", kind="failure")
    (tmp_path / "regime" / "f1").symlink_to(tmp_path / "failure" / "f1")
    assert borgctl(["model", "--models", str(tmp_path), "promote", "regime", "f1"]) == 2
    assert "a 'failure' model, not a 'regime' model" in capsys.readouterr().err
    assert borgctl(["model", "--models", str(tmp_path), "promote", "nokind", "v1"]) == 2


def test_status_of_the_shipped_models_names_what_each_stage_serves(capsys: pytest.CaptureFixture[str]) -> None:
    assert borgctl(["model", "status"]) == 0
    out = capsys.readouterr().out
    for kind in ("regime", "failure", "anomaly", "forecast"):
        served = (Path(__file__).resolve().parents[2] / "models" / kind / "CURRENT").read_text().strip()
        assert f"{kind}: serving {served}" in out
