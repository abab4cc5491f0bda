"""A bounded, append-only on-disk spool of encoded messages, drained in order.

Layout: ``<dir>/<first-index:020d>.seg`` segment files of records

    u32 body length | u32 crc32(body) | body
    body = u16 key length | key | u16 header count | (u16 len | name | u16 len | value)* | value

plus ``<dir>/HEAD`` (the index of the first undelivered record), rewritten atomically on
every commit. Every record has a global, increasing index; a segment is named by the
index of its first record.

* ``append`` never blocks on the network: it writes to the page cache (``fsync`` optional).
* Bounded: the live records never exceed ``max_bytes``; when a new record does not fit, the
  oldest records are dropped, counted (``dropped``, ``SPOOL_DROPPED``) and logged. Disk use
  stays below ``max_bytes`` plus one segment (a partly delivered segment is deleted once
  fully delivered or dropped).
* ``peek(n)`` returns the oldest records with their indices; ``commit(index)`` marks every
  record up to ``index`` delivered. Records dropped while a peeked batch was in flight
  simply are not there any more when it is committed.
* On open the spool recovers from ``HEAD`` and the segments; a torn record at the tail (a
  crash mid-write) is cut off and logged.
"""

from __future__ import annotations

import io
import itertools
import logging
import os
import struct
import time
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from services.runtime.metrics import SPOOL_DROPPED

log = logging.getLogger(__name__)
_FRAME: Final = struct.Struct("<II")
_U16: Final = struct.Struct("<H")
_HEAD: Final = "HEAD"
_SUFFIX: Final = ".seg"
Headers = Sequence[tuple[str, bytes]]


@dataclass(frozen=True)
class SpoolRecord:
    index: int
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


@dataclass
class _Entry:
    index: int
    segment: int
    offset: int
    size: int


def encode_body(key: bytes, value: bytes, headers: Headers) -> bytes:
    parts = [_U16.pack(len(key)), key, _U16.pack(len(headers))]
    for name, hval in headers:
        raw = name.encode()
        parts += [_U16.pack(len(raw)), raw, _U16.pack(len(hval)), hval]
    parts.append(value)
    return b"".join(parts)


def decode_body(body: bytes) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    pos = 0

    def take16() -> bytes:
        nonlocal pos
        (n,) = _U16.unpack_from(body, pos)
        pos += 2
        chunk = body[pos : pos + n]
        pos += n
        return chunk

    key = take16()
    (count,) = _U16.unpack_from(body, pos)
    pos += 2
    headers = []
    for _ in range(count):
        name = take16().decode()
        headers.append((name, take16()))
    return key, body[pos:], headers


class Spool:
    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = 64 * 1024 * 1024,
        segment_bytes: int | None = None,
        fsync: bool = False,
        log_every_s: float = 10.0,
    ) -> None:
        if max_bytes < 1024:
            raise ValueError("spool max_bytes must be at least 1 KiB")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(64 * 1024, max_bytes // 8)
        self.fsync = fsync
        self.log_every_s = log_every_s
        self.dropped = 0
        self._entries: deque[_Entry] = deque()
        self._live_bytes = 0
        self._next_index = 0
        self._write_seg: int | None = None
        self._write_fh: io.BufferedWriter | None = None
        self._write_size = 0
        self._read_fds: dict[int, int] = {}
        self._last_drop_log = 0.0
        self._unlogged_drops = 0
        self._recover()

    # ------------------------------------------------------------------ state
    def __len__(self) -> int:
        return len(self._entries)

    @property
    def live_bytes(self) -> int:
        return self._live_bytes

    @property
    def next_index(self) -> int:
        return self._next_index

    def _seg_path(self, seg: int) -> Path:
        return self.dir / f"{seg:020d}{_SUFFIX}"

    def _segments(self) -> list[int]:
        return sorted(
            int(p.name[: -len(_SUFFIX)]) for p in self.dir.glob(f"*{_SUFFIX}") if p.name[: -len(_SUFFIX)].isdigit()
        )

    # --------------------------------------------------------------- recovery
    def _recover(self) -> None:
        head = self._read_head()
        self._next_index = head or 0  # indices (and segment names) never go backwards
        segments = self._segments()
        for seg in segments:
            self._scan(seg, head or 0, is_last=seg == segments[-1])
        # Segments whose records were all delivered (below HEAD) are garbage; keep the last (write) one.
        for seg in segments[:-1]:
            if not any(e.segment == seg for e in self._entries):
                self._seg_path(seg).unlink(missing_ok=True)
        live_segments = self._segments()
        if live_segments:
            last = live_segments[-1]
            self._write_seg = last
            self._write_size = self._seg_path(last).stat().st_size
        if self._entries:
            log.info(
                "spool %s: recovered %d undelivered record(s), %d bytes", self.dir, len(self._entries), self._live_bytes
            )
        self._enforce_bound(0)

    def _read_head(self) -> int | None:
        """Index of the first undelivered record (every record below it was delivered or dropped)."""
        try:
            return int((self.dir / _HEAD).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _scan(self, seg: int, first_live: int, *, is_last: bool) -> None:
        path = self._seg_path(seg)
        data = path.read_bytes()
        index = seg
        pos = 0
        while pos < len(data):
            if pos + _FRAME.size > len(data):
                break
            length, crc = _FRAME.unpack_from(data, pos)
            end = pos + _FRAME.size + length
            if end > len(data) or zlib.crc32(data[pos + _FRAME.size : end]) != crc:
                break
            if index >= first_live:
                self._entries.append(_Entry(index, seg, pos, end - pos))
                self._live_bytes += end - pos
            index += 1
            pos = end
        self._next_index = max(self._next_index, index)
        if pos < len(data):
            if is_last:
                log.warning("spool %s: cutting a torn record at the end of %s (offset %d)", self.dir, path.name, pos)
                with open(path, "r+b") as fh:
                    fh.truncate(pos)
            else:
                log.warning("spool %s: %s is corrupt from offset %d; skipping the rest", self.dir, path.name, pos)

    # ----------------------------------------------------------------- append
    def append(self, key: bytes, value: bytes, headers: Headers = ()) -> int:
        """Store one record; returns its index. Drops the oldest records when over the bound."""
        body = encode_body(key, value, headers)
        size = _FRAME.size + len(body)
        if size > self.max_bytes:
            self._count_drop(1, "record larger than the whole spool")
            return -1
        self._enforce_bound(size)
        frame = _FRAME.pack(len(body), zlib.crc32(body)) + body
        try:
            if self._write_seg is None or self._write_size >= self.segment_bytes:
                self._roll()
            segment = self._write_seg
            fh = self._write_fh
            if fh is None or segment is None:
                segment = self._write_seg = self._next_index if segment is None else segment
                fh = self._write_fh = open(self._seg_path(segment), "ab")  # noqa: SIM115 - kept open across appends
            fh.write(frame)
            fh.flush()
            if self.fsync:
                os.fsync(fh.fileno())
        except OSError as exc:  # disk full, read-only, …: lose this sample, never the process or the segment
            self._abandon_write()
            self._count_drop(1, f"cannot write ({exc.strerror or exc})")
            return -1
        index = self._next_index
        self._entries.append(_Entry(index, segment, self._write_size, size))
        self._write_size += size
        self._live_bytes += size
        self._next_index += 1
        return index

    def _abandon_write(self) -> None:
        """After a failed write: cut any partial frame so the segment stays readable, reopen on next append."""
        fh, self._write_fh = self._write_fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass
        if self._write_seg is not None:
            try:
                os.truncate(self._seg_path(self._write_seg), self._write_size)
            except OSError:
                pass

    def _roll(self) -> None:
        if self._write_fh is not None:
            self._write_fh.close()
            self._write_fh = None
        self._write_seg = self._next_index
        self._write_size = 0
        self._seg_path(self._write_seg).touch()

    def _enforce_bound(self, incoming: int) -> None:
        dropped = 0
        while self._entries and self._live_bytes + incoming > self.max_bytes:
            entry = self._entries.popleft()
            self._live_bytes -= entry.size
            dropped += 1
        if dropped:
            self._count_drop(dropped, "spool full")
            self._collect_segments()
            self._write_head()

    def _count_drop(self, count: int, why: str) -> None:
        self.dropped += count
        SPOOL_DROPPED.inc(count)
        self._unlogged_drops += count
        now = time.monotonic()
        if now - self._last_drop_log >= self.log_every_s:
            log.warning(
                "spool %s: %s, dropped the %d oldest sample(s) (%d dropped in total, limit %d bytes)",
                self.dir,
                why,
                self._unlogged_drops,
                self.dropped,
                self.max_bytes,
            )
            self._last_drop_log = now
            self._unlogged_drops = 0

    # ------------------------------------------------------------------ drain
    def peek(self, limit: int) -> list[SpoolRecord]:
        out = []
        for entry in list(itertools.islice(self._entries, max(0, limit))):
            fd = self._read_fds.get(entry.segment)
            if fd is None:
                fd = self._read_fds[entry.segment] = os.open(self._seg_path(entry.segment), os.O_RDONLY)
            frame = os.pread(fd, entry.size, entry.offset)
            key, value, headers = decode_body(frame[_FRAME.size :])
            out.append(SpoolRecord(entry.index, key, value, headers))
        return out

    def commit(self, through_index: int) -> int:
        """Forget every record with index <= through_index (delivered); returns how many."""
        count = 0
        while self._entries and self._entries[0].index <= through_index:
            entry = self._entries.popleft()
            self._live_bytes -= entry.size
            count += 1
        if count:
            self._collect_segments()
            self._write_head()
        return count

    def _collect_segments(self) -> None:
        first_live = self._entries[0].segment if self._entries else self._write_seg
        for seg in self._segments():
            if first_live is not None and seg >= first_live:
                break
            fd = self._read_fds.pop(seg, None)
            if fd is not None:
                os.close(fd)
            self._seg_path(seg).unlink(missing_ok=True)

    def _write_head(self) -> None:
        first = self._entries[0].index if self._entries else self._next_index
        tmp = self.dir / (_HEAD + ".tmp")
        tmp.write_text(f"{first}\n")
        os.replace(tmp, self.dir / _HEAD)

    def close(self) -> None:
        if self._write_fh is not None:
            self._write_fh.close()
            self._write_fh = None
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
