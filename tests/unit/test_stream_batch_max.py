"""``STREAM_BATCH_MAX``: a default per service (features 500, the model stages 2,000); the variable wins."""

from __future__ import annotations

from typing import Any

import pytest

from services.anomaly.processor import AnomalyProcessor
from services.anomaly.settings import AnomalySettings
from services.features.processor import FeaturesProcessor
from services.features.settings import FeaturesSettings
from services.regime.processor import RegimeProcessor
from services.regime.settings import RegimeSettings
from services.risk.processor import RiskProcessor
from services.risk.settings import RiskSettings
from services.runtime.batch_stream import LINGER_BYTES_PER_RECORD, MODEL_BATCH_MAX, BatchStream
from services.runtime.settings import load_settings
from services.runtime.stream_settings import StreamSettings


async def _handle(batch: object) -> None:
    return None


def _stream(**kwargs: Any) -> BatchStream:
    return BatchStream(service="s", settings=load_settings(StreamSettings), sink=None,  # type: ignore[arg-type]
                       topics=[], handle=_handle, **kwargs)


def test_the_variable_overrides_the_service_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAM_BATCH_MAX", raising=False)
    assert _stream().batch_max == 500
    assert _stream(batch_max=MODEL_BATCH_MAX).batch_max == MODEL_BATCH_MAX == 2000
    monkeypatch.setenv("STREAM_BATCH_MAX", "300")
    assert _stream(batch_max=MODEL_BATCH_MAX).batch_max == 300
    assert _stream().batch_max == 300


async def test_a_lingering_consumer_asks_the_broker_for_a_batch_of_the_streams_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAM_BATCH_MAX", raising=False)
    consumer = _stream(batch_max=MODEL_BATCH_MAX, linger_s=0.02)._make_consumer()
    try:
        assert consumer._fetch_min_bytes == MODEL_BATCH_MAX * LINGER_BYTES_PER_RECORD
        assert consumer._fetch_max_wait_ms == 20
        assert consumer._max_poll_records == MODEL_BATCH_MAX
    finally:
        await consumer.stop()


def test_each_service_asks_for_its_own_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAM_BATCH_MAX", raising=False)
    models: Any = None  # the constructors keep the watcher; nothing here scores
    assert FeaturesProcessor(FeaturesSettings(), None).stream.batch_max == 500  # type: ignore[arg-type]
    for stage in (RegimeProcessor(RegimeSettings(), None, models),  # type: ignore[arg-type]
                  AnomalyProcessor(AnomalySettings(), None, models),  # type: ignore[arg-type]
                  RiskProcessor(RiskSettings(), None, models)):  # type: ignore[arg-type]
        assert stage.stream.batch_max == MODEL_BATCH_MAX
