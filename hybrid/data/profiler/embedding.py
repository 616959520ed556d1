"""Embedding-bag sweeps: pooled lookups forward and backward (+ SGD update) over a Latin-hypercube design.

The design samples (tables, rows per table, dim, pooling factor, batch) with :class:`scipy.stats.qmc.
LatinHypercube` (fixed seed) on log scales: tables 1..32, rows 1e3..1e7, dim 16..256, pooling 1..100, batch
64..4096; each configuration takes one index distribution in turn: uniform, Zipf(1.05), Zipf(1.2). Tables are
capped by the memory budget (rows shrink to fit) and lookups by :data:`LOOKUP_BYTES_CAP`.

All ``T`` tables live in one weight matrix ``[T*N, D]`` and are looked up by ONE fused
``F.embedding_bag(mode="sum")`` call with per-table row offsets (as TorchRec's batched kernels do). Weights
are views of one random arena, so building a multi-GiB table costs nothing per configuration. Bag lengths vary
uniformly in ``[1, 2P-1]`` (mean ``P``; ``pooling_factor`` records the realised mean).

Zipf indices follow the discrete Zipf law the rows' ``zipf_alpha`` names and the cost models assume
(:func:`hybrid.ops.families.expected_unique_rows`, the LLC hit fraction): rank ``k`` of ``1..N`` with probability
``k^-alpha / H(N, alpha)``, drawn by inverse CDF, exactly over the first :data:`ZIPF_EXACT_RANKS` ranks and by
the midpoint integral beyond (error < 1e-6 relative). Profiles measured before 2026-12-07 floored a continuous
power law on ``[1, N+1)`` instead, which gave the hottest row 27% fewer lookups (alpha 1.2: 14.4% instead of
19.6% of them), the rows past the first few nearly the same share. Ranks are scattered over rows by ``row = rank *
2654435761 mod N`` (a bijection, since that prime exceeds N) so hot rows are not adjacent in memory.

Backward variants (``variant``): ``sparse_sgd`` = ``sparse=True`` gradient (COO) applied with
``weight.add_(grad, alpha=-lr)`` as ``torch.optim.SGD`` does; ``dense_sgd`` = dense gradient of the whole
table plus the same update (only for tables up to :data:`DENSE_GRAD_MAX_BYTES`). The timed region is
backward + update; the forward that builds the graph runs untimed before each repeat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hybrid.data.profiler.backend import Backend
from hybrid.data.profiler.cases import Case

#: Index distributions cycled through the design: (index_dist, zipf_alpha).
DISTRIBUTIONS = (("uniform", 0.0), ("zipf", 1.05), ("zipf", 1.2))
#: Design ranges (inclusive).
TABLES = (1, 32)
ROWS = (1e3, 1e7)
DIMS = (16, 32, 64, 128, 256)
POOLING = (1.0, 100.0)
BATCH = (64, 4096)
#: Cap on gathered bytes per fused call (lookups x dim x 4), so one configuration stays well under a second.
LOOKUP_BYTES_CAP = {False: 256 * 2**20, True: 16 * 2**20}
#: Largest table (all T tables together) that also gets the dense-gradient backward.
DENSE_GRAD_MAX_BYTES = 256 * 2**20
#: Number of configurations in the design.
N_CONFIGS = {False: 300, True: 6}
#: Multiplier scattering Zipf ranks over rows (prime > max rows, so rank -> row is a bijection mod N).
SCATTER_PRIME = 2654435761
#: Zipf ranks whose cumulative probability is summed exactly (the rest by the midpoint integral).
ZIPF_EXACT_RANKS = 4096
#: SGD learning rate of the timed update (small, so values stay in range over many repeats).
LEARNING_RATE = 1e-4


@dataclass(frozen=True)
class EmbeddingConfig:
    num_tables: int
    num_embeddings: int
    embedding_dim: int
    batch_size: int
    lengths: np.ndarray  # bag lengths, num_tables * batch_size of them
    index_dist: str
    zipf_alpha: float
    seed: int

    @property
    def lookups(self) -> int:
        return int(self.lengths.sum())

    @property
    def pooling_factor(self) -> float:
        return float(self.lengths.mean())

    @property
    def table_bytes(self) -> int:
        return self.num_tables * self.num_embeddings * self.embedding_dim * 4


def design(n: int, *, seed: int, arena_bytes: float, quick: bool) -> list[EmbeddingConfig]:
    """A seeded Latin-hypercube sample of ``n`` configurations that fit ``arena_bytes`` of tables."""
    from scipy.stats import qmc

    rng = np.random.default_rng(seed)
    u = qmc.LatinHypercube(d=5, seed=seed).random(n)
    configs = []
    for j, (ut, un, ud, up, ub) in enumerate(u):
        tables = int(round(math.exp(math.log(TABLES[0]) + ut * math.log(TABLES[1] / TABLES[0]))))
        rows = float(math.exp(math.log(ROWS[0]) + un * math.log(ROWS[1] / ROWS[0])))
        dim = DIMS[min(int(ud * len(DIMS)), len(DIMS) - 1)]
        pooling = math.exp(math.log(POOLING[0]) + up * math.log(POOLING[1] / POOLING[0]))
        batch = int(round(math.exp(math.log(BATCH[0]) + ub * math.log(BATCH[1] / BATCH[0]))))
        # fit the tables into the arena (shrink rows), the gathered bytes under the cap (shrink batch)
        rows = int(min(rows, arena_bytes / (tables * dim * 4)))
        if rows < ROWS[0] // 2:
            continue
        batch = int(max(1, min(batch, LOOKUP_BYTES_CAP[quick] / (tables * pooling * dim * 4))))
        if pooling <= 1.5:
            lengths = np.ones(tables * batch, dtype=np.int64)
        else:
            hi = max(1, int(round(2 * pooling - 1)))
            lengths = rng.integers(1, hi + 1, size=tables * batch, dtype=np.int64)
        dist, alpha = DISTRIBUTIONS[j % len(DISTRIBUTIONS)]
        configs.append(EmbeddingConfig(tables, rows, dim, batch, lengths, dist, alpha, seed * 100003 + j))
    return configs


def sample_indices(torch: Any, cfg: EmbeddingConfig, generator: Any, device: Any) -> Any:
    """Row indices into the fused ``[T*N, D]`` weight for one batch: per-table indices plus ``t*N``."""
    n, total = cfg.num_embeddings, cfg.lookups
    if cfg.index_dist == "uniform":
        idx = torch.randint(0, n, (total,), generator=generator, dtype=torch.int64, device=device)
    else:
        ranks = zipf_ranks(torch, n, cfg.zipf_alpha, total, generator, device) - 1
        idx = (ranks * SCATTER_PRIME) % n
    lengths = torch.as_tensor(cfg.lengths, device=device)
    table_of_lookup = torch.repeat_interleave(
        torch.arange(cfg.num_tables, device=device, dtype=torch.int64).repeat_interleave(cfg.batch_size), lengths)
    return idx + table_of_lookup * n


def zipf_ranks(torch: Any, n: int, alpha: float, size: int, generator: Any, device: Any) -> Any:
    """``size`` ranks in ``1..n`` (int64 tensor) of the discrete Zipf law ``P(k) = k^-alpha / H(n, alpha)``: inverse
    CDF, the cumulative sums exact over the first :data:`ZIPF_EXACT_RANKS` ranks, beyond them the midpoint rule
    ``H(k) - H(K) = integral of x^-alpha over [K + 1/2, k + 1/2)`` (inverted in closed form)."""
    if n < 1 or not alpha > 0:
        raise ValueError(f"zipf_ranks needs n >= 1 rows and alpha > 0, got n={n}, alpha={alpha}")
    k_exact = min(int(n), ZIPF_EXACT_RANKS)
    head = torch.arange(1, k_exact + 1, dtype=torch.float64, device=device).pow(-alpha).cumsum(0)
    h_k = float(head[-1])
    lo = k_exact + 0.5

    def integral(x: float) -> float:  # of t^-alpha over [lo, x)
        return math.log(x / lo) if abs(alpha - 1.0) < 1e-12 else (x ** (1.0 - alpha) - lo ** (1.0 - alpha)) / (1.0 - alpha)

    total = h_k + (integral(n + 0.5) if n > k_exact else 0.0)
    t = torch.rand(size, generator=generator, dtype=torch.float64, device=device) * total
    ranks = torch.searchsorted(head, t, right=True) + 1  # first rank whose cumulative sum exceeds t
    if n > k_exact:
        rest = (t - h_k).clamp_(min=0.0)
        if abs(alpha - 1.0) < 1e-12:
            x = lo * torch.exp(rest)
        else:
            x = (lo ** (1.0 - alpha) + (1.0 - alpha) * rest) ** (1.0 / (1.0 - alpha))
        tail = torch.floor(x + 0.5).to(torch.int64).clamp_(k_exact + 1, n)
        ranks = torch.where(t >= h_k, tail, ranks)
    return ranks.clamp_(1, n)


def embedding_cases(backend: Backend, *, quick: bool, seed: int, llc_bytes: int, arena_bytes: float) -> list[Case]:
    """Forward + backward cases over :func:`design`; all share one random weight arena."""
    arena: dict[str, Any] = {}
    configs = design(N_CONFIGS[quick], seed=seed, arena_bytes=arena_bytes, quick=quick)
    cases = []
    for cfg in configs:
        base = {"op": "embedding_bag", "dtype": "fp32", "num_tables": cfg.num_tables,
                "num_embeddings": cfg.num_embeddings, "embedding_dim": cfg.embedding_dim,
                "pooling_factor": round(cfg.pooling_factor, 4), "batch_size": cfg.batch_size,
                "index_dist": cfg.index_dist, "zipf_alpha": cfg.zipf_alpha}
        touched = cfg.lookups * cfg.embedding_dim * 4
        variants = [("fwd", "sum"), ("bwd", "sparse_sgd")]
        if cfg.table_bytes <= DENSE_GRAD_MAX_BYTES:
            variants.append(("bwd", "dense_sgd"))
        for direction, variant in variants:
            row = {**base, "direction": direction, "variant": variant}
            mem = touched * 3 + (cfg.table_bytes if variant == "dense_sgd" else 0)
            cases.append(Case("embedding", row, _builder(backend, cfg, direction, variant, arena, arena_bytes,
                                                         llc_bytes), mem))
    return cases


def _arena(backend: Backend, arena: dict[str, Any], arena_bytes: float) -> Any:
    if "w" not in arena:
        torch = backend.torch
        gen = torch.Generator(device=backend.torch_device).manual_seed(12345)
        w = torch.rand(int(arena_bytes // 4), generator=gen, device=backend.torch_device)
        w.sub_(0.5)  # values in [-0.5, 0.5), never all zeros
        arena["w"] = w
    return arena["w"]


def _builder(backend: Backend, cfg: EmbeddingConfig, direction: str, variant: str, arena: dict[str, Any],
             arena_bytes: float, llc: int):
    def build():
        torch = backend.torch
        F = torch.nn.functional
        dev = backend.torch_device
        flat = _arena(backend, arena, arena_bytes)
        weight = flat[: cfg.num_tables * cfg.num_embeddings * cfg.embedding_dim].view(
            cfg.num_tables * cfg.num_embeddings, cfg.embedding_dim)
        gen = torch.Generator(device=dev).manual_seed(cfg.seed)
        # rotate index sets so repeats touch different rows (unless the touched rows fit in cache anyway)
        n_sets = 4 if cfg.lookups * cfg.embedding_dim * 4 < 2 * llc else 2
        idx = [sample_indices(torch, cfg, gen, dev) for _ in range(n_sets)]
        lengths = torch.as_tensor(cfg.lengths, device=dev)
        offsets = torch.zeros(len(cfg.lengths), dtype=torch.int64, device=dev)
        offsets[1:] = torch.cumsum(lengths, 0)[:-1]
        bags = cfg.num_tables * cfg.batch_size
        if direction == "fwd":
            return (lambda i: F.embedding_bag(idx[i % n_sets], weight, offsets, mode="sum")), None
        w = weight.detach().requires_grad_(True)
        grad_out = torch.rand((bags, cfg.embedding_dim), generator=gen, device=dev) - 0.5
        sparse = variant == "sparse_sgd"
        state: dict[str, Any] = {}

        def prepare(i: int) -> None:
            state["out"] = F.embedding_bag(idx[i % n_sets], w, offsets, mode="sum", sparse=sparse)

        def run(i: int) -> None:
            state["out"].backward(grad_out)
            with torch.no_grad():
                w.add_(w.grad, alpha=-LEARNING_RATE)
            w.grad = None

        return run, prepare

    return build
