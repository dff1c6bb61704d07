"""A streaming Perfetto trace writer: processes, threads, plain and counter tracks, slices, counters, flows.

The layer under `torchsim.exports.perfetto`: it writes native TracePacket protobufs (the `perfetto`
package's classes) in batches to a binary file, interns event and argument names, and keeps the counts
that the trace checker and the UI test compare against.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

ArgValue = int | float | str | bool
SEQUENCE_ID = 1
_CLEARED = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_NEEDS_STATE = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_BEGIN, _END, _COUNTER = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_COUNTER


@dataclass(slots=True)
class TraceStats:
    """What a trace holds; the writer counts it, `check.check_trace` recounts it from the file."""

    processes: int = 0
    threads: int = 0
    tracks: int = 0  # every track descriptor, processes and threads included
    counter_tracks: int = 0
    slice_tracks: int = 0  # tracks holding at least one slice
    slices: int = 0
    counters: int = 0  # counter values
    flows: int = 0  # terminated flows (arrows)
    max_depth: int = 0


class TraceWriter:
    """Writes one trace to `out`; call `close()` (or use it as a context manager) to flush.

    Example:
        >>> import io
        >>> buf = io.BytesIO()
        >>> with TraceWriter(buf) as w:
        ...     gpu = w.process("H100")
        ...     s0 = w.thread(gpu, "stream 0")
        ...     w.begin(0, s0, "gemm", {"cycles": 1980})
        ...     w.end(1000, s0)
        >>> w.stats.slices
        1
    """

    def __init__(self, out: IO[bytes], batch_packets: int = 8192) -> None:
        self._out = out
        self._batch = Trace()
        self._batch_packets = batch_packets
        self._first = True
        self._next_uuid = 1
        self._next_pid = 1
        self._next_tid = 1_000_000
        self._next_flow = 1
        self._names: dict[str, int] = {}
        self._arg_names: dict[str, int] = {}
        self._strings: dict[str, int] = {}
        self._arg_sets: dict[tuple[tuple[str, ArgValue], ...], TrackEvent] = {}
        self._arg_hits = 0
        self._open: dict[int, int] = {}  # track uuid -> open slice depth
        self._counter_tracks: set[int] = set()
        self._slice_tracks: set[int] = set()
        self._pid_of: dict[int, int] = {}
        self._current = TracePacket()
        self.stats = TraceStats()
        self.bytes_written = 0

    # -- tracks ------------------------------------------------------------------------------------------
    def _descriptor(self, name: str, parent: int | None) -> tuple[int, TracePacket]:
        uuid = self._next_uuid
        self._next_uuid += 1
        p = self._packet()
        td = p.track_descriptor
        td.uuid = uuid
        td.name = name
        if parent is not None:
            if parent not in self._pid_of:
                raise ValueError(f"track {name!r}: parent track {parent} was not declared by this writer")
            td.parent_uuid = parent
            self._pid_of[uuid] = self._pid_of[parent]
        self.stats.tracks += 1
        return uuid, p

    def process(self, name: str) -> int:
        """A process track (one per device, one per SM); returns its uuid."""
        pid = self._next_pid
        self._next_pid += 1
        uuid, p = self._descriptor(name, None)
        p.track_descriptor.process.pid = pid
        p.track_descriptor.process.process_name = name
        self._pid_of[uuid] = pid
        self.stats.processes += 1
        return uuid

    def thread(self, process: int, name: str) -> int:
        """A thread track inside `process`; tids are unique over the whole trace."""
        if process not in self._pid_of:
            raise ValueError(f"thread {name!r}: process track {process} was not declared by this writer")
        tid = self._next_tid
        self._next_tid += 1
        uuid, p = self._descriptor(name, None)
        p.track_descriptor.thread.pid = self._pid_of[process]
        p.track_descriptor.thread.tid = tid
        p.track_descriptor.thread.thread_name = name
        self._pid_of[uuid] = self._pid_of[process]
        self.stats.threads += 1
        return uuid

    def track(self, parent: int, name: str) -> int:
        """A plain slice track under `parent` (a process, a thread or another track)."""
        return self._descriptor(name, parent)[0]

    def counter_track(self, parent: int, name: str, unit: str) -> int:
        """A counter track under `parent`; `unit` is shown beside the values (e.g. "GB/s", "%")."""
        uuid, p = self._descriptor(name, parent)
        p.track_descriptor.counter.unit_name = unit
        self._counter_tracks.add(uuid)
        self.stats.counter_tracks += 1
        return uuid

    # -- events ------------------------------------------------------------------------------------------
    def new_flow(self) -> int:
        fid = self._next_flow
        self._next_flow += 1
        return fid

    def begin(self, ts_ns: int, track: int, name: str, args: Mapping[str, ArgValue] | None = None,
              flows_out: Iterable[int] = (), flows_in: Iterable[int] = (),
              unique_args: Mapping[str, int] | None = None) -> None:
        """Open a slice; `flows_out` start arrows here, `flows_in` end arrows here.

        `args` are encoded once per distinct set and reused (kernels repeat across layers and steps);
        `unique_args` (integers that differ per slice, e.g. a start cycle) are added as they are.
        """
        if track in self._counter_tracks:
            raise ValueError(f"slice {name!r} placed on counter track {track}")
        e = self._event(ts_ns, track, _BEGIN)
        e.name_iid = self._intern_name(name)
        e.flow_ids.extend(flows_out)
        inc = list(flows_in)
        if inc:
            e.terminating_flow_ids.extend(inc)
            self.stats.flows += len(inc)
        if args:
            arg_set = tuple(args.items())
            annotations = self._arg_sets.get(arg_set)
            if annotations is not None:
                self._arg_hits += 1
                e.MergeFrom(annotations)
            elif self._caching():
                annotations = self._arg_sets[arg_set] = TrackEvent()
                self._annotate(annotations, args)
                e.MergeFrom(annotations)
            else:
                self._annotate(e, args)
        for key, number in (unique_args or {}).items():
            a = e.debug_annotations.add()
            a.name_iid = self._intern(self._arg_names, key, "debug_annotation_names")
            a.int_value = number
        if track not in self._slice_tracks:
            self._slice_tracks.add(track)
            self.stats.slice_tracks += 1
        depth = self._open.get(track, 0) + 1
        self._open[track] = depth
        self.stats.slices += 1
        self.stats.max_depth = max(self.stats.max_depth, depth)

    def end(self, ts_ns: int, track: int) -> None:
        if self._open.get(track, 0) <= 0:
            raise ValueError(f"slice end at {ts_ns} ns on track {track} with no open slice")
        self._open[track] -= 1
        self._event(ts_ns, track, _END)

    def slice(self, ts_ns: int, dur_ns: int, track: int, name: str, args: Mapping[str, ArgValue] | None = None,
              flows_out: Iterable[int] = (), flows_in: Iterable[int] = (),
              unique_args: Mapping[str, int] | None = None) -> None:
        self.begin(ts_ns, track, name, args, flows_out, flows_in, unique_args)
        self.end(ts_ns + dur_ns, track)

    def counter(self, ts_ns: int, track: int, value: float) -> None:
        if track not in self._counter_tracks:
            raise ValueError(f"counter value on track {track}, which is not a counter track")
        self._event(ts_ns, track, _COUNTER).double_counter_value = float(value)
        self.stats.counters += 1

    # -- plumbing ----------------------------------------------------------------------------------------
    MAX_CACHED_ARG_SETS = 200_000

    def _caching(self) -> bool:
        """Cache argument sets while they repeat (kernels of other layers and steps); stop when they do not."""
        n = len(self._arg_sets)
        if n >= self.MAX_CACHED_ARG_SETS:
            return False
        return n < 1000 or self._arg_hits >= n

    def _annotate(self, holder: TrackEvent, args: Mapping[str, ArgValue]) -> None:
        """Add debug annotations for `args`, names and strings interned."""
        for key, value in args.items():
            a = holder.debug_annotations.add()
            a.name_iid = self._intern(self._arg_names, key, "debug_annotation_names")
            if isinstance(value, bool):
                a.bool_value = value
            elif isinstance(value, int):
                a.int_value = value
            elif isinstance(value, float):
                a.double_value = value
            else:
                a.string_value_iid = self._intern(self._strings, str(value), "debug_annotation_string_values")

    def _intern(self, table: dict[str, int], text: str, field: str) -> int:
        iid = table.get(text)
        if iid is None:
            iid = table[text] = len(table) + 1
            entry = getattr(self._current.interned_data, field).add()
            entry.iid = iid
            if field == "debug_annotation_string_values":
                entry.str = text.encode()
            else:
                entry.name = text
        return iid

    def _packet(self) -> TracePacket:
        """A new packet; the previous one is complete by now, so a full batch is written first."""
        if len(self._batch.packet) >= self._batch_packets:
            self._write_batch()
        p = self._batch.packet.add()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        if self._first:
            p.sequence_flags = _CLEARED
            self._first = False
        return p

    def _event(self, ts_ns: int, track: int, typ: int) -> TrackEvent:
        p = self._packet()
        p.timestamp = int(ts_ns)
        if not p.sequence_flags:
            p.sequence_flags = _NEEDS_STATE
        e = p.track_event
        e.type = typ  # type: ignore[assignment]
        e.track_uuid = track
        self._current = p
        return e

    def _intern_name(self, name: str) -> int:
        return self._intern(self._names, name, "event_names")

    def _write_batch(self) -> None:
        if len(self._batch.packet):
            data = self._batch.SerializeToString()
            self._out.write(data)
            self.bytes_written += len(data)
            self._batch = Trace()

    def close(self) -> TraceStats:
        open_tracks = [t for t, d in self._open.items() if d]
        if open_tracks:
            raise ValueError(f"trace closed with open slices on tracks {open_tracks[:5]}")
        self._write_batch()
        return self.stats

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
