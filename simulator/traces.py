"""Job traces in the common CSV schema of `shared/traces` (plain or gzipped).

Schema (see `shared/traces/README.md`): `job_id, submit_time_s, num_gpus,
duration_s` are required on every row; `gpu_type, user, status, vc, num_nodes,
num_cpus, memory_mib, gpu_milli, qos, submit_datetime` may be empty. Rows are
sorted by submission time, and jobs submitted in the same second keep the
file's row order (DESIGN §6), which is the order the simulator delivers them.

A bad row is an error naming the file, the line and the field, never a job
silently dropped or repaired.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

REQUIRED_COLUMNS: tuple[str, ...] = ("job_id", "submit_time_s", "num_gpus", "duration_s")
OPTIONAL_COLUMNS: tuple[str, ...] = (
    "gpu_type",
    "user",
    "status",
    "vc",
    "num_nodes",
    "num_cpus",
    "memory_mib",
    "gpu_milli",
    "qos",
    "submit_datetime",
)
COLUMNS: tuple[str, ...] = REQUIRED_COLUMNS + OPTIONAL_COLUMNS


class TraceError(ValueError):
    """A trace file that does not follow the common schema."""

    def __init__(self, path: str, line: int, field: str | None, message: str) -> None:
        # A problem of the file itself (its encoding) names no field.
        where = f"line {line}" if field is None else f"line {line}, field {field!r}"
        super().__init__(f"{path}, {where}: {message}")
        self.path = path
        self.line = line
        self.field = field


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One row of a trace: a job as it was recorded."""

    job_id: str
    submit_time_s: float
    num_gpus: int
    duration_s: float
    gpu_type: str = ""
    user: str = ""
    status: str = ""
    vc: str = ""
    num_nodes: int | None = None
    num_cpus: float | None = None
    memory_mib: float | None = None
    gpu_milli: int | None = None
    qos: str = ""
    line: int = 0

    @property
    def tenant(self) -> str:
        """The tenant a cluster manager would bill: the user, else the virtual cluster."""
        return self.user or self.vc or "default"


def _open_bytes(path: Path) -> gzip.GzipFile | io.BufferedReader:
    """The file's bytes, gunzipped when it is gzip (by its magic, not its name)."""
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return path.open("rb")


def _open_text(path: Path) -> io.TextIOBase:
    return io.TextIOWrapper(_open_bytes(path), encoding="utf-8", newline="")


def _first_undecodable(path: Path) -> tuple[int, int]:
    """The line (from 1) and value of the first byte of `path` that is not UTF-8.

    The text reader decodes a block at a time, so its line count says nothing of where
    the bad byte is: the raw lines are read again, only on this error's path.
    """
    with _open_bytes(path) as raw:
        for number, line in enumerate(raw, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                return number, line[error.start]
    return 1, 0


class _RowReader:
    """Parses the fields of one row, raising TraceError that names line and field."""

    def __init__(self, path: str, line: int, row: Mapping[str, str | None]) -> None:
        self.path = path
        self.line = line
        self.row = row

    def fail(self, field: str, message: str) -> TraceError:
        return TraceError(self.path, self.line, field, message)

    def text(self, field: str) -> str:
        return (self.row.get(field) or "").strip()

    def number(self, field: str, *, required: bool, minimum: float, strict: bool) -> float | None:
        raw = self.text(field)
        if not raw:
            if required:
                raise self.fail(field, "is empty but required")
            return None
        try:
            value = float(raw)
        except ValueError:
            raise self.fail(field, f"{raw!r} is not a number") from None
        if not math.isfinite(value):
            raise self.fail(field, f"{raw!r} is not finite")
        if value < minimum or (strict and value == minimum):
            relation = ">" if strict else ">="
            raise self.fail(field, f"{raw!r} must be {relation} {minimum:g}")
        return value

    def integer(self, field: str, *, required: bool, minimum: int) -> int | None:
        value = self.number(field, required=required, minimum=minimum, strict=False)
        if value is None:
            return None
        if value != int(value):
            raise self.fail(field, f"{self.text(field)!r} is not a whole number")
        return int(value)


def read_trace(path: str | Path, max_jobs: int | None = None) -> list[TraceJob]:
    """The jobs of a trace file, in row order (the first `max_jobs` when given)."""
    return list(iter_trace(path, max_jobs))


def iter_trace(path: str | Path, max_jobs: int | None = None) -> Iterator[TraceJob]:
    source = Path(path)
    name = str(source)
    if max_jobs is not None and max_jobs < 0:
        raise ValueError("max_jobs must be >= 0")
    with _open_text(source) as handle:
        reader = csv.DictReader(handle)
        try:
            header = reader.fieldnames
            if header is None:
                raise TraceError(name, 1, "header", "the file is empty")
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise TraceError(name, 1, missing[0], "required column is missing from the header")
            unknown = [c for c in header if c not in COLUMNS]
            if unknown:
                raise TraceError(
                    name, 1, unknown[0], f"unknown column; the schema has {', '.join(COLUMNS)}"
                )
            numbered = ((reader.line_num, row) for row in reader)
            yield from parse_rows(name, numbered, max_jobs)
        except UnicodeDecodeError:
            line, byte = _first_undecodable(source)
            raise TraceError(name, line, None, f"not UTF-8 text (byte 0x{byte:02x})") from None


def trace_from_rows(rows: Sequence[Mapping[str, object]], name: str = "trace") -> list[TraceJob]:
    """The jobs of rows given as mappings of the schema's columns (e.g. JSON objects).

    Checked like a file's rows; a :class:`TraceError`'s `line` is then the row's index.
    """
    for index, row in enumerate(rows):
        unknown = [c for c in row if c not in COLUMNS]
        if unknown:
            raise TraceError(
                name, index, unknown[0], f"unknown column; the schema has {', '.join(COLUMNS)}"
            )
        missing = [c for c in REQUIRED_COLUMNS if row.get(c) is None]
        if missing:
            raise TraceError(name, index, missing[0], "is missing but required")
    as_text = (
        (index, {c: "" if v is None else str(v) for c, v in row.items()})
        for index, row in enumerate(rows)
    )
    return list(parse_rows(name, as_text, None))


def parse_rows(
    name: str, rows: Iterable[tuple[int, Mapping[str, str | None]]], max_jobs: int | None
) -> Iterator[TraceJob]:
    """Jobs from (line, row) pairs of text cells, in order, checked against the schema."""
    seen: set[str] = set()
    last_submit = -math.inf
    for count, (line, row) in enumerate(rows):
        if max_jobs is not None and count >= max_jobs:
            return
        if None in row:
            raise TraceError(name, line, "row", "more cells than the header has columns")
        parse = _RowReader(name, line, row)
        job_id = parse.text("job_id")
        if not job_id:
            raise parse.fail("job_id", "is empty but required")
        if job_id in seen:
            raise parse.fail("job_id", f"{job_id!r} appears twice")
        seen.add(job_id)
        submit = parse.number("submit_time_s", required=True, minimum=0.0, strict=False)
        assert submit is not None
        if submit < last_submit:
            raise parse.fail(
                "submit_time_s",
                f"{submit:g} is earlier than the row before ({last_submit:g}); "
                "rows must be sorted by submission time",
            )
        last_submit = submit
        gpus = parse.integer("num_gpus", required=True, minimum=1)
        duration = parse.number("duration_s", required=True, minimum=0.0, strict=True)
        assert gpus is not None
        assert duration is not None
        gpu_milli = parse.integer("gpu_milli", required=False, minimum=1)
        if gpu_milli is not None and gpu_milli > 1000:
            raise parse.fail("gpu_milli", f"{gpu_milli} exceeds 1000 (one whole GPU)")
        yield TraceJob(
            job_id=job_id,
            submit_time_s=submit,
            num_gpus=gpus,
            duration_s=duration,
            gpu_type=parse.text("gpu_type"),
            user=parse.text("user"),
            status=parse.text("status"),
            vc=parse.text("vc"),
            num_nodes=parse.integer("num_nodes", required=False, minimum=1),
            num_cpus=parse.number("num_cpus", required=False, minimum=0.0, strict=False),
            memory_mib=parse.number("memory_mib", required=False, minimum=0.0, strict=False),
            gpu_milli=gpu_milli,
            qos=parse.text("qos"),
            line=line,
        )


def write_trace(jobs: Iterable[TraceJob], path: str | Path) -> None:
    """Write jobs in the common schema (gzipped when the name ends in `.gz`)."""
    target = Path(path)
    if target.suffix == ".gz":
        with gzip.open(target, "wt", encoding="utf-8", newline="") as handle:
            _write_rows(handle, jobs)
    else:
        with target.open("w", encoding="utf-8", newline="") as handle:
            _write_rows(handle, jobs)


def _write_rows(handle: TextIO, jobs: Iterable[TraceJob]) -> None:
    writer = csv.writer(handle)
    writer.writerow(COLUMNS)
    for job in jobs:
        writer.writerow(_row(job))


def _fmt(value: float | int | None) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _row(job: TraceJob) -> Sequence[str]:
    return (
        job.job_id,
        _fmt(job.submit_time_s),
        str(job.num_gpus),
        _fmt(job.duration_s),
        job.gpu_type,
        job.user,
        job.status,
        job.vc,
        _fmt(job.num_nodes),
        _fmt(job.num_cpus),
        _fmt(job.memory_mib),
        _fmt(job.gpu_milli),
        job.qos,
        "",
    )


def compress_arrivals(rows: Sequence[TraceJob], factor: float) -> list[TraceJob]:
    """The rows with their arrival gaps divided by `factor` (durations and order unchanged).

    A documented way to load a cluster harder with a real trace's jobs, for evidence
    runs where the recorded window never fills the cluster.
    """
    if not rows:
        return []
    start = rows[0].submit_time_s
    return [replace(r, submit_time_s=start + (r.submit_time_s - start) / factor) for r in rows]
