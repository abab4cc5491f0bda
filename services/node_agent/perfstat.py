"""Parser for ``perf stat`` output: the human table and ``-x,`` CSV, whole-run or ``-I`` intervals.

What the parser keeps from each counter line: the value exactly as printed (perf already
scaled it for multiplexing), the running percentage, the CSV running time, the unit, and
the status (``<not supported>`` / ``<not counted>`` carry no number, ever). It understands
thousands separators (``1,349,481,367``), hybrid spellings (``cpu_core/cpu-cycles:u/``),
raw codes (``r0280``), a cgroup column (``-G``) and a ``CPU<n>`` column (``-A``).

Every line that is not understood is reported as ``<file>:<line>: <reason>``: strict
parsing raises :class:`PerfParseError` at the first one, lenient parsing collects them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from services.node_agent.errors import InputLineError
from services.node_agent.events import EventNameError, parse_event

Status = Literal["counted", "multiplexed", "not_counted", "not_supported"]
NOT_COUNTED: Final = "<not counted>"
NOT_SUPPORTED: Final = "<not supported>"

_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_HUMAN_RE: Final = re.compile(
    rf"""^\s*
    (?:(?P<ts>\d+\.\d+)\s+)?                       # -I: interval end, seconds
    (?:(?P<cpu>CPU\d+)\s+)?                        # -A: one CPU
    (?P<value>{_NUMBER}|<not\ counted>|<not\ supported>)\s+
    (?:(?P<unit>msec|usec|nsec|ns|MiB|Joules|KiB|GiB|bytes|%|W)\s+)?
    (?P<event>\S+)
    (?:\s+(?P<cgroup>[^\s#(][^\s#(]*))?          # -G: cgroup column
    (?:\s+\#[^(]*?)?                               # perf's derived-metric comment
    (?:\s+\(\s*\+-\s*\d+(?:\.\d+)?%\s*\))?                # -r: variance
    (?:\s+\((?P<pct>\d+(?:\.\d+)?)%\))?
    \s*$""",
    re.VERBOSE,
)
_STARTED_RE: Final = re.compile(r"^#\s*started on (?P<when>.+?)\s*$")
_TARGET_RE: Final = re.compile(r"^\s*Performance counter stats for (?P<target>.+?):?\s*$")
_TIME_RE: Final = re.compile(r"^\s*(?P<secs>\d+\.\d+)\s+seconds\s+(?P<kind>time elapsed|user|sys)\s*$")
_HEADER_RE: Final = re.compile(r"^#\s*time\s+(CPU\s+)?counts\s+(unit\s+)?events", re.IGNORECASE)
# perf's own advice text, printed around the table (not data, not an error).
_ADVICE_RE: Final = re.compile(
    r"^\s*(Some events weren't counted|echo \d >|perf stat |The events in group|"
    r"Using CPUID|Consider tweaking|Error:|\(sys_perf_event_open|/bin/dmesg|"
    r"\S+ event is not supported by the kernel)"
)


class PerfParseError(InputLineError):
    """A line of perf output that is not understood, named by file and line."""


@dataclass(frozen=True)
class PerfReading:
    """One counter line."""

    event: str
    value: float | None
    status: Status
    unit: str = ""
    pct: float | None = None
    running_ns: int | None = None
    cgroup: str | None = None
    cpu: str | None = None
    line: int = 0


@dataclass
class PerfSample:
    """Readings of one interval (``-I``) or of the whole run (``end_s`` is None)."""

    end_s: float | None
    readings: list[PerfReading] = field(default_factory=list)


@dataclass
class PerfReport:
    path: str
    started: datetime | None = None
    target: str | None = None
    elapsed_s: float | None = None
    user_s: float | None = None
    sys_s: float | None = None
    samples: list[PerfSample] = field(default_factory=list)
    errors: list[PerfParseError] = field(default_factory=list)

    @property
    def interval_mode(self) -> bool:
        return any(s.end_s is not None for s in self.samples)


def parse_number(text: str) -> float:
    """``1,349,481,367`` → 1349481367.0 (comma thousands separators, dot decimals)."""
    return float(text.replace(",", ""))


def _status(value: str, pct: float | None) -> Status:
    if value == NOT_SUPPORTED:
        return "not_supported"
    if value == NOT_COUNTED:
        return "not_counted"
    if pct is not None and pct < 100.0:
        return "multiplexed"
    return "counted"


def _parse_started(text: str) -> datetime | None:
    for fmt in ("%a %b %d %H:%M:%S %Y", "%a %b  %d %H:%M:%S %Y"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


class _Builder:
    def __init__(self, path: str, strict: bool) -> None:
        self.report = PerfReport(path=path)
        self.strict = strict

    def error(self, line: int, reason: str, text: str) -> None:
        err = PerfParseError(self.report.path, line, reason, text)
        if self.strict:
            raise err
        self.report.errors.append(err)

    def add(self, end_s: float | None, reading: PerfReading) -> None:
        samples = self.report.samples
        if not samples or samples[-1].end_s != end_s:
            if end_s is not None and samples and samples[-1].end_s is not None and end_s < samples[-1].end_s:
                self.error(reading.line, f"interval time {end_s} goes backwards", "")
                return
            samples.append(PerfSample(end_s))
        samples[-1].readings.append(reading)


def _check_event(builder: _Builder, lineno: int, event: str, line: str) -> bool:
    try:
        parse_event(event)
    except EventNameError as exc:
        builder.error(lineno, str(exc), line)
        return False
    return True


def _human_line(builder: _Builder, lineno: int, line: str) -> None:
    match = _HUMAN_RE.match(line)
    if match is None:
        builder.error(lineno, "unrecognised line", line)
        return
    if not _check_event(builder, lineno, match["event"], line):
        return
    raw_value = match["value"]
    pct = float(match["pct"]) if match["pct"] else None
    if pct is not None and pct > 100.0:
        builder.error(lineno, f"running percentage {pct} above 100", line)
        return
    value = None if raw_value.startswith("<") else parse_number(raw_value)
    reading = PerfReading(
        event=match["event"],
        value=value,
        status=_status(raw_value, pct),
        unit=match["unit"] or "",
        pct=pct,
        cgroup=match["cgroup"],
        cpu=match["cpu"],
        line=lineno,
    )
    builder.add(float(match["ts"]) if match["ts"] else None, reading)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv_line(builder: _Builder, lineno: int, line: str, sep: str) -> None:
    fields = [f.strip() for f in line.split(sep)]
    end_s: float | None = None
    if len(fields) >= 2 and _is_number(fields[0]) and (_is_number(fields[1]) or fields[1].startswith("<")):
        end_s = float(fields.pop(0))
    cpu = fields.pop(0) if fields and re.fullmatch(r"CPU\d+", fields[0]) else None
    if len(fields) < 3:
        builder.error(lineno, f"expected value{sep}unit{sep}event[...], got {len(fields)} field(s)", line)
        return
    raw_value, unit, event = fields[0], fields[1], fields[2]
    rest = fields[3:]
    if not (raw_value in (NOT_COUNTED, NOT_SUPPORTED) or _is_number(raw_value)) or raw_value.startswith("-"):
        builder.error(lineno, f"bad counter value {raw_value!r}", line)
        return
    if not _check_event(builder, lineno, event, line):
        return
    # With -G the column after the event is the cgroup (empty for events without one).
    cgroup = (rest.pop(0) or None) if rest and not _is_number(rest[0]) else None
    running_ns: int | None = None
    pct: float | None = None
    try:
        if rest and rest[0]:
            running_ns = int(float(rest[0]))
        if len(rest) > 1 and rest[1]:
            pct = float(rest[1])
    except ValueError:
        builder.error(lineno, "bad running time or percentage", line)
        return
    if (pct is not None and not 0.0 <= pct <= 100.0) or (running_ns is not None and running_ns < 0):
        builder.error(lineno, "running time or percentage out of range", line)
        return
    value = None if raw_value.startswith("<") else float(raw_value)
    reading = PerfReading(
        event=event,
        value=value,
        status=_status(raw_value, pct),
        unit=unit,
        pct=pct,
        running_ns=running_ns,
        cgroup=cgroup,
        cpu=cpu,
        line=lineno,
    )
    builder.add(end_s, reading)


def _skippable(line: str) -> bool:
    text = line.strip()
    return (
        not text
        or text.startswith("#")
        or bool(_TARGET_RE.match(line) or _TIME_RE.match(line) or _ADVICE_RE.match(line))
    )


def _csv_like(line: str, sep: str) -> bool:
    fields = [f.strip() for f in line.split(sep)]
    if len(fields) >= 2 and _is_number(fields[0]) and (_is_number(fields[1]) or fields[1].startswith("<")):
        fields.pop(0)
    if fields and re.fullmatch(r"CPU\d+", fields[0]):
        fields.pop(0)
    return len(fields) >= 3 and (_is_number(fields[0]) or fields[0] in (NOT_COUNTED, NOT_SUPPORTED)) and bool(fields[2])


def _looks_csv(lines: Iterable[str], sep: str) -> bool:
    """The format of the first line that is valid in one of them (garbage lines do not decide)."""
    for line in lines:
        if _skippable(line):
            continue
        if _HUMAN_RE.match(line):
            return False
        if sep in line and _csv_like(line, sep):
            return True
    return False


def parse_perf_stat(text: str, path: str = "<input>", *, strict: bool = True, sep: str = ",") -> PerfReport:
    """Parse perf stat output (format detected); malformed lines raise or are collected."""
    lines = text.splitlines()
    builder = _Builder(path, strict)
    report = builder.report
    csv = _looks_csv(lines, sep)
    for lineno, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if match := _STARTED_RE.match(stripped):
            report.started = _parse_started(match["when"])
            continue
        if stripped.startswith("#") and (_HEADER_RE.match(stripped) or stripped == "#"):
            continue
        if match := _TARGET_RE.match(line):
            report.target = match["target"].strip("'\"")
            continue
        if match := _TIME_RE.match(line):
            secs = float(match["secs"])
            if match["kind"] == "time elapsed":
                report.elapsed_s = secs
            elif match["kind"] == "user":
                report.user_s = secs
            else:
                report.sys_s = secs
            continue
        if _ADVICE_RE.match(line):
            continue
        if csv:
            _csv_line(builder, lineno, line, sep)
        else:
            _human_line(builder, lineno, line)
    if not report.samples and not report.errors:
        builder.error(max(1, len(lines)), "no counter lines found", "")
    return report


def parse_perf_stat_file(path: Path, *, strict: bool = True) -> PerfReport:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PerfParseError(str(path), 1, f"not UTF-8 text ({exc.reason})") from None
    return parse_perf_stat(text, str(path), strict=strict)
