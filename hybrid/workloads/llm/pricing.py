"""What a prediction costs: throughput priced at the user's GPU-hour prices (serving, training, traced steps).

Which hardware serves a latency target, or trains a model, most *cheaply* depends on what its GPUs cost, and that
is the user's number (list prices, reserved or spot rates, the amortised cost of owned machines), so no price is
built in. A price is per GPU-hour in any one currency, for every GPU (``2.5``) or per catalog system or GPU
(``DGX-H100=3.9,A100-SXM4-80GB=1.6``); :func:`cost_per_million_tokens` turns a throughput per GPU (output tokens
of inference, or training tokens) into the cost of a million tokens, and :func:`training_run` a training
throughput into a whole run's days, GPU-hours and cost:

    cost = price per GPU-hour / (tokens/s per GPU x 3600 s/h) x 1e6

>>> cost_per_million_tokens(3.6, 1000.0)  # 3.6 per GPU-hour at 1000 tokens/s per GPU
1.0
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hybrid.errors import InvalidInputError
from hybrid.hardware.catalog import Catalog

__all__ = ["GpuHourPrices", "cost_per_million_tokens", "parse_gpu_hour_prices", "parse_token_count", "rank_compared",
           "training_run"]

#: Suffixes of token counts (case-insensitive): thousand, million, billion, trillion.
TOKEN_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


@dataclass(frozen=True)
class GpuHourPrices:
    """Price of one GPU-hour: ``default`` for every GPU, ``by_key`` per catalog system or device key (a system's
    own price wins over its GPU's, which wins over the default)."""

    default: float | None = None
    by_key: dict[str, float] = field(default_factory=dict)

    def price(self, system_key: str | None, device_key: str) -> float | None:
        """The GPU-hour price of a deployment on ``system_key`` (may be None) with GPU ``device_key``; None when
        no price applies."""
        if system_key is not None and system_key in self.by_key:
            return self.by_key[system_key]
        return self.by_key.get(device_key, self.default)

    def unused(self, deployments: Sequence[tuple[str | None, str]]) -> list[str]:
        """The named prices (keys of ``by_key``) that :meth:`price` gives none of ``deployments`` ((system key,
        device key) pairs): a system or GPU that was priced but not predicted, or a GPU whose system has its own
        price. A price that prices nothing is most likely a mistake (a system left out of ``--compare``)."""
        used = set()
        for system_key, device_key in deployments:
            used.add(system_key if system_key is not None and system_key in self.by_key else device_key)
        return [k for k in self.by_key if k not in used]


def _price_value(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidInputError(f"GPU-hour price {what}: {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise InvalidInputError(f"GPU-hour price {what} must be a positive number, got {text!r}")
    return value


def parse_gpu_hour_prices(text: str, catalog: Catalog) -> GpuHourPrices:
    """``"2.5"`` (every GPU) or ``"NAME=PRICE,..."`` with NAME a catalog system or GPU (key or alias; systems are
    tried first) and at most one bare number among them (the default). Unknown names, non-positive or non-numeric
    prices and a name given twice are :class:`~hybrid.errors.InvalidInputError` naming the entry."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise InvalidInputError(f"no GPU-hour price given (got {text!r}); e.g. 2.5 or DGX-H100=3.9,A100=1.6")
    default: float | None = None
    by_key: dict[str, float] = {}
    for part in parts:
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            if default is not None:
                raise InvalidInputError(f"GPU-hour prices: more than one price without a name ({text!r})")
            default = _price_value(name, "for every GPU")
            continue
        if not name:
            raise InvalidInputError(f"GPU-hour prices: {part!r} names no system or GPU")
        key = catalog.resolve_system(name, missing_ok=True) or catalog.resolve_device(name, missing_ok=True)
        if key is None:
            raise InvalidInputError(f"GPU-hour prices: {catalog.unknown_target(name)}")
        if key in by_key:
            raise InvalidInputError(f"GPU-hour prices: {name!r} ({key}) is priced twice")
        by_key[key] = _price_value(value.strip(), f"of {name}")
    return GpuHourPrices(default, by_key)


def cost_per_million_tokens(price_per_gpu_hour: float, tokens_per_s_per_gpu: Any) -> Any:
    """Cost of a million tokens at ``tokens_per_s_per_gpu`` (a number or an array: vectorised) on GPUs costing
    ``price_per_gpu_hour``; a throughput that is not a positive finite number is an
    :class:`~hybrid.errors.InvalidInputError`."""
    tps = np.asarray(tokens_per_s_per_gpu, dtype=np.float64)
    bad = ~(np.isfinite(tps) & (tps > 0))
    if bad.any():
        raise InvalidInputError(f"no cost per token at a throughput of {tps[bad].flat[0]!r} tokens/s per GPU")
    cost = price_per_gpu_hour / (tps * 3600.0) * 1e6
    return float(cost) if cost.ndim == 0 else cost


def rank_compared(rows: Sequence[dict], speed: Callable[[dict], float], cost_key: str,
                  rankable: Callable[[dict], bool]) -> tuple[list[dict], bool]:
    """The ``--compare`` order of every command: ``rows`` by ``speed`` (a sort key, best first; stable); or, when
    every ``rankable`` row (one that ran and has a throughput to price) has a ``cost_key``, those by cost, lowest
    first, and the others after them in speed order. Returns (rows, whether ranked by cost)."""
    by_speed = sorted(rows, key=speed)
    rated = [r for r in by_speed if rankable(r)]
    if rated and all(r.get(cost_key) is not None for r in rated):
        return sorted(rated, key=lambda r: r[cost_key]) + [r for r in by_speed if not rankable(r)], True
    return by_speed, False


def parse_token_count(text: str) -> float:
    """``300B``, ``1.5T``, ``2e12``, ``500M`` (K/M/B/T: thousand, million, billion, trillion) as a positive number of
    tokens; anything else is an :class:`~hybrid.errors.InvalidInputError`."""
    raw = str(text).strip()
    num, suffix = raw, ""
    if raw and raw[-1].lower() in TOKEN_SUFFIXES and raw[-1].isalpha():
        num, suffix = raw[:-1].strip(), raw[-1].lower()
        # a suffix scales a plain decimal: "1.5e12T" (exponent and suffix, 1.5e24 tokens) is a typo for 1.5T or
        # 1.5e12 (T read as "tokens"), never a count anyone trains on
        if not re.fullmatch(r"\d+(\.\d*)?|\.\d+", num):
            raise InvalidInputError(
                f"cannot read a token count from {text!r}: a suffix (K/M/B/T) follows a plain decimal number, not "
                f"{num!r} (examples: 300B, 1.5T, 2e12)")
    try:
        value = float(num) * TOKEN_SUFFIXES[suffix]
    except ValueError:
        raise InvalidInputError(f"cannot read a token count from {text!r} (examples: 300B, 1.5T, 2e12)") from None
    if not (math.isfinite(value) and value >= 1):
        raise InvalidInputError(f"a token count must be a finite number of at least 1, got {text!r}")
    return value


def training_run(tokens: float, tokens_per_s: float, gpus: int, price_per_gpu_hour: float | None = None) -> dict:
    """A training run of ``tokens`` at ``tokens_per_s`` on ``gpus`` GPUs: ``days``, ``gpu_hours`` and, with a price,
    ``cost`` (every iteration as predicted: no restarts, evaluation or data-loading stalls)."""
    if not (math.isfinite(tokens_per_s) and tokens_per_s > 0):
        raise InvalidInputError(f"no training run at a throughput of {tokens_per_s!r} tokens/s")
    seconds = tokens / tokens_per_s
    out = {"tokens": tokens, "days": seconds / 86400.0, "gpu_hours": seconds * gpus / 3600.0}
    if price_per_gpu_hour is not None:
        out["cost"] = out["gpu_hours"] * price_per_gpu_hour
    return out
