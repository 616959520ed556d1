"""Predictions versus measurements for a DLRM campaign: end-to-end error and sharding success rates.

For every (config, plan) row of a campaign results table the engine predicts the iteration time of exactly the
stored config and plan; :func:`sharding_success` then asks, per config, whether the plan predicted fastest is the
measured fastest (*strict*) or measured within the run-to-run spread of the fastest (*tolerant*).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from hybrid.errors import InvalidInputError
from hybrid.reports.metrics import error_summary


def _check_k(k: Any) -> None:
    """The tolerance multiple: a finite number >= 0 (a NaN made every config a tolerant miss without a word)."""
    if isinstance(k, bool) or not isinstance(k, int | float | np.number) or not (np.isfinite(k) and k >= 0):
        raise InvalidInputError(f"k must be a finite number >= 0, got {k!r}")


def _check_split_seed(seed: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InvalidInputError(f"split seed must be a non-negative integer, got {seed!r}")


def sharding_success(
    table: pd.DataFrame,
    predicted: str = "predicted_ms",
    measured: str = "median_ms",
    spread: str = "std_ms",
    group: str = "config_name",
    plan: str = "plan_name",
    k: float = 1.0,
) -> dict[str, Any]:
    """Per-config plan choice quality.

    For each ``group`` with at least two plans: the chosen plan is the one with the smallest ``predicted``;
    *strict* success if it also has the smallest ``measured``; *tolerant* success if
    ``measured[chosen] <= measured[best] + k * max(spread[best], spread[chosen])``. Also reported: the mean
    slowdown of the chosen plan over the measured best (``regret_pct``).

    Returns ``{n_configs, strict, tolerant, strict_pct, tolerant_pct, regret_pct, per_config: DataFrame}``.
    """
    _check_k(k)
    need = [group, plan, predicted, measured, spread]
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise InvalidInputError(f"table lacks column(s) {missing}")
    df = table[need].copy()
    for c in (predicted, measured, spread):
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
        if not np.all(np.isfinite(v)):
            raise InvalidInputError(f"column {c} has NaN or non-numeric values")
        df[c] = v
    if (df[measured] <= 0).any():
        raise InvalidInputError(f"column {measured} must be positive")
    counts = df.groupby(group, sort=True)[plan].transform("size")
    df = df[counts >= 2]
    if df.empty:
        raise InvalidInputError("no config has two or more plans to choose between")
    g = df.groupby(group, sort=True)
    chosen = df.loc[g[predicted].idxmin()].set_index(group)
    best = df.loc[g[measured].idxmin()].set_index(group)
    tol = k * np.maximum(best[spread].to_numpy(), chosen[spread].to_numpy())
    per = pd.DataFrame({
        "chosen_plan": chosen[plan], "best_plan": best[plan],
        "chosen_ms": chosen[measured], "best_ms": best[measured], "tolerance_ms": tol,
        "n_plans": g.size(),
    })
    per["strict"] = per["chosen_plan"] == per["best_plan"]
    per["tolerant"] = per["strict"] | (per["chosen_ms"] <= per["best_ms"] + per["tolerance_ms"])
    per["regret_pct"] = (per["chosen_ms"] / per["best_ms"] - 1.0) * 100
    n = len(per)
    return {
        "n_configs": n, "strict": int(per["strict"].sum()), "tolerant": int(per["tolerant"].sum()),
        "strict_pct": float(per["strict"].mean() * 100), "tolerant_pct": float(per["tolerant"].mean() * 100),
        "regret_pct": float(per["regret_pct"].mean()), "per_config": per,
    }


#: Harness phases compared one by one (``backward`` includes ``exchange_bwd``).
PHASE_COLUMNS = ("input_dist", "lookup_fwd", "exchange_fwd", "dense_fwd", "backward", "exchange_bwd", "optimizer")
#: Phases shorter than this (ms) on both sides are not scored (an absent exchange measures a few microseconds).
PHASE_FLOOR_MS = 0.05


def phase_errors(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per harness phase: geomean error, median predicted/measured ratio and the median times, from the
    ``<phase>_ms`` (measured) and ``pred_<phase>_ms`` columns of a validated table."""
    out: dict[str, dict[str, float]] = {}
    for ph in PHASE_COLUMNS:
        m_col, p_col = f"{ph}_ms", f"pred_{ph}_ms"
        if m_col not in table.columns or p_col not in table.columns:
            continue
        m = pd.to_numeric(table[m_col], errors="coerce").to_numpy(dtype=float)
        p = pd.to_numeric(table[p_col], errors="coerce").to_numpy(dtype=float)
        keep = np.isfinite(m) & np.isfinite(p) & ((m > PHASE_FLOOR_MS) | (p > PHASE_FLOOR_MS))
        if not keep.any():
            continue
        m, p = np.maximum(m[keep], 1e-3), np.maximum(p[keep], 1e-3)
        e = error_summary(p, m)
        ratio = p / m
        out[ph] = {"n_rows": int(keep.sum()), "geomean_pct": e["geomean_pct"], "mape_pct": e["mape_pct"],
                   "ratio_median": float(np.median(ratio)), "ratio_p10": float(np.quantile(ratio, 0.1)),
                   "ratio_p90": float(np.quantile(ratio, 0.9)), "measured_median_ms": float(np.median(m)),
                   "predicted_median_ms": float(np.median(p))}
    return out


@dataclass
class ValidationReport:
    """End-to-end error and sharding success of one predictor on one campaign."""

    table: pd.DataFrame  #: results with predicted_ms
    errors: dict[str, Any]
    success: dict[str, Any]
    split: dict[str, Any] = field(default_factory=dict)  #: half-split fit of overheads, when available
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  #: per-phase errors (:func:`phase_errors`)
    in_sample: dict[str, Any] = field(default_factory=dict)  #: overheads fitted on ALL configs, scored on them

    def summary(self) -> dict[str, Any]:
        s = {k: v for k, v in self.success.items() if k != "per_config"}
        return {"errors": {k: v for k, v in self.errors.items() if not isinstance(v, dict)},
                "errors_by_plan": self.errors.get("by_plan", {}), "sharding": s, "split": self.split,
                "phases": self.phases, "in_sample": self.in_sample}


#: :func:`evaluate`'s sharding success where no config ran two or more plans (nothing to choose between).
NO_PLAN_CHOICE: dict[str, Any] = {"n_configs": 0, "strict": 0, "tolerant": 0, "strict_pct": None,
                                  "tolerant_pct": None, "regret_pct": None}


def evaluate(table: pd.DataFrame, k: float = 1.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Error summary (overall, by plan type) and sharding success of a table with ``predicted_ms``."""
    errors = error_summary(table["predicted_ms"], table["median_ms"], groups={"by_plan": table["plan_name"]})
    counts = table.groupby("config_name")["plan_name"].size() if "config_name" in table.columns else None
    if counts is not None and len(counts) and counts.max() < 2:
        # every config ran one plan (one `hybrid bench dlrm` run, single-GPU runs): the errors stand on their
        # own, there is no plan choice to score
        _check_k(k)
        return errors, dict(NO_PLAN_CHOICE, per_config=pd.DataFrame())
    return errors, sharding_success(table, k=k)


def half_split(configs: list[str], seed: int = 0) -> tuple[list[str], list[str]]:
    """Configs split in two halves at random (reproducible)."""
    _check_split_seed(seed)
    names = sorted(set(configs))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(names))
    half = len(names) // 2
    return [names[i] for i in sorted(perm[:half])], [names[i] for i in sorted(perm[half:])]


# ------------------------------------------------------------------------------------- engine predictions


@dataclass
class EnginePredictor:
    """The critical-path engine with one op cost model: what predicts a (config, plan)."""

    name: str
    model: Any  #: OpCostModel (HybridPredictor, roofline, ...)
    catalog: Any  #: catalog the model predicts with (bundle devices included)
    system: str | None = None  #: system/device the configs are predicted on (None: each config's own)
    overheads: Any = None  #: engine Overheads (None: engine defaults)
    target_note: str = ""  #: why no system could be taken from the bundle (said when a run needs one)
    #: what to do about a run whose system the catalog does not know (default: --system or a --bundle)
    unknown_system_hint: str = ""

    def graph(self, config: Any, plan: Any) -> Any:
        """The compiled task graph of one iteration of ``config`` under ``plan`` as the harness runs it
        (``build_dlrm_graph(..., harness=True)``: what :mod:`hybrid.bench.dlrm_harness` adds on GPUs)."""
        from hybrid.workloads.dlrm_graph import build_dlrm_graph

        cfg = config.with_(plan=None, system=self.system) if self.system else config.with_(plan=None)
        return build_dlrm_graph(cfg, plan, self.catalog, harness=True).graph.compile()

    def predict_graphs(self, graphs: list[Any], overheads: Any = None) -> np.ndarray:
        """Predicted iteration times (ms) of compiled graphs."""
        return self.simulate_graphs(graphs, overheads)[0]

    def simulate_graphs(self, graphs: list[Any], overheads: Any = None) -> tuple[np.ndarray, pd.DataFrame]:
        """Predicted iteration times (ms) and per-phase times (ms, max over ranks, one row per graph; the
        harness phases of :data:`hybrid.workloads.dlrm_graph.PHASES` plus ``exchange_bwd``)."""
        from hybrid.engine.simulate import simulate
        from hybrid.workloads.dlrm_graph import NESTED_PHASES, PHASES

        ov = overheads if overheads is not None else self.overheads
        iters, phases = [], []
        for g in graphs:
            res = simulate(g, self.model, ov)
            iters.append(res.iteration_us / 1e3)
            # a GPU run's phases are cut by the harness's host clock (no synchronisation inside an iteration)
            phases.append(res.phase_times(PHASES, NESTED_PHASES, steady_state=True,
                                          host_clock=not g.synchronous_host).max(axis=0) / 1e3)
        return np.array(iters), pd.DataFrame(phases).reset_index(drop=True)

    def __call__(self, config: Any, plan: Any) -> float:
        return float(self.predict_graphs([self.graph(config, plan)])[0])


def _newest_cpu_bundle() -> Path | None:
    from hybrid.data.paths import project_datasets_dir

    found = sorted((p for p in project_datasets_dir().glob("cpu-*") if (p / "measurements.csv").is_file()),
                   key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _bundle_system(catalog: Any, bundle: Path, table: pd.DataFrame | None = None) -> str | None:
    """The system (else device) a bundle was measured on: the one system, else the one device, its
    ``catalog.toml`` adds to the packaged catalog; else (a GPU the catalog already knows, e.g. ``H100-SXM``) the
    system/device its ``meta.json`` names; else the one device of its measurements. None if the bundle names
    none; :class:`InvalidInputError` if it names several (the caller must say which: ``--system``)."""
    from hybrid.data.bundle import read_meta
    from hybrid.hardware.catalog import default_catalog

    base = default_catalog([])
    new_sys = [k for k in catalog.systems if k not in base.systems]
    if len(new_sys) == 1:
        return new_sys[0]
    new_dev = [k for k in catalog.devices if k not in base.devices]
    if len(new_sys) > 1 or len(new_dev) > 1:
        raise InvalidInputError(f"bundle {bundle} describes several machines ({', '.join(new_sys or new_dev)}): "
                                "pass --system to say which one the runs were measured on")
    if new_dev:
        return new_dev[0]
    meta = read_meta(bundle) if Path(bundle).is_dir() else {}
    for key, resolve in (("system", catalog.resolve_system), ("device", catalog.resolve_device)):
        name = meta.get(key)
        if isinstance(name, str) and name and resolve(name, missing_ok=True) is not None:
            return name
    if table is not None and "device" in table.columns:
        devices = sorted(set(table["device"].dropna().astype(str)))
        if len(devices) > 1:
            raise InvalidInputError(f"bundle {bundle} holds measurements of several devices ({', '.join(devices)}) "
                                    "and its meta.json names none: pass --system")
        if devices and catalog.resolve_device(devices[0], missing_ok=True) is not None:
            return devices[0]
    return None


#: System names a campaign writes for "the machine this ran on" (:class:`hybrid.bench.campaign.CampaignSpace`):
#: they name no catalog entry, so a prediction needs ``--system`` or a profile bundle of that machine.
LOCAL_SYSTEMS = ("local-cpu", "local-cuda")


def _check_target(catalog: Any, configs: list[Any], system: str | None, devices: set[str], note: str = "",
                  unknown_hint: str = "") -> None:
    """A clear error if the runs cannot be mapped onto a catalog system: a config system the catalog does not
    know (e.g. ``local-cuda``) with no ``system`` given, or a CPU target for runs measured on CUDA (or back)."""
    from hybrid.workloads.dlrm_graph import resolve_target

    names = {system} if system else {c.system for c in configs}
    for name in sorted(names):
        if catalog.resolve_system(name, missing_ok=True) is None and catalog.resolve_device(name, missing_ok=True) is None:
            if note:
                raise InvalidInputError(note)
            hint = (" (the machine the campaign ran on)" if name in LOCAL_SYSTEMS else "")
            raise InvalidInputError(f"the runs name system {name!r}{hint}, which the catalog does not know: "
                                    + (unknown_hint or "pass --system (e.g. H100-SXM) or --bundle with a "
                                       "`hybrid profile` of that machine"))
        kind = resolve_target(name, catalog).device.kind
        want = {"cuda": "gpu", "cpu": "cpu"}
        bad = [d for d in devices if d in want and want[d] != kind]
        if bad:
            raise InvalidInputError(f"the runs were measured on {bad[0]!r} but {name!r} is a {kind}: pass --system "
                                    "naming the device they ran on")


def resolve_predictor(model_ref: str | None = None, tracking_uri: str | None = None,
                      bundle: str | os.PathLike | None = None, roofline: bool = False,
                      system: str | None = None, default_bundle: bool = True,
                      extra_tables: Sequence[str | os.PathLike] = ()) -> EnginePredictor:
    """The op cost model the engine predicts with (the one resolver for ``hybrid bench validate`` and
    ``hybrid trace predict``): a calibrated model from the tracking store (``model_ref``), the roofline only
    (``roofline``), or a HybridPredictor fitted on a profile bundle (``bundle``; without one, the newest
    ``datasets/cpu-*`` if ``default_bundle``, else the roofline on the packaged catalog). ``system`` defaults
    to the bundle's system for bundles. ``extra_tables`` (with ``bundle`` only): measurement tables joined to the
    bundle's rows before the fit, e.g. the kernel rows of another GPU's traces (``hybrid trace kernels``)."""
    from hybrid.engine.costs import model_catalog

    if model_ref and (bundle or roofline):  # --roofline --bundle B is the roofline on B's catalog
        raise InvalidInputError(f"--model names the whole predictor: drop {'--bundle' if bundle else '--roofline'} "
                                "(--roofline --bundle B is the roofline on B's catalog)")
    if extra_tables and not bundle:
        raise InvalidInputError("extra measurement tables join a --bundle's rows: give --bundle too")
    if model_ref:
        from hybrid.hardware.catalog import default_catalog
        from hybrid.tracking.registry import load_predictor

        loaded = load_predictor(model_ref, tracking_uri=tracking_uri)
        cat = model_catalog(loaded.predictor)
        # --bundle is refused with --model: a run the model's catalog cannot place needs --system, and the machines
        # the model's profile bundles describe are the likely answer
        packaged = default_catalog([])
        added = sorted(k for k in cat.systems if k not in packaged.systems) or sorted(
            k for k in cat.devices if k not in packaged.devices)
        hint = (f"pass --system naming the machine they ran on ({loaded.ref} was fitted on profiles of "
                f"{', '.join(added)}; its catalog also has every packaged system and device)" if added
                else "pass --system naming the machine they ran on (e.g. H100-SXM)")
        return EnginePredictor(str(loaded.ref), loaded.predictor, cat, system, unknown_system_hint=hint)
    if not bundle and not default_bundle:
        from hybrid.engine.costs import RooflineCostModel
        from hybrid.hardware.catalog import default_catalog

        cat = default_catalog()
        return EnginePredictor("roofline", RooflineCostModel(cat), cat, system)
    path = Path(bundle) if bundle else _newest_cpu_bundle()
    if path is None:
        if not roofline:
            raise InvalidInputError("no predictor: give --model, --bundle (a `hybrid profile` directory) or "
                                    "--roofline; the checkout has no datasets/cpu-* bundle")
        from hybrid.engine.costs import RooflineCostModel
        from hybrid.hardware.catalog import default_catalog
        from hybrid.hardware.cpu import describe_local_cpu

        cat = default_catalog().with_device(describe_local_cpu())
        return EnginePredictor("roofline", RooflineCostModel(cat), cat, system)
    from hybrid.data.bundle import load_bundle

    table, cat = load_bundle(path)
    note = ""
    try:
        sys_name = system or _bundle_system(cat, path, table)
    except InvalidInputError as exc:  # only an error where a run needs the target (not for trace predictions)
        sys_name, note = None, str(exc)
    if roofline:
        from hybrid.engine.costs import RooflineCostModel

        return EnginePredictor(f"roofline ({path.name} catalog)", RooflineCostModel(cat), cat, sys_name,
                               target_note=note)
    from hybrid.corrections.predictor import HybridPredictor

    name = f"HybridPredictor fitted on {path.name}"
    if extra_tables:
        from hybrid.data.schema import read_table

        table = pd.concat([table, read_table(list(extra_tables), cat)], ignore_index=True, sort=False)
        name += " + " + ", ".join(Path(t).name for t in extra_tables)
    model = HybridPredictor(catalog=cat).fit(table)
    return EnginePredictor(name, model, cat, sys_name, target_note=note)


def validate_campaign(results: str | os.PathLike | pd.DataFrame, predictor: EnginePredictor,
                      campaign_dir: str | os.PathLike | None = None, k: float = 1.0, split_seed: int = 0,
                      fit_overheads: bool = True, progress: bool = False) -> ValidationReport:
    """Predict every row of a campaign results table with ``predictor`` and compare.

    If ``fit_overheads``, the engine's host-overhead constants are also fitted (:meth:`Overheads.fit`) on a
    random half of the configs and the other half is scored with them (``split``)."""
    from hybrid.bench.campaign import check_stored_files, load_pair, read_results

    _check_k(k)  # before any prediction
    _check_split_seed(split_seed)
    if isinstance(results, pd.DataFrame):
        if campaign_dir is None:
            raise InvalidInputError("a results DataFrame needs campaign_dir (where configs/ and plans/ are)")
        table, base = results.copy(), Path(campaign_dir)
        check_stored_files(table, "the results table")
    else:
        p = Path(results)
        table = read_results(p, stored_files=True)
        base = Path(campaign_dir) if campaign_dir else (p if p.is_dir() else p.parent)
    pairs = []
    for _, row in table.iterrows():
        cfg, plan = load_pair(base, row)
        if int(row["ranks"]) != cfg.gpus:
            cfg = cfg.with_(gpus=int(row["ranks"]))
        pairs.append((cfg, plan))
    devices = set(table["device"].dropna().astype(str)) if "device" in table.columns else set()
    _check_target(predictor.catalog, [c for c, _ in pairs], predictor.system, devices, predictor.target_note,
                  predictor.unknown_system_hint)
    graphs = [predictor.graph(cfg, plan) for cfg, plan in tqdm(pairs, desc="build graphs", disable=not progress)]
    iters, phases = predictor.simulate_graphs(graphs)
    table["predicted_ms"] = iters
    for c in phases.columns:
        table[f"pred_{c}_ms"] = phases[c].to_numpy()
    errors, success = evaluate(table, k=k)
    split: dict[str, Any] = {}
    in_sample: dict[str, Any] = {}
    if fit_overheads and table["config_name"].nunique() >= 4:
        split = _split_fit(table, graphs, predictor, k, split_seed)
        in_sample = _in_sample_fit(table, graphs, predictor, k)
    return ValidationReport(table, errors, success, split, phase_errors(table), in_sample)


def load_overheads(path: str | os.PathLike) -> Any:
    """Engine host constants (:class:`~hybrid.engine.overheads.Overheads`) from a JSON file: the object
    :func:`save_fitted_overheads` writes (its ``overheads_us``), or a plain ``{name: us}`` mapping."""
    from hybrid.engine.overheads import Overheads

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"{p}: not a readable JSON file of host constants ({exc})") from None
    values = data.get("overheads_us", data) if isinstance(data, dict) else None
    if not isinstance(values, dict) or not values:
        raise InvalidInputError(f"{p}: expected a JSON object of host constants in us (or one with 'overheads_us')")
    flags = [k for k, v in values.items() if isinstance(v, bool)]
    if flags:  # float(true) is 1.0: a flag is no time
        raise InvalidInputError(f"{p}: host constants must be numbers of us, got true/false for {', '.join(flags)}")
    try:
        numbers = {k: float(v) for k, v in values.items()}
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{p}: host constants must be numbers ({exc})") from None
    try:
        return Overheads.from_dict(numbers)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{p}: bad host constants ({exc})") from None


def save_fitted_overheads(report: ValidationReport, path: str | os.PathLike, source: str) -> Path:
    """Write the host constants fitted on every config of a validation (``report.in_sample``) as JSON, with the
    fit's standard errors and where they came from, for :func:`load_overheads` on other runs."""
    from hybrid.atomic import write_text

    ins = report.in_sample
    if not ins or "overheads_us" not in ins:
        raise InvalidInputError("no host constants were fitted (the fit needs at least 4 configs in the results)")
    doc = {"overheads_us": ins["overheads_us"], "fit": ins.get("fit"), "fitted_on": str(source),
           "n_runs": int(len(report.table)), "n_configs": int(report.table["config_name"].nunique()),
           "in_sample_geomean_pct": ins.get("geomean_pct")}
    # a constant the runs do not identify has an infinite standard error: null, as the CLI's --json writes it, since
    # `Infinity` / `NaN` are not JSON and strict parsers (JavaScript, Go) refuse the whole file
    return write_text(Path(path), json.dumps(_finite_or_null(doc), indent=1, allow_nan=False, default=float) + "\n")


def _finite_or_null(value: Any) -> Any:
    """``value`` with every non-finite float (NumPy scalars included) as None, recursively through dicts and lists."""
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_finite_or_null(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    return value


def _in_sample_fit(table: pd.DataFrame, graphs: list[Any], predictor: EnginePredictor, k: float) -> dict[str, Any]:
    """Overheads fitted on every config and scored on the same rows (optimistic; reported separately)."""
    from hybrid.engine.overheads import Overheads

    fitted, fit = Overheads.fit_report(graphs, table["median_ms"].to_numpy() * 1e3, predictor.model,
                                       start=predictor.overheads)
    t = table.copy()
    t["predicted_ms"] = predictor.predict_graphs(graphs, fitted)
    errors, success = evaluate(t, k=k)
    return {"overheads_us": fitted.to_dict(), "fit": fit, "geomean_pct": errors["geomean_pct"],
            "mape_pct": errors["mape_pct"],
            "strict_pct": success["strict_pct"], "tolerant_pct": success["tolerant_pct"],
            "regret_pct": success["regret_pct"]}


def _split_fit(table: pd.DataFrame, graphs: list[Any], predictor: EnginePredictor, k: float,
               seed: int) -> dict[str, Any]:
    from hybrid.engine.overheads import Overheads

    fit_cfgs, test_cfgs = half_split(table["config_name"].tolist(), seed)
    is_fit = table["config_name"].isin(fit_cfgs).to_numpy()
    fit_idx, test_idx = np.flatnonzero(is_fit), np.flatnonzero(~is_fit)
    fitted, fit = Overheads.fit_report([graphs[i] for i in fit_idx], table["median_ms"].to_numpy()[fit_idx] * 1e3,
                                       predictor.model, start=predictor.overheads)
    test = table.iloc[test_idx].copy()
    before = error_summary(test["predicted_ms"], test["median_ms"])
    test["predicted_ms"] = predictor.predict_graphs([graphs[i] for i in test_idx], fitted)
    errors, success = evaluate(test, k=k)
    return {
        "n_fit_configs": len(fit_cfgs), "n_test_configs": len(test_cfgs), "fit_configs": fit_cfgs,
        "overheads_us": fitted.to_dict(), "fit": fit, "test_geomean_before_pct": before["geomean_pct"],
        "test_geomean_pct": errors["geomean_pct"], "test_mape_pct": errors["mape_pct"],
        "test_strict_pct": success["strict_pct"], "test_tolerant_pct": success["tolerant_pct"],
        "test_regret_pct": success["regret_pct"],
    }
