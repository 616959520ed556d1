"""Optimizer-step sweeps: what ``optimizer.step()`` costs for dense parameters and for sparse embedding gradients.

Rows are ``elementwise`` ops whose ``variant`` names the update and whose ``(n_inputs, n_outputs,
flops_per_element)`` describe its memory passes per element (:data:`DENSE_VARIANTS`, :data:`SPARSE_VARIANTS`;
the same triples are the defaults of :data:`hybrid.ops.families.ELEMENTWISE_VARIANTS`):

* ``sgd`` / ``adagrad``: ``torch.optim.SGD`` / ``torch.optim.Adagrad`` (PyTorch's default single-tensor
  implementation on CPUs) stepping ONE dense parameter of ``elements`` values whose ``.grad`` is set;
* ``sparse_sgd`` / ``sparse_adagrad``: the same optimizers stepping a fused embedding table whose gradient is
  the sparse COO tensor ``EmbeddingBag(sparse=True)`` backward produces (one row per lookup, uncoalesced), as in
  TorchRec-style model-parallel training; ``elements`` = lookups x embedding dim (the gradient's values).
  Adagrad coalesces the gradient, updates its squared-sum state and the touched rows; SGD scatter-adds.
  Configurations (tables, rows, dim, pooling, batch, index distribution) come from the embedding design
  (:func:`hybrid.data.profiler.embedding.design`), every :data:`SPARSE_STRIDE`-th point.

The timed region is ``opt.step()`` alone; gradients are built untimed before timing.
"""

from __future__ import annotations

from typing import Any

from hybrid.data.profiler.backend import Backend
from hybrid.data.profiler.cases import Case, random_tensor
from hybrid.data.profiler.embedding import N_CONFIGS, design, sample_indices

#: Dense updates: variant -> (inputs, outputs, FLOPs per element). SGD ``p.add_(g, alpha=-lr)``; Adagrad
#: ``s.addcmul_(g, g)``, ``std = s.sqrt().add_(eps)``, ``p.addcdiv_(g, std)`` (11 array passes).
DENSE_VARIANTS = {"sgd": (2, 1, 2.0), "adagrad": (7, 4, 5.0)}
#: Sparse updates per gradient value: SGD scales the values and index-adds them into the rows (3 reads, 2
#: writes); Adagrad coalesces, squares, index-adds the state, gathers it back, sqrt/add/div and index-adds the
#: rows (about 10 reads and 8 writes per value while lookups are mostly distinct).
SPARSE_VARIANTS = {"sparse_sgd": (3, 2, 2.0), "sparse_adagrad": (10, 8, 6.0)}
#: Learning rate of the timed steps (small: values stay in range over many repeats).
LEARNING_RATE = 1e-4
#: Every SPARSE_STRIDE-th configuration of the embedding design is used for the sparse updates.
SPARSE_STRIDE = {False: 5, True: 2}
#: Largest sparse gradient (values bytes) and table (bytes; Adagrad adds a state of the same size) per case.
SPARSE_VALUES_CAP = {False: 128 * 2**20, True: 8 * 2**20}
SPARSE_TABLE_CAP = {False: 512 * 2**20, True: 32 * 2**20}


def optimizer_cases(backend: Backend, *, quick: bool, seed: int, arena_bytes: float) -> list[Case]:
    """Dense ``sgd``/``adagrad`` steps over the elementwise size grid, sparse ones over the embedding design."""
    from hybrid.data.profiler.kernels import elementwise_sizes

    cases = []
    for size in elementwise_sizes(backend, quick):
        for variant, (n_in, n_out, fpe) in DENSE_VARIANTS.items():
            row = {"op": "elementwise", "dtype": "fp32", "variant": variant, "direction": "fwd", "elements": size,
                   "n_inputs": n_in, "n_outputs": n_out, "flops_per_element": fpe}
            mem = float(size) * 4 * (4 if variant == "adagrad" else 2)
            cases.append(Case("optimizer", row, _dense_builder(backend, variant, size), mem))
    configs = design(N_CONFIGS[quick], seed=seed, arena_bytes=min(arena_bytes, SPARSE_TABLE_CAP[quick]),
                     quick=quick)[::SPARSE_STRIDE[quick]]
    for cfg in configs:
        per_bag = max(cfg.lookups / max(len(cfg.lengths), 1), 1.0) * cfg.embedding_dim * 4
        bags_cap = int(SPARSE_VALUES_CAP[quick] // per_bag)
        if bags_cap < cfg.num_tables:
            continue
        if len(cfg.lengths) > bags_cap:  # shrink the batch so the gradient values stay under the cap
            batch = max(1, bags_cap // cfg.num_tables)
            lengths = cfg.lengths.reshape(cfg.num_tables, -1)[:, :batch].reshape(-1).copy()  # table-major bags
            cfg = type(cfg)(cfg.num_tables, cfg.num_embeddings, cfg.embedding_dim, batch, lengths, cfg.index_dist,
                            cfg.zipf_alpha, cfg.seed)
        for variant, (n_in, n_out, fpe) in SPARSE_VARIANTS.items():
            row = {"op": "elementwise", "dtype": "fp32", "variant": variant, "direction": "fwd",
                   "elements": cfg.lookups * cfg.embedding_dim, "n_inputs": n_in, "n_outputs": n_out,
                   "flops_per_element": fpe}
            mem = cfg.table_bytes * (2 if variant == "sparse_adagrad" else 1) + 3.0 * cfg.lookups * (
                cfg.embedding_dim * 4 + 8)
            cases.append(Case("optimizer", row, _sparse_builder(backend, cfg, variant), mem))
    return cases


def _optimizer(torch: Any, variant: str, params: list[Any]) -> Any:
    if variant.endswith("adagrad"):
        return torch.optim.Adagrad(params, lr=LEARNING_RATE)
    return torch.optim.SGD(params, lr=LEARNING_RATE)


def _dense_builder(backend: Backend, variant: str, size: int):
    def build():
        torch = backend.torch
        dev = backend.torch_device
        p = torch.nn.Parameter(random_tensor(torch, (size,), torch.float32, dev))
        grad = random_tensor(torch, (size,), torch.float32, dev).mul_(1e-3)
        opt = _optimizer(torch, variant, [p])

        def run(_i: int) -> None:
            p.grad = grad
            opt.step()

        run.optimizer = opt  # type: ignore[attr-defined]  # for inspection (tests)
        return run, None

    return build


def _sparse_builder(backend: Backend, cfg: Any, variant: str):
    def build():
        torch = backend.torch
        F = torch.nn.functional
        dev = backend.torch_device
        # the gradients come from EmbeddingBag itself: opt out of the (default-off) sparse invariant checks
        # explicitly, which also silences the warning torch prints for every sparse optimizer step
        torch.sparse.check_sparse_tensor_invariants.disable()
        gen = torch.Generator(device=dev).manual_seed(cfg.seed)
        weight = torch.nn.Parameter(
            torch.rand((cfg.num_tables * cfg.num_embeddings, cfg.embedding_dim), generator=gen, device=dev) - 0.5)
        lengths = torch.as_tensor(cfg.lengths, device=dev)
        offsets = torch.zeros(len(cfg.lengths), dtype=torch.int64, device=dev)
        offsets[1:] = torch.cumsum(lengths, 0)[:-1]
        grads = []
        for _ in range(2):  # two index sets, alternated
            idx = sample_indices(torch, cfg, gen, dev)
            out = F.embedding_bag(idx, weight, offsets, mode="sum", sparse=True)
            out.backward(torch.rand(out.shape, generator=gen, device=dev) - 0.5)
            grads.append(weight.grad)
            weight.grad = None
        opt = _optimizer(torch, variant, [weight])

        def run(i: int) -> None:
            weight.grad = grads[i % len(grads)]
            opt.step()

        run.optimizer = opt  # type: ignore[attr-defined]  # for inspection (tests)
        return run, None

    return build
