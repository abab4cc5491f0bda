"""BORG_TOPIC_PARTITIONS: registry topics only, counts in range, the co-partitioned streams set together."""

from __future__ import annotations

import pytest

from services.runtime.settings import (
    CO_PARTITIONED,
    RuntimeSettings,
    SettingsError,
    load_settings,
    parse_topic_partitions,
)


def family(count: int) -> str:
    return ",".join(f"{name}={count}" for name in sorted(CO_PARTITIONED))


def test_the_node_keyed_streams_form_the_co_partitioned_family() -> None:
    assert {"nodestate.v1", "features.v1", "taskevents.v1", "regimes.v2", "risk.v2"} <= CO_PARTITIONED
    assert not {"proposals.v1", "decisions.v1", "capabilities.v1", "drift.v1"} & CO_PARTITIONED


def test_counts_override_the_registry_and_default_to_it() -> None:
    s = RuntimeSettings(BORG_TOPIC_PARTITIONS=f"{family(12)}, decisions.v1=6")  # type: ignore[call-arg]
    assert s.partitions_of("features.v1") == 12 and s.partitions_of("decisions.v1") == 6
    assert s.partitions_of("proposals.v1") == 3 and RuntimeSettings().partitions_of("nodestate.v1") == 6


@pytest.mark.parametrize(("value", "message"), [
    ("nosuch.v1=3", "'nosuch.v1=3': expected `<registry topic>=<count>`"),
    ("decisions.v1", "'decisions.v1': expected"),
    ("decisions.v1=x", "the count is not an integer"),
    ("decisions.v1=0", "the count must be 1..10000"),
    ("features.v1=12", "the co-partitioned topics must share one count"),
])
def test_a_bad_value_is_refused_naming_the_entry(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_topic_partitions(value)


def test_start_up_names_the_variable(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BORG_TOPIC_PARTITIONS", "features.v1=12")
    with pytest.raises(SettingsError):
        load_settings(RuntimeSettings)
    err = capsys.readouterr().err
    assert "setting BORG_TOPIC_PARTITIONS" in err and "share one count" in err, err
