"""training.regime.fleet_screen: the fleet-relative transform (ranks, streaming without later windows), the
selective score, that ranking undoes a monotone shift of a new domain on generated data, and the CLI end to end
on tiny simulated clusters (the project's own simulator; no trace data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from training.regime import fleet_screen as fs


def test_ranks_are_mid_rank_quantiles_of_the_reference_and_keep_invalid_values_invalid() -> None:
    reference = np.array([[1.0, np.nan], [2.0, np.nan], [3.0, np.nan], [4.0, np.nan]], dtype=np.float32)
    x = np.array([[0.0, 1.0], [2.0, 2.0], [2.5, 3.0], [9.0, np.nan], [np.nan, 0.0]], dtype=np.float32)
    out = fs.rank_against(reference, x)
    assert out[:, 0][:4].tolist() == pytest.approx([0.0, 0.375, 0.5, 1.0])  # 2.0 ties one of four: (1 + 2) / 8
    assert np.isnan(out[4, 0])
    assert np.isnan(out[:, 1]).all()  # no valid reference value in that column: nothing to rank against
    with pytest.raises(ValueError, match="same columns"):
        fs.rank_against(reference, x[:, :1])


def test_ranking_within_a_population_ignores_any_increasing_rescaling_of_its_features() -> None:
    rng = np.random.default_rng(0)
    x = rng.lognormal(size=(300, 3)).astype(np.float32)
    shifted = np.stack([3.0 * x[:, 0] + 5.0, np.sqrt(x[:, 1]), np.exp(x[:, 2] / 4.0)], axis=1).astype(np.float32)
    assert np.array_equal(fs.rank_within(x), fs.rank_within(shifted))


def test_streaming_ranks_read_no_later_window_and_at_most_the_last_n() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1000, 2)).astype(np.float32)
    later_changed = x.copy()
    later_changed[600:] = rng.normal(10.0, 1.0, size=(400, 2))
    a, b = fs.rank_streaming(x, 300), fs.rank_streaming(later_changed, 300)
    assert np.array_equal(a[:600], b[:600]) and not np.array_equal(a[600:], b[600:])
    assert np.array_equal(a[500:600], fs.rank_against(x[300:600], x[500:600]))  # the 300 windows up to the block
    with pytest.raises(ValueError, match="at least one block"):
        fs.rank_streaming(x, 50)


def test_selective_accuracy_is_the_accuracy_of_the_most_confident_share() -> None:
    probs = np.array([[0.9, 0.1], [0.8, 0.2], [0.4, 0.6], [0.55, 0.45], [0.5, 0.5]])
    truth = np.array([0, 1, 1, 1, 0])  # hits: yes, no, yes, no, yes
    acc, sel = fs.accuracy_and_selective(probs, truth, coverage=0.6)  # the 3 most confident: rows 0, 1, 2
    assert acc == pytest.approx(0.6) and sel == pytest.approx(2 / 3)


def test_a_classifier_on_fleet_ranks_survives_a_shifted_new_domain_that_breaks_the_raw_one() -> None:
    rng = np.random.default_rng(2)

    def domain(n: int, scale: float, offset: float) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 3, size=n)  # three regimes (the classifier is multi-class)
        signal = rng.normal(loc=3.0 * y, scale=1.0, size=n)
        noise = rng.normal(size=n)
        return np.stack([scale * signal + offset, noise], axis=1).astype(np.float32), y

    x_train, y_train = domain(2000, 1.0, 0.0)
    x_new, y_new = domain(2000, 2.0, 6.0)  # every workload's level moved: the raw boundary sits elsewhere
    raw = fs.fit_classifier(x_train, y_train, seed=0, trees=20, depth=2)
    ranked = fs.fit_classifier(fs.rank_within(x_train), y_train, seed=0, trees=20, depth=2)
    raw_acc, _ = fs.accuracy_and_selective(raw.predict_proba(x_new), y_new)
    rank_acc, _ = fs.accuracy_and_selective(ranked.predict_proba(fs.rank_within(x_new)), y_new)
    assert raw_acc < 0.5 < 0.75 < rank_acc


def test_cli_writes_every_variant_for_every_draw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "screen.json"
    assert fs.main(["--quick", "--draws", "1", "--copies", "1", "--nodes", "8", "--out", str(out)]) == 0
    report = orjson.loads(out.read_bytes())
    assert set(report["draws"]) == {"1"} and set(report["draws"]["1"]) == set(fs.VARIANTS)
    for row in report["draws"]["1"].values():
        assert set(row["per_seed"]) == {str(s) for s in fs.EVAL_SEEDS}
        assert 0.0 <= row["accuracy"] <= 1.0 and 0.0 <= row["sel_at_060"] <= 1.0
    assert report["mean_over_draws"]["raw"] == {k: report["draws"]["1"]["raw"][k] for k in ("accuracy", "sel_at_060")}
    assert report["command"].startswith("python -m training.regime.fleet_screen --quick")
    assert "rank_streaming: accuracy" in capsys.readouterr().out


def test_cli_names_a_bad_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        fs.main(["--draws", "1,x", "--out", str(tmp_path / "f.json")])
    assert "--draws" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        fs.main(["--pseudo-share", "0", "--out", str(tmp_path / "f.json")])
    assert "--pseudo-share" in capsys.readouterr().err
