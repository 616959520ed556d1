"""Validation campaign: random DLRM configurations sized for the machine at hand, several sharding plans each,
measured with the real harness (:mod:`hybrid.bench.dlrm_harness`) into a results table.

Layout of a campaign directory (``datasets/dlrm-cpu-<name>/``)::

    results.csv            one row per measured (config, plan): median/std/min/max ms, phases, provenance
    configs/<config>.yaml  the exact DLRMConfig measured (``system`` is the config's nominal system)
    plans/<config>/<plan>.yaml

The campaign is resumable: (config, plan) pairs already in ``results.csv`` are skipped, and the table is
rewritten atomically after every configuration.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid.atomic import atomic_file, check_creatable
from hybrid.errors import ImportFormatError, InvalidInputError, SchemaError
from hybrid.sharding.plan import Shard, ShardingPlan
from hybrid.workloads.dlrm import DLRMConfig, TableConfig, write_document

#: Columns every results table has (plus one ``<phase>_ms`` column per harness phase).
RESULT_COLUMNS = ("config_name", "config_hash", "plan_name", "plan_hash", "ranks", "median_ms", "std_ms",
                  "min_ms", "max_ms", "p10_ms", "p90_ms", "iters", "warmup", "threads_per_rank", "backend",
                  "device", "config_file", "plan_file", "torch_version", "timestamp")


@dataclass(frozen=True)
class CampaignSpace:
    """Ranges random configurations are drawn from (defaults: a 2-core, 24 GiB CPU machine, 2 ranks)."""

    ranks: int = 2
    tables: tuple[int, int] = (8, 40)
    rows: tuple[float, float] = (1e3, 1e6)  #: log-uniform
    dims: tuple[int, ...] = (16, 32, 64, 128)
    pooling: tuple[float, float] = (1.0, 50.0)
    batch_sizes: tuple[int, ...] = (256, 512, 1024, 2048)  #: per rank
    dense_features: int = 13
    max_table_bytes: float = 1.5 * 2**30  #: all tables of a config together
    max_lookup_bytes: float = 96 * 2**20  #: pooled-lookup reads per iteration (global batch), bounds run time
    dp_max_rows: int = 20_000  #: tables this small may be data-parallel
    system: str = "local-cpu"
    #: probability that a configuration trains with sparse Adagrad instead of SGD (the same random draw either way,
    #: so the other fields of a seed's configurations do not depend on it)
    adagrad_share: float = 0.25

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise InvalidInputError(f"ranks must be >= 1, got {self.ranks}")
        if self.tables[0] < 1 or self.tables[0] > self.tables[1]:
            raise InvalidInputError(f"bad table-count range {self.tables}")
        if self.rows[0] < 1 or self.rows[0] > self.rows[1]:
            raise InvalidInputError(f"bad row range {self.rows}")
        if not 0.0 <= float(self.adagrad_share) <= 1.0:  # (NaN fails too)
            raise InvalidInputError(f"adagrad share must be in [0, 1], got {self.adagrad_share}")

    @classmethod
    def for_gpu(cls, ranks: int = 1, adagrad_share: float = 0.25) -> CampaignSpace:
        """Ranges for one GPU per rank (tens of GiB of HBM at TB/s): larger batches, tables and lookup volume, so
        that an iteration is not all kernel-launch overhead."""
        return cls(ranks=ranks, rows=(1e4, 1e7), batch_sizes=(2048, 4096, 8192, 16384),
                   max_table_bytes=12.0 * 2**30, max_lookup_bytes=2.0 * 2**30, system="local-cuda",
                   adagrad_share=adagrad_share)


def _lookup_bytes(tables: list[TableConfig], global_batch: int) -> float:
    return float(global_batch) * sum(t.pooling_factor * t.embedding_dim * 4 for t in tables)


def random_config(rng: np.random.Generator, name: str, space: CampaignSpace | None = None) -> DLRMConfig:
    """One random DLRM configuration within ``space`` (memory and per-iteration work bounded)."""
    sp = space or CampaignSpace()
    n_tables = int(rng.integers(sp.tables[0], sp.tables[1] + 1))
    interaction = "dot" if rng.random() < 0.5 else "cat"
    if interaction == "dot":
        dims = np.full(n_tables, int(rng.choice(sp.dims)))
    else:
        dims = rng.choice(np.asarray(sp.dims), n_tables)
    rows = np.exp(rng.uniform(np.log(sp.rows[0]), np.log(sp.rows[1]), n_tables)).astype(np.int64)
    # keep the total table size within budget (largest tables shrink first)
    while float(np.sum(rows * dims * 4)) > sp.max_table_bytes:
        i = int(np.argmax(rows * dims))
        rows[i] = max(int(sp.rows[0]), rows[i] // 2)
    pooling = np.round(rng.uniform(sp.pooling[0], sp.pooling[1], n_tables), 1)
    zipf = rng.random(n_tables) < 0.5
    alpha = np.round(rng.uniform(0.8, 1.2, n_tables), 3)
    tables = [TableConfig(f"t{i}", int(rows[i]), int(dims[i]), float(pooling[i]),
                          "zipf" if zipf[i] else "uniform", float(alpha[i]) if zipf[i] else 0.0)
              for i in range(n_tables)]
    batch = int(rng.choice(sp.batch_sizes))
    while batch > min(sp.batch_sizes) and _lookup_bytes(tables, batch * sp.ranks) > sp.max_lookup_bytes:
        batch //= 2
    scale = sp.max_lookup_bytes / _lookup_bytes(tables, batch * sp.ranks)
    if scale < 1:  # still too much work: thin the pooling factors
        tables = [TableConfig(t.name, t.num_embeddings, t.embedding_dim,
                              max(1.0, round(t.pooling_factor * scale, 1)), t.index_dist, t.zipf_alpha)
                  for t in tables]
    d_out = int(dims[0]) if interaction == "dot" else int(rng.choice(sp.dims))
    hidden = int(rng.choice([64, 128, 256]))
    bottom = [hidden, d_out] if rng.random() < 0.5 else [2 * hidden, hidden, d_out]
    top = [hidden, hidden // 2, 1] if rng.random() < 0.5 else [2 * hidden, 1]
    return DLRMConfig(
        tables=tuple(tables), name=name, system=sp.system, gpus=sp.ranks, batch_size_per_gpu=batch,
        dtype="fp32", dense_features=sp.dense_features, bottom_mlp=tuple(bottom), top_mlp=tuple(top),
        interaction=interaction, embedding_dim=d_out,
        optimizer="adagrad" if rng.random() < sp.adagrad_share else "sgd")


def generate_configs(n: int, seed: int = 0, space: CampaignSpace | None = None,
                     prefix: str = "c") -> list[DLRMConfig]:
    """``n`` random configurations, reproducible from ``seed`` (names ``c000``, ``c001``, ...)."""
    if n < 1:
        raise InvalidInputError(f"number of configs must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    return [random_config(rng, f"{prefix}{i:03d}", space) for i in range(n)]


# ----------------------------------------------------------------------------------------------- plans


def _greedy_table_wise(config: DLRMConfig, cost: Callable[[TableConfig], float]) -> ShardingPlan:
    """Largest-cost-first onto the least-loaded rank (longest-processing-time heuristic, no memory limit)."""
    load = np.zeros(config.gpus)
    shards = {}
    for t in sorted(config.tables, key=cost, reverse=True):
        r = int(np.argmin(load))
        load[r] += cost(t)
        shards[t.name] = Shard("table_wise", (r,))
    return ShardingPlan({t.name: shards[t.name] for t in config.tables})


def _lookup_cost(t: TableConfig) -> float:
    return t.pooling_factor * t.embedding_dim


def rank_capacity(ranks: int) -> float:
    """Memory per rank on this machine: physical memory shared evenly by the ranks."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 16 * 2**30
    return float(total) / max(1, ranks)


def baseline_plans(config: DLRMConfig, seed: int = 0, dp_max_rows: int = 20_000,
                   capacity: float | None = None) -> dict[str, ShardingPlan]:
    """Plans that need no predictor.

    From :mod:`hybrid.sharding.heuristics` (table-wise, memory-aware): ``size_greedy``, ``lookup_greedy``,
    ``size_lookup_greedy``, ``random``. Plus placements of other types: ``row_wise_all`` (every table split
    by rows over all ranks), ``column_wise_all`` (split by columns where the dimension divides, else
    lookup-greedy table-wise) and ``dp_small`` (tables of at most ``dp_max_rows`` rows replicated, the rest
    lookup-greedy table-wise).
    """
    from hybrid.sharding.heuristics import BASELINES

    cap = capacity if capacity is not None else rank_capacity(config.gpus)
    world = config.gpus
    plans: dict[str, ShardingPlan] = {}
    for name, fn in BASELINES.items():
        plans[name] = fn(config, cap, seed=seed) if name == "random" else fn(config, cap)
    if world > 1:
        everyone = tuple(range(world))
        plans["row_wise_all"] = ShardingPlan({t.name: Shard("row_wise", everyone) for t in config.tables})
        lookup = _greedy_table_wise(config, _lookup_cost)
        plans["column_wise_all"] = ShardingPlan({
            t.name: Shard("column_wise", everyone) if t.embedding_dim % world == 0 else lookup[t.name]
            for t in config.tables})
    small = [t for t in config.tables if t.num_embeddings <= dp_max_rows]
    if small:
        rest = [t for t in config.tables if t.num_embeddings > dp_max_rows]
        sub = _greedy_table_wise(config.with_(tables=tuple(rest)), _lookup_cost) if rest else {}
        plans["dp_small"] = ShardingPlan({t.name: Shard("data_parallel") if t.num_embeddings <= dp_max_rows
                                          else sub[t.name] for t in config.tables})
    for plan in plans.values():
        plan.validate(config)
    return plans


def searched_plan(config: DLRMConfig, model: Any, capacity: float | None = None, seed: int = 0,
                  time_budget_s: float = 5.0, system: str | None = None) -> ShardingPlan:
    """The plan :func:`hybrid.sharding.search.search_plans` finds fastest with cost model ``model``
    (searching as if the job ran on ``system``, default the config's own)."""
    from hybrid.sharding.search import search_plans

    cap = capacity if capacity is not None else rank_capacity(config.gpus)
    target = config.with_(system=system) if system else config
    return search_plans(target, model, strategies=["search"], capacity=cap, seed=seed,
                        time_budget_s=time_budget_s).best.plan.validate(config)


def campaign_plans(config: DLRMConfig, seed: int = 0, predictor: Any = None,
                   dp_max_rows: int = 20_000, search_system: str | None = None) -> dict[str, ShardingPlan]:
    """Baseline plans plus, given a cost model ``predictor``, the predictor-searched one (``search``, costed on
    ``search_system``); identical plans are measured once (the first name is kept)."""
    plans = baseline_plans(config, seed, dp_max_rows)
    if predictor is not None:
        plans["search"] = searched_plan(config, predictor, seed=seed, system=search_system)
    seen: set[ShardingPlan] = set()
    out = {}
    for name, plan in plans.items():
        if plan not in seen:
            seen.add(plan)
            out[name] = plan
    return out


# ------------------------------------------------------------------------------------------ results table


#: Columns naming the config and plan YAMLs stored beside a results table (:func:`load_pair`), relative to it.
STORED_FILE_COLUMNS = ("config_file", "plan_file")


def read_results(path: str | os.PathLike, *, stored_files: bool = False) -> pd.DataFrame:
    """Read a campaign results table (CSV), checking the required columns and values; with ``stored_files`` also
    the :data:`STORED_FILE_COLUMNS` a prediction of each row reads its config and plan from
    (:func:`check_stored_files`)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.csv"
    if not p.is_file():
        raise InvalidInputError(f"results table not found: {p}")
    from hybrid.data.importers._common import read_csv_checked

    need = ("config_name", "plan_name", "ranks", "median_ms", "std_ms", *(STORED_FILE_COLUMNS if stored_files else ()))
    # empty, header-only, malformed and truncated files (a last line cut mid-write) are errors naming the file
    try:
        df = read_csv_checked(p, need, what="campaign results")
    except ImportFormatError as exc:
        raise SchemaError(str(exc)) from None
    for c in ("median_ms", "std_ms"):
        v = pd.to_numeric(df[c], errors="coerce")
        bad = np.flatnonzero(~np.isfinite(v.to_numpy(dtype=float)) | (v.to_numpy(dtype=float) < 0)
                             | ((v.to_numpy(dtype=float) == 0) & (c == "median_ms")))
        if len(bad):
            raise SchemaError(f"{p}: row {int(bad[0]) + 2}: column {c} must be a positive number, "
                              f"got {str(df[c].iloc[bad[0]])!r}")
        df[c] = v
    ranks = pd.to_numeric(df["ranks"], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(ranks) | (ranks < 1) | (ranks != np.round(ranks)))
    if len(bad):  # read as the run's rank count: 'two' was a ValueError, 0 an error naming no row
        raise SchemaError(f"{p}: row {int(bad[0]) + 2}: column ranks must be a positive integer, "
                          f"got {str(df['ranks'].iloc[bad[0]])!r}")
    df["ranks"] = ranks.astype(np.int64)
    dup = df.duplicated(["config_name", "plan_name"])
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise SchemaError(f"{p}: row {i + 2}: duplicate (config, plan) "
                          f"({df['config_name'].iloc[i]}, {df['plan_name'].iloc[i]})")
    if stored_files:
        check_stored_files(df, p)
    return df


def check_stored_files(table: pd.DataFrame, where: str | os.PathLike) -> None:
    """:class:`SchemaError` naming the first missing :data:`STORED_FILE_COLUMNS` column or empty cell of ``table``
    (read from ``where``): a missing column was a bare ``KeyError: 'config_file'`` after the predictor's fit, an
    empty cell the config file ``nan`` beside the table."""
    missing = [c for c in STORED_FILE_COLUMNS if c not in table.columns]
    if missing:
        raise SchemaError(f"{where}: missing column(s) {', '.join(repr(c) for c in missing)}, which name the config "
                          "and plan files each row was measured on (configs/<config>.yaml, plans/<config>/<plan>.yaml,"
                          " as `hybrid bench campaign` and `hybrid bench dlrm -o` write them)")
    for c in STORED_FILE_COLUMNS:
        blank = np.flatnonzero(table[c].isna().to_numpy() | (table[c].astype(str).str.strip() == "").to_numpy())
        if len(blank):
            raise SchemaError(f"{where}: row {int(blank[0]) + 2}: column {c} is empty (it names the file of the "
                              f"row's {c.removesuffix('_file')}, relative to the table)")


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    with atomic_file(path) as tmp:
        df.to_csv(tmp, index=False, float_format="%.6g")


def check_stored_name(name: Any, what: str = "config") -> None:
    """Refuse a config (or plan) name that cannot name the files stored beside a results table
    (``configs/<name>.yaml``, ``plans/<name>/``): a path (``../../x`` wrote outside the table's directory), ``.``,
    ``..`` or nothing."""
    text = str(name)
    if text in ("", ".", "..") or any(sep in text for sep in ("/", "\\", "\0")):
        raise InvalidInputError(f"{what} name {text!r} cannot name the files stored beside the results table "
                                f"({what}s/<name>.yaml): give it a plain file name, without path separators")


def check_stored_config(results_path: str | os.PathLike, config: DLRMConfig,
                        replaced_plans: Sequence[str] = ()) -> None:
    """Refuse to store ``config`` beside ``results_path`` when the table already holds rows of another config of
    the same name.

    Rows point at their config by name (``configs/<name>.yaml``), so writing a different config under that name
    would silently make the existing rows (other than those of ``replaced_plans``, which the new results replace)
    describe a config they were not measured on; ``hybrid bench validate`` would then predict them on it and
    compare plans measured on two configs. The stored file is compared by content (the current hash of both), not
    by the table's ``config_hash`` column, so a table written by an older version still resumes."""
    check_stored_name(config.name)  # (names the stored files: before anything is measured or written)
    for plan in replaced_plans:
        check_stored_name(plan, "plan")
    from hybrid.bench.dlrm_harness import config_hash

    path = Path(results_path)
    stored = path.parent / "configs" / f"{config.name}.yaml"
    if not path.is_file() or not stored.is_file():
        return
    table = read_results(path)
    rows = table[(table["config_name"].astype(str) == config.name)
                 & ~table["plan_name"].astype(str).isin([str(p) for p in replaced_plans])]
    if rows.empty:
        return
    try:
        old = DLRMConfig.from_file(stored)
    except (InvalidInputError, SchemaError, ImportFormatError, OSError) as exc:
        raise InvalidInputError(f"{path} holds {len(rows)} row(s) of config {config.name!r}, whose stored "
                                f"file cannot be read ({exc}); not overwriting it") from None
    if config_hash(old) != config_hash(config):
        raise InvalidInputError(
            f"{path} already holds {len(rows)} row(s) of another config named {config.name!r} "
            f"({stored} differs from this one); give this config another name or use another results table")


def results_output(results_path: str | os.PathLike, config: DLRMConfig,
                   plan_names: Sequence[str] = ()) -> Path:
    """Where ``hybrid bench dlrm -o`` adds its row, checked before anything is measured: a directory (an existing
    one, or a path written with a trailing slash) means its ``results.csv``, as :func:`read_results` reads it; an
    existing table must be a results table; another config stored under the name is refused
    (:func:`check_stored_config`); and the nearest existing ancestor must be a writable directory."""
    raw = os.fspath(results_path)
    path = Path(raw)
    if path.is_dir() or raw.endswith(("/", os.sep)):
        path = path / "results.csv"
    if path.is_file():
        read_results(path)
    check_stored_config(path, config, plan_names)
    return check_creatable(path)


def record_results(results_path: str | os.PathLike, config: DLRMConfig, plans: dict[str, ShardingPlan],
                   results: list[Any], extra: dict[str, Any] | None = None) -> pd.DataFrame:
    """Store ``config`` and ``plans`` as YAML beside ``results_path`` (``configs/<config>.yaml``,
    ``plans/<config>/<plan>.yaml``) and add one row per :class:`~hybrid.bench.dlrm_harness.RunResult` to the
    table (a row of the same (config, plan) is replaced); the table is rewritten atomically. Returns it.
    Another config stored under the same name with rows left in the table is an error
    (:func:`check_stored_config`), raised before anything is written."""
    import torch

    path = Path(results_path)
    base = path.parent
    old = read_results(path) if path.is_file() else None  # a table that is not one fails before any YAML is written
    check_stored_config(path, config, [res.plan_name for res in results])
    cfg_file = Path("configs") / f"{config.name}.yaml"
    write_document(config.with_(plan=None).to_dict(), base / cfg_file)
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    new = []
    for res in results:
        plan_file = Path("plans") / config.name / f"{res.plan_name}.yaml"
        write_document(plans[res.plan_name].to_dict(), base / plan_file)
        row = res.summary()
        row.update(config_file=str(cfg_file), plan_file=str(plan_file), torch_version=torch.__version__,
                   timestamp=stamp, num_tables=len(config.tables), batch_size_per_gpu=config.batch_size_per_gpu,
                   python=platform.python_version(), **(extra or {}))
        new.append(row)
    table = pd.DataFrame(new)
    if old is not None:
        keys = set(zip(table["config_name"], table["plan_name"], strict=True))
        keep = [k not in keys for k in zip(old["config_name"], old["plan_name"], strict=True)]
        table = pd.concat([old[keep], table], ignore_index=True)
    _write_csv(table, path)
    return table


@dataclass
class CampaignReport:
    """What a campaign call did."""

    out_dir: Path
    measured: int = 0
    skipped: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)  #: one "CONFIG: why" per configuration that failed
    configs: int = 0  #: configurations of the campaign, those already measured included


def run_campaign(
    out_dir: str | os.PathLike,
    n_configs: int = 20,
    seed: int = 0,
    space: CampaignSpace | None = None,
    iters: int = 15,
    warmup: int = 5,
    threads_per_rank: int | None = None,
    predictor: Any = None,
    progress: bool = True,
    configs: list[DLRMConfig] | None = None,
    search_system: str | None = None,
    device: str = "cpu",
) -> CampaignReport:
    """Measure every (config, plan) of a seeded campaign with the harness, appending to
    ``out_dir/results.csv`` (resumable). A failing configuration is recorded in the report and skipped.
    ``device``: ``"cpu"`` (gloo) or ``"cuda"`` (one GPU per rank, NCCL)."""
    from tqdm import tqdm

    from hybrid.bench.dlrm_harness import HarnessError, HarnessOptions, run_dlrm

    sp = space or CampaignSpace()
    out = Path(out_dir)
    results_path = out / "results.csv"
    existing = read_results(results_path) if results_path.is_file() else pd.DataFrame()
    done = set(zip(existing.get("config_name", []), existing.get("plan_name", []), strict=True))
    cfgs = configs if configs is not None else generate_configs(n_configs, seed, sp)
    for cfg in cfgs:  # a directory of another campaign (another --seed, --ranks or --device): refuse up front
        try:
            check_stored_config(results_path, cfg)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{exc} (was {out} measured with another --seed, --ranks or --device?)") from None
    opts = HarnessOptions(iters=iters, warmup=warmup, threads_per_rank=threads_per_rank, seed=seed, device=device)
    report = CampaignReport(out, configs=len(cfgs))
    t0 = time.perf_counter()
    bar = tqdm(cfgs, desc="dlrm campaign", unit="config", disable=not progress)
    for cfg in bar:
        plans = campaign_plans(cfg, seed, predictor, sp.dp_max_rows, search_system)
        todo = {k: v for k, v in plans.items() if (cfg.name, k) not in done}
        report.skipped += len(plans) - len(todo)
        if not todo:
            continue
        bar.set_postfix_str(f"{cfg.name}: {len(todo)} plans, {len(cfg.tables)} tables")
        try:
            results = run_dlrm(cfg, todo, opts, ranks=sp.ranks)
        except HarnessError as exc:
            report.failures.append(f"{cfg.name}: {exc}")
            continue
        record_results(results_path, cfg, todo, results)
        report.measured += len(results)
    report.seconds = time.perf_counter() - t0
    return report


def load_pair(out_dir: str | os.PathLike, row: pd.Series | dict) -> tuple[DLRMConfig, ShardingPlan]:
    """The exact config and plan of one results row (files stored beside the table)."""
    base = Path(out_dir)
    if base.is_file():
        base = base.parent
    cfg = DLRMConfig.from_file(base / str(row["config_file"]))
    plan = ShardingPlan.from_file(base / str(row["plan_file"]))
    return cfg, plan.validate(cfg)
