"""Per-rank task graphs: GPU kernels on streams, CPU launch work, data dependencies and collectives.

A :class:`TaskGraph` is built node by node (cheap Python appends) and then :meth:`TaskGraph.compile`-d into
flat numpy arrays that :func:`hybrid.engine.simulate.simulate` evaluates. Semantics:

* every node belongs to one ``(rank, stream)``; nodes on a stream run in the order they were added
  (stream order is an implicit dependency);
* ``deps`` are explicit dependencies (data dependencies, or cross-stream waits inside a rank, like
  ``cudaStreamWaitEvent``), possibly across ranks;
* a node's duration is ``fixed_us`` + the predicted time of its ``op`` (a row of the canonical measurement
  table, costed in one batch for the whole graph) + the calibrated overhead of its ``overhead`` category
  (see :class:`hybrid.engine.overheads.Overheads`) + its counts of host ops and kernel launches (``host_ops``,
  ``launches``: a traced step's host work, op by op) times the overheads' ``host_op_us`` and ``kernel_launch_us``;
* a *collective* is one node per participating rank; all of them start together once every participant
  has reached it (its own stream order and dependencies are satisfied) and last as long as the slowest
  member's estimate.
* :meth:`TaskGraph.kernel` adds a GPU kernel together with its CPU-side launch on the rank's host stream,
  so CPU-bound iterations (many small kernels) come out right;
* every node carries the *phase* that was current when it was added (:attr:`TaskGraph.phase`, e.g.
  ``"lookup_fwd"``), so a simulated timeline can be cut into the phases a real run times
  (:meth:`hybrid.engine.simulate.SimResult.phase_times`);
* ``comm_overlap`` of a collective (1 = fully hidden behind compute, like a GPU's separate comm stream; 0 =
  compute and communication share the same cores, like gloo on a CPU) adds, per member, an *interference*
  node on the compute stream that starts with the collective (or once the compute stream before it is free) and
  lasts ``1 - comm_overlap`` of its time; the collective itself does not wait for the compute stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hybrid.errors import InvalidInputError

#: Node kinds; the breakdown counts ``compute`` and ``comm`` GPU time and ``cpu`` host time.
KINDS: tuple[str, ...] = ("compute", "comm", "cpu", "sync")
COMPUTE, COMM, CPU, SYNC = range(4)

#: Overhead categories a node can carry (index into the vector of :class:`Overheads`).
OVERHEAD_CATEGORIES: tuple[str, ...] = ("none", "kernel_launch", "collective_launch", "optimizer_step",
                                        "iteration")

#: Default stream names.
HOST, COMPUTE_STREAM, COMM_STREAM = "host", "compute", "comm"


def _check_duration(what: str, duration_us: Any) -> None:
    """A node's fixed duration: a finite number >= 0 (a string was a bare ``'<' not supported`` TypeError)."""
    if isinstance(duration_us, (bool, np.bool_)) or not isinstance(duration_us, (int, float, np.integer,
                                                                                  np.floating)):
        raise InvalidInputError(f"{what}: duration must be a number of us, got {duration_us!r}")
    if duration_us < 0 or not np.isfinite(duration_us):
        raise InvalidInputError(f"{what}: duration must be finite and >= 0, got {duration_us}")


@dataclass
class CompiledGraph:
    """Flat arrays describing a task graph (node ``i`` is row ``i`` everywhere).

    ``edges_src``/``edges_dst`` include stream order and collective synchronisation through virtual
    ``sync`` nodes (kind ``SYNC``, rank -1). ``own_dst`` gives, for each edge, the member node it originally
    pointed to (before collectives were redirected through their sync node), used to measure waiting.
    """

    names: list[str]
    rank: np.ndarray  # int32, -1 for virtual sync nodes
    stream: np.ndarray  # int32 index into ``stream_names`` (-1 for sync nodes)
    stream_names: list[tuple[int, str]]  # (rank, stream name) per stream index
    kind: np.ndarray  # int8, index into KINDS
    fixed_us: np.ndarray  # float64
    op_index: np.ndarray  # int64 index into ``ops`` (-1 = no op)
    overhead: np.ndarray  # int8 index into OVERHEAD_CATEGORIES
    group: np.ndarray  # int64 collective id (-1 = none)
    edges_src: np.ndarray
    edges_dst: np.ndarray
    own_dst: np.ndarray
    ops: pd.DataFrame  # unique op rows (canonical measurement-table columns)
    args: list[dict[str, Any] | None]
    n_ranks: int
    n_real: int  # nodes before the virtual sync nodes
    phase: np.ndarray | None = None  # int16 index into ``phase_names`` (-1 = none)
    phase_names: tuple[str, ...] = ()
    scale: np.ndarray | None = None  # float64 multiplier of a node's op time (interference nodes: 1 - overlap)
    interference: np.ndarray | None = None  # bool: compute-stream share of a collective (comm_overlap < 1)
    synchronous_host: bool = False  # built with TaskGraph.synchronous_host (the host waits for every kernel)
    #: per node: host ops (ATen ops, autograd nodes) and kernel launches it stands for, priced by the overheads'
    #: ``host_op_us`` / ``kernel_launch_us`` (None: no node carries any)
    host_ops: np.ndarray | None = None
    launches: np.ndarray | None = None
    #: built with TaskGraph.overlap_iterations (consecutive iterations overlap: the steady state is resource-bound)
    overlap_iterations: bool = False

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class TaskGraph:
    """Builder for a multi-rank task graph."""

    n_ranks: int
    _names: list[str] = field(default_factory=list)
    _rank: list[int] = field(default_factory=list)
    _stream: list[int] = field(default_factory=list)
    _kind: list[int] = field(default_factory=list)
    _fixed: list[float] = field(default_factory=list)
    _op: list[int] = field(default_factory=list)
    _overhead: list[int] = field(default_factory=list)
    _group: list[int] = field(default_factory=list)
    _args: list[dict[str, Any] | None] = field(default_factory=list)
    _src: list[int] = field(default_factory=list)
    _dst: list[int] = field(default_factory=list)
    _streams: dict[tuple[int, str], int] = field(default_factory=dict)
    _last_on_stream: list[int] = field(default_factory=list)
    _ops: list[dict[str, Any]] = field(default_factory=list)
    _op_keys: dict[tuple, int] = field(default_factory=dict)
    _n_groups: int = 0
    _phase: list[int] = field(default_factory=list)
    _phase_ids: dict[str, int] = field(default_factory=dict)
    _scale: list[float] = field(default_factory=list)
    _interference: set[int] = field(default_factory=set)
    _host_counts: dict[int, tuple[float, float]] = field(default_factory=dict)
    _kernel_launches: set[int] = field(default_factory=set)
    #: phase given to the nodes added from now on ("" = none); builders set it as they go
    phase: str = ""
    #: the host waits for every kernel it launches before launching the next (eager execution on a CPU device:
    #: dispatch and compute share one thread); False: kernels queue on streams while the host runs ahead (GPU)
    synchronous_host: bool = False
    #: the program overlaps consecutive iterations (a software pipeline: the next iteration's exchanges and index
    #: work are issued while this one computes), so the steady-state iteration is set by each rank's busiest
    #: resource, not by one iteration's critical path (:func:`hybrid.engine.simulate.resource_busy_us`)
    overlap_iterations: bool = False

    def __post_init__(self) -> None:
        try:
            whole = int(self.n_ranks) == self.n_ranks and not isinstance(self.n_ranks, bool)
        except (TypeError, ValueError, OverflowError):
            whole = False
        if not whole or int(self.n_ranks) <= 0:  # TaskGraph(1.5) was a graph of 1.5 ranks (int() where used)
            raise InvalidInputError(f"a task graph needs a whole number of ranks, at least one, got {self.n_ranks!r}")
        self.n_ranks = int(self.n_ranks)

    def __len__(self) -> int:
        return len(self._names)

    # ---------------------------------------------------------------------------------------------- pieces
    def stream_id(self, rank: int, stream: str) -> int:
        key = (int(rank), str(stream))
        sid = self._streams.get(key)
        if sid is None:
            if not 0 <= key[0] < self.n_ranks:
                raise InvalidInputError(f"rank {rank} out of range for {self.n_ranks} ranks")
            sid = self._streams[key] = len(self._streams)
            self._last_on_stream.append(-1)
        return sid

    def op_id(self, op: Mapping[str, Any]) -> int:
        """Index of ``op`` in the graph's table of unique ops (identical rows are costed once)."""
        key = tuple(sorted(op.items()))
        idx = self._op_keys.get(key)
        if idx is None:
            idx = self._op_keys[key] = len(self._ops)
            self._ops.append(dict(op))
        return idx

    def add(
        self,
        rank: int,
        stream: str,
        name: str,
        *,
        op: Mapping[str, Any] | None = None,
        duration_us: float = 0.0,
        deps: Iterable[int] = (),
        kind: str = "compute",
        overhead: str = "none",
        args: dict[str, Any] | None = None,
        phase: str | None = None,
        host_ops: float = 0.0,
        launches: float = 0.0,
        _group: int = -1,
        _scale: float = 1.0,
    ) -> int:
        """Append a node on ``(rank, stream)`` after that stream's previous node; returns its id.

        ``phase`` defaults to the builder's current :attr:`phase`. ``host_ops`` / ``launches``: the host ops
        (ATen ops, autograd nodes) and kernel launches the node stands for, each priced by the overheads
        (:attr:`~hybrid.engine.overheads.Overheads.host_op_us`, ``kernel_launch_us``) on top of its duration."""
        _check_duration(f"node {name!r}", duration_us)
        if host_ops or launches:  # (most nodes carry none: no checks on the builders' hot path)
            for what, count in (("host_ops", host_ops), ("launches", launches)):
                _check_duration(f"node {name!r} {what}", count)
        # every check before the first append: a refused node left the graph's per-node lists of unequal
        # lengths (an unknown kind was a bare "tuple.index(x): x not in tuple" after name, rank and stream were in)
        if kind not in KINDS:
            raise InvalidInputError(f"node {name!r}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if overhead not in OVERHEAD_CATEGORIES:
            raise InvalidInputError(f"node {name!r}: overhead must be one of {', '.join(OVERHEAD_CATEGORIES)}, "
                                    f"got {overhead!r}")
        if op is not None and not isinstance(op, Mapping):
            raise InvalidInputError(f"node {name!r}: op must be a mapping of column -> value (one table row), got "
                                    f"{type(op).__name__}")
        nid = len(self._names)
        deps = [d for d in deps if d is not None]
        for d in deps:
            if not 0 <= d < nid:
                raise InvalidInputError(f"node {name!r}: dependency {d} does not exist yet")
        sid = self.stream_id(rank, stream)
        oid = self.op_id(op) if op is not None else -1
        self._names.append(name)
        self._rank.append(int(rank))
        self._stream.append(sid)
        self._kind.append(KINDS.index(kind))
        self._fixed.append(float(duration_us))
        self._op.append(oid)
        self._overhead.append(OVERHEAD_CATEGORIES.index(overhead))
        self._group.append(_group)
        self._args.append(args)
        ph = self.phase if phase is None else phase
        if ph:
            pid = self._phase_ids.setdefault(str(ph), len(self._phase_ids))
        else:
            pid = -1
        self._phase.append(pid)
        self._scale.append(float(_scale))
        if host_ops or launches:
            self._host_counts[nid] = (float(host_ops), float(launches))
        prev = self._last_on_stream[sid]
        if prev >= 0:
            self._src.append(prev)
            self._dst.append(nid)
        self._last_on_stream[sid] = nid
        for d in deps:
            self._src.append(int(d))
            self._dst.append(nid)
        return nid

    def kernel(
        self,
        rank: int,
        name: str,
        op: Mapping[str, Any] | None = None,
        *,
        stream: str = COMPUTE_STREAM,
        deps: Iterable[int] = (),
        duration_us: float = 0.0,
        host_deps: Iterable[int] = (),
        args: dict[str, Any] | None = None,
        scale: float = 1.0,
    ) -> int:
        """A GPU kernel plus its CPU launch on the rank's host stream; returns the kernel's id.

        ``host_deps`` are dependencies of the launch itself (e.g. a host synchronisation). ``scale`` multiplies
        the op's predicted time (a measured op split over two nodes, say).
        """
        if not (np.isfinite(scale) and scale >= 0):
            raise InvalidInputError(f"kernel {name!r}: scale must be finite and >= 0, got {scale}")
        # what the kernel's own add would refuse, checked before its launch is added (a launch without its kernel)
        if op is not None and not isinstance(op, Mapping):
            raise InvalidInputError(f"kernel {name!r}: op must be a mapping of column -> value (one table row), got "
                                    f"{type(op).__name__}")
        deps = [d for d in deps if d is not None]
        for d in deps:
            if not 0 <= d < len(self._names):
                raise InvalidInputError(f"kernel {name!r}: dependency {d} does not exist yet")
        _check_duration(f"kernel {name!r}", duration_us)
        if self.synchronous_host:
            host_deps = [*host_deps, self.last(rank, stream)]
        launch = self.add(rank, HOST, f"launch {name}", kind="cpu", overhead="kernel_launch", deps=host_deps)
        self._kernel_launches.add(launch)
        return self.add(rank, stream, name, op=op, duration_us=duration_us, deps=[launch, *deps], kind="compute",
                        args=args, _scale=scale)

    def collective(
        self,
        name: str,
        ranks: Sequence[int],
        ops: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        duration_us: float = 0.0,
        deps: Mapping[int, Iterable[int]] | None = None,
        stream: str = COMM_STREAM,
        launch: bool = True,
        args: dict[str, Any] | None = None,
        comm_overlap: float = 1.0,
    ) -> dict[int, int]:
        """One synchronised collective over ``ranks``; ``ops`` is one op row or one per rank (or None: a
        fixed ``duration_us``).

        Returns ``{rank: node id}``. Each member depends on its own ``deps[rank]`` and (if ``launch``) on a
        CPU launch node on its host stream. With ``comm_overlap < 1`` each member also gets an interference
        node on its compute stream that starts with the collective (or once the compute stream before it is free:
        the collective does not wait for it), lasting ``1 - comm_overlap`` of the collective's time: the share of
        the communication that compute cannot overlap with (progress threads on the compute cores).
        """
        if not 0.0 <= float(comm_overlap) <= 1.0:
            raise InvalidInputError(f"collective {name!r}: comm_overlap must be in [0, 1], got {comm_overlap}")
        ranks = [int(r) for r in ranks]
        if not ranks:
            raise InvalidInputError(f"collective {name!r} has no participants")
        if len(set(ranks)) != len(ranks):
            raise InvalidInputError(f"collective {name!r} lists a rank twice")
        per_rank = [ops] * len(ranks) if ops is None or isinstance(ops, Mapping) else list(ops)
        if len(per_rank) != len(ranks):
            raise InvalidInputError(f"collective {name!r}: {len(per_rank)} op rows for {len(ranks)} ranks")
        # every check before the first member is added: a refusal at the second rank (out of range, a dependency
        # that does not exist, an op that is no row) left the first rank's launch and member in the graph, a
        # collective of one member that a caller who caught the error simulated without a word
        n_nodes = len(self._names)
        for rank, op in zip(ranks, per_rank, strict=True):
            if not 0 <= rank < self.n_ranks:
                raise InvalidInputError(f"collective {name!r}: rank {rank} out of range for {self.n_ranks} ranks")
            if op is not None and not isinstance(op, Mapping):
                raise InvalidInputError(f"collective {name!r}: the op of rank {rank} must be a mapping of column -> "
                                        f"value (one table row), got {type(op).__name__}")
            for d in (deps or {}).get(rank, ()):
                if d is not None and not 0 <= d < n_nodes:
                    raise InvalidInputError(f"collective {name!r}: dependency {d} of rank {rank} does not exist yet")
        gid = self._n_groups
        self._n_groups += 1
        out: dict[int, int] = {}
        for rank, op in zip(ranks, per_rank, strict=True):
            own = list((deps or {}).get(rank, ()))
            if launch:
                sync = [self.last(rank, COMPUTE_STREAM)] if self.synchronous_host else []
                own.append(self.add(rank, HOST, f"launch {name}", kind="cpu", overhead="collective_launch",
                                    deps=sync))
            out[rank] = self.add(rank, stream, name, op=op or None, duration_us=duration_us, deps=own, kind="comm",
                                 args=args, _group=gid)
            if comm_overlap < 1.0 and stream != COMPUTE_STREAM:
                self._interference.add(self.add(rank, COMPUTE_STREAM, f"{name} (compute interference)", op=op or None,
                                                duration_us=duration_us, deps=own, kind="comm", _group=gid,
                                                _scale=1.0 - comm_overlap))
        return out

    def price_host_by_ops(self, host_ops: Mapping[int, float]) -> None:
        """Price the host side op by op (:attr:`~hybrid.engine.overheads.Overheads.host_op_us` per host op,
        ``kernel_launch_us`` per kernel launch), as a traced GPU step's host is (``host="model"``): every kernel launch
        of :meth:`kernel` becomes one launch plus the host ops ``host_ops`` gives its node; every other node of the
        ``kernel_launch``, ``optimizer_step`` and ``iteration`` categories (a host wait, ``optimizer.step()``, the
        per-iteration work) only the host ops given (0 where none): the category's lump stood for that host work.
        Collective launches keep their category (the communication call's host side) plus any host ops given."""
        lumps = {OVERHEAD_CATEGORIES.index(c) for c in ("kernel_launch", "optimizer_step", "iteration")}
        none = OVERHEAD_CATEGORIES.index("none")
        for nid, n in host_ops.items():
            if not 0 <= nid < len(self._names):
                raise InvalidInputError(f"host ops given for node {nid}, which does not exist")
            _check_duration(f"node {self._names[nid]!r} host_ops", n)
        for nid in range(len(self._names)):
            if self._overhead[nid] not in lumps and nid not in host_ops:
                continue
            ops = float(host_ops.get(nid, 0.0)) + self._host_counts.get(nid, (0.0, 0.0))[0]
            launches = 1.0 if nid in self._kernel_launches else self._host_counts.get(nid, (0.0, 0.0))[1]
            if self._overhead[nid] in lumps:
                self._overhead[nid] = none
            if ops or launches:
                self._host_counts[nid] = (ops, launches)
            else:
                self._host_counts.pop(nid, None)

    def last(self, rank: int, stream: str) -> int | None:
        """The most recent node on ``(rank, stream)`` (None if the stream is empty)."""
        sid = self._streams.get((int(rank), str(stream)))
        if sid is None or self._last_on_stream[sid] < 0:
            return None
        return self._last_on_stream[sid]

    # ---------------------------------------------------------------------------------------------- compile
    def compile(self) -> CompiledGraph:
        """Freeze into arrays; collectives get a virtual sync node that all their members wait on."""
        n = len(self._names)
        if n == 0:
            raise InvalidInputError("task graph is empty")
        rank = np.asarray(self._rank, dtype=np.int32)
        stream = np.asarray(self._stream, dtype=np.int32)
        kind = np.asarray(self._kind, dtype=np.int8)
        fixed = np.asarray(self._fixed, dtype=np.float64)
        op_index = np.asarray(self._op, dtype=np.int64)
        overhead = np.asarray(self._overhead, dtype=np.int8)
        group = np.asarray(self._group, dtype=np.int64)
        src = np.asarray(self._src, dtype=np.int64)
        dst = np.asarray(self._dst, dtype=np.int64)
        own = dst.copy()
        names = list(self._names)
        args = list(self._args)
        n_groups = self._n_groups
        interference = np.zeros(n, dtype=bool)
        interference[list(self._interference)] = True
        if n_groups:
            # edges into a collective member go to the group's sync node; sync -> every member. An interference node
            # (comm_overlap < 1) keeps its own inputs (the compute stream before it) and only waits for the sync node:
            # it starts with the collective, or once the compute stream is free, but the collective does not wait for
            # the compute stream (that serialised every collective of overlap < 1 behind compute, as overlap 0 did)
            sync_of_group = n + np.arange(n_groups, dtype=np.int64)
            member_group = np.where(interference[dst], -1, group[dst])
            into_member = member_group >= 0
            dst = np.where(into_member, sync_of_group[np.maximum(member_group, 0)], dst)
            members = np.flatnonzero(group >= 0)
            src = np.concatenate([src, sync_of_group[group[members]]])
            dst = np.concatenate([dst, members])
            own = np.concatenate([own, members])
            rank = np.concatenate([rank, np.full(n_groups, -1, np.int32)])
            stream = np.concatenate([stream, np.full(n_groups, -1, np.int32)])
            kind = np.concatenate([kind, np.full(n_groups, SYNC, np.int8)])
            fixed = np.concatenate([fixed, np.zeros(n_groups)])
            op_index = np.concatenate([op_index, np.full(n_groups, -1, np.int64)])
            overhead = np.concatenate([overhead, np.zeros(n_groups, np.int8)])
            group = np.concatenate([group, np.arange(n_groups, dtype=np.int64)])
            names += [f"sync {i}" for i in range(n_groups)]
            args += [None] * n_groups
        stream_names = [key for key, _ in sorted(self._streams.items(), key=lambda kv: kv[1])]
        ops = pd.DataFrame(self._ops) if self._ops else pd.DataFrame()
        phase = np.concatenate([np.asarray(self._phase, dtype=np.int16), np.full(n_groups, -1, np.int16)])
        scale = np.concatenate([np.asarray(self._scale, dtype=np.float64), np.ones(n_groups)])
        phase_names = tuple(k for k, _ in sorted(self._phase_ids.items(), key=lambda kv: kv[1]))
        interference = np.concatenate([interference, np.zeros(n_groups, dtype=bool)])
        host_ops = launches = None
        if self._host_counts:
            host_ops, launches = np.zeros(n + n_groups), np.zeros(n + n_groups)
            at = np.fromiter(self._host_counts, dtype=np.int64, count=len(self._host_counts))
            counts = np.array(list(self._host_counts.values()), dtype=np.float64)
            host_ops[at], launches[at] = counts[:, 0], counts[:, 1]
        return CompiledGraph(names, rank, stream, stream_names, kind, fixed, op_index, overhead, group, src, dst,
                             own, ops, args, int(self.n_ranks), n, phase, phase_names, scale, interference,
                             bool(self.synchronous_host), host_ops, launches, bool(self.overlap_iterations))
