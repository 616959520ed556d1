"""Compute-kernel sweeps: GEMM/BMM/GEMV/linear, elementwise, layernorm/rmsnorm and softmax (fwd and bwd).

Each ``*_cases`` function returns :class:`~hybrid.data.profiler.cases.Case` objects; the runner times them.
Shapes come from fixed structured grids (squares, GEMV, skinny, batched) plus a seeded log-uniform random
sample, capped in FLOPs and bytes so a full CPU profile stays within minutes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hybrid.data.profiler.backend import Backend
from hybrid.data.profiler.cases import Case, random_tensor, torch_dtype
from hybrid.data.profiler.timing import rotation_sets
from hybrid.ops.families import ACTIVATION_BWD_FLOPS

#: Largest GEMM (FLOPs) in the sweep, per backend and mode.
GEMM_FLOP_CAP = {("cpu", False): 1.8e10, ("cpu", True): 4e8, ("cuda", False): 2e12, ("cuda", True): 2e11}
#: Largest elementwise / norm tensor (elements), per backend and mode.
ELEMENT_CAP = {("cpu", False): 2**25, ("cpu", True): 2**21, ("cuda", False): 2**28, ("cuda", True): 2**24}
#: Elementwise variants timed forward: name -> (inputs, outputs, FLOPs/element).
ELEMENTWISE_FWD = {"add": (2, 1, 1.0), "mul": (2, 1, 1.0), "relu": (1, 1, 1.0), "gelu": (1, 1, 8.0),
                   "silu": (1, 1, 4.0), "sigmoid": (1, 1, 4.0), "exp": (1, 1, 2.0), "copy": (1, 1, 0.0)}


def kernel_dtypes(backend: Backend, quick: bool) -> tuple[str, ...]:
    """dtypes swept for compute kernels: fp32 (+bf16 on CPUs; fp32/tf32/fp16/bf16 on GPUs).

    fp16 is not swept on CPUs: PyTorch's CPU fp16 GEMM runs at well under 1 GFLOP/s on common x86 parts.
    """
    if backend.is_cuda:
        return ("fp32", "bf16") if quick else ("fp32", "tf32", "fp16", "bf16")
    return ("fp32",) if quick else ("fp32", "bf16")


def _mode(backend: Backend, quick: bool) -> tuple[str, bool]:
    return ("cuda" if backend.is_cuda else "cpu", quick)


# ---------------------------------------------------------------------------------------------- GEMM
def gemm_shapes(backend: Backend, quick: bool, seed: int) -> list[tuple[str, int, int, int, int]]:
    """(op, b, m, n, k) shapes: squares, GEMV (m=1 / n=1), skinny, batched, linear, and a random sample."""
    cap = GEMM_FLOP_CAP[_mode(backend, quick)]
    shapes: list[tuple[str, int, int, int, int]] = []
    squares = (64, 256, 1024) if quick else (32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 4096)
    shapes += [("gemm", 1, s, s, s) for s in squares]
    gemv = (256, 2048) if quick else (128, 512, 1024, 2048, 4096, 8192)
    shapes += [("gemv", 1, 1, s, s) for s in gemv] + [("gemv", 1, s, 1, s) for s in gemv]
    if not quick:
        shapes += [("gemv", 1, 1, 4 * s, s) for s in (512, 1024, 2048)]
        shapes += [("gemv", 1, 4 * s, 1, s) for s in (512, 1024, 2048)]
    skinny = ((8, 1024, 1024), (16, 4096, 1024)) if quick else (
        (2, 2048, 2048), (8, 1024, 1024), (8, 4096, 4096), (16, 4096, 1024), (32, 1024, 4096),
        (64, 8192, 512), (4096, 16, 1024), (2048, 64, 2048), (1024, 1024, 16), (4096, 4096, 8))
    shapes += [("gemm", 1, m, n, k) for m, n, k in skinny]
    batched = ((8, 128, 128, 64),) if quick else (
        (8, 128, 128, 64), (16, 256, 256, 64), (32, 512, 64, 512), (64, 128, 128, 128), (12, 512, 512, 64),
        (4, 1024, 1024, 256))
    shapes += [("bmm", b, m, n, k) for b, m, n, k in batched]
    linear = ((4, 64, 512, 512),) if quick else (
        (4, 128, 1024, 1024), (8, 512, 4096, 1024), (1, 2048, 1024, 4096), (16, 64, 512, 512), (32, 1, 1024, 1024))
    shapes += [("linear", b, m, n, k) for b, m, n, k in linear]
    rng = np.random.default_rng(seed)
    n_random = 4 if quick else 40
    lo, hi = np.log(1), np.log(8192)
    while n_random > 0:
        m, n, k = (int(round(float(np.exp(rng.uniform(lo, hi))))) for _ in range(3))
        if 2.0 * m * n * k > cap or min(m, n) < 1 or k < 1:
            continue
        op = "gemv" if (m == 1 or n == 1) else "gemm"
        shapes.append((op, 1, m, n, k))
        n_random -= 1
    return [s for s in dict.fromkeys(shapes) if 2.0 * s[1] * s[2] * s[3] * s[4] <= cap]


#: Vocabulary-sized GEMMs of a language-model head: vocabulary V, model width d, tokens t (per backend, mode).
VOCAB_DESIGN = {False: {"vocab": (8192, 16384, 32000, 50257, 65536), "width": (512, 1024, 2048, 4096),
                        "tokens": (64, 256, 1024), "random": 16},
                True: {"vocab": (8192, 32000), "width": (512,), "tokens": (64,), "random": 0}}
#: Layouts of the three GEMMs of ``linear`` with a [V, d] weight: forward ``x @ W^T`` (``linear``), input gradient
#: ``dy @ W`` (``mm``: both operands row-major), weight gradient ``dy^T @ x`` (``mm_tn``: A is a transposed view).
VOCAB_LAYOUTS = ("linear", "mm", "mm_tn")


def vocab_gemm_shapes(backend: Backend, quick: bool, seed: int) -> list[tuple[str, int, int, int]]:
    """(layout, m, n, k) of the GEMMs a vocabulary-sized ``linear`` (LM head, tied embedding) runs forward and
    backward: a grid over vocabulary x width x tokens plus a seeded log-uniform sample (V 8k-64k, d 512-4096,
    t 64-1024), capped like :func:`gemm_shapes`."""
    cap = GEMM_FLOP_CAP[_mode(backend, quick)]
    design = VOCAB_DESIGN[quick]
    triples = [(v, d, t) for v in design["vocab"] for d in design["width"] for t in design["tokens"]]
    rng = np.random.default_rng(seed + 1)
    n_random = design["random"]
    while n_random > 0:
        v, d, t = (int(round(float(np.exp(rng.uniform(np.log(lo), np.log(hi))))))
                   for lo, hi in ((8192, 65536), (512, 4096), (64, 1024)))
        if 2.0 * v * d * t <= cap:
            triples.append((v, d, t))
            n_random -= 1
    out = []
    for v, d, t in dict.fromkeys(triples):
        if 2.0 * v * d * t > cap:
            continue
        out += [("linear", t, v, d), ("mm", t, d, v), ("mm_tn", v, d, t)]
    return out


#: Transformer-layer GEMMs on GPUs (full sweep): tokens per call x model width, each projection (out, in) of a
#: layer (QKV 3d x d, attention output d x d, MLP up 4d x d and down d x 4d) in the three layouts a ``linear``
#: runs forward and backward (:data:`VOCAB_LAYOUTS`), in the 16-bit dtypes mixed-precision training runs.
LAYER_GEMM_DESIGN = {"tokens": (2048, 8192), "width": (768, 2048, 4096)}
#: dtypes of the vocabulary-sized and transformer-layer GEMMs, per backend (full sweep; quick: fp32 vocab only).
LAYOUT_GEMM_DTYPES = {"cpu": ("fp32",), "cuda": ("fp32", "bf16")}
LAYER_GEMM_DTYPES = {"cpu": (), "cuda": ("fp16", "bf16")}
#: On GPUs with fp8 tensor cores (:attr:`Backend.has_fp8_gemm`) the layer GEMMs are also timed in fp8, as FP8
#: inference and training run them: ``torch._scaled_mm`` of e4m3 activations [m, k] by e4m3 weights [n, k]
#: (column-major operand), per-tensor scales, bf16 output; the ``linear`` layout only (the one ``_scaled_mm``
#: takes without a transpose copy). No public source times fp8 GEMMs plausibly (docs/corrections.md).
FP8_GEMM_LAYOUTS = ("linear",)


def layer_gemm_shapes(backend: Backend, quick: bool) -> list[tuple[str, int, int, int]]:
    """(layout, m, n, k) of a transformer layer's GEMMs (:data:`LAYER_GEMM_DESIGN`; GPUs, full sweep only):
    aligned, mid-size 16-bit GEMMs like the ones traced training steps run, which the random and square shapes
    cover too sparsely."""
    if quick or not backend.is_cuda:
        return []
    cap = GEMM_FLOP_CAP[_mode(backend, quick)]
    out = []
    for t in LAYER_GEMM_DESIGN["tokens"]:
        for d in LAYER_GEMM_DESIGN["width"]:
            for n_out, k_in in ((3 * d, d), (d, d), (4 * d, d), (d, 4 * d)):
                if 2.0 * t * n_out * k_in <= cap:
                    out += [("linear", t, n_out, k_in), ("mm", t, k_in, n_out), ("mm_tn", n_out, k_in, t)]
    return list(dict.fromkeys(out))


def gemm_cases(backend: Backend, *, quick: bool, seed: int, llc_bytes: int) -> list[Case]:
    """GEMM/BMM/GEMV/linear cases over :func:`gemm_shapes` x :func:`kernel_dtypes`, plus vocabulary-sized
    (:func:`vocab_gemm_shapes`) and, on GPUs, transformer-layer (:func:`layer_gemm_shapes`) GEMMs."""
    torch = backend.torch
    cases = []
    for dtype in kernel_dtypes(backend, quick):
        shapes = gemm_shapes(backend, quick, seed)
        if dtype != "fp32" and not quick and not backend.is_cuda:
            shapes = shapes[::2]  # on CPUs the other dtypes get every second shape (GPUs: every shape)
        for op, b, m, n, k in shapes:
            row = {"op": op, "dtype": dtype, "b": b, "m": m, "n": n, "k": k, "direction": "fwd",
                   "variant": _gemm_variant(op, m, n)}
            elem = 2 if dtype in ("bf16", "fp16") else 4
            ws = elem * (b * m * k + (k * n if op == "linear" else b * k * n) + b * m * n)
            cases.append(Case("gemm", row, _gemm_builder(backend, torch, op, b, m, n, k, dtype, ws, llc_bytes), ws))
    # vocabulary-sized GEMMs, in the layouts linear forward/backward run (fp32; bf16 too on GPUs, full sweep), and
    # on GPUs a transformer layer's GEMMs in fp16 and bf16
    kind = "cuda" if backend.is_cuda else "cpu"
    layer = layer_gemm_shapes(backend, quick)
    layout_sets = [(vocab_gemm_shapes(backend, quick, seed), ("fp32",) if quick else LAYOUT_GEMM_DTYPES[kind]),
                   (layer, LAYER_GEMM_DTYPES[kind])]
    if backend.has_fp8_gemm:
        layout_sets.append(([s for s in layer if s[0] in FP8_GEMM_LAYOUTS], ("fp8",)))
    # (a layer GEMM that is also a grid square is measured once: the runner drops repeated configurations)
    for shapes, dtypes in layout_sets:
        for dtype in dtypes:
            elem = {"bf16": 2, "fp16": 2, "fp8": 1}.get(dtype, 4)
            for layout, m, n, k in shapes:
                row = {"op": "gemm", "dtype": dtype, "b": 1, "m": m, "n": n, "k": k, "direction": "fwd",
                       "variant": layout}
                ws = float(elem * (m * k + k * n) + (2 if dtype == "fp8" else elem) * m * n)
                cases.append(Case("gemm", row, _layout_builder(backend, layout, m, n, k, ws, llc_bytes, dtype), ws))
    return cases


def _layout_builder(backend: Backend, layout: str, m: int, n: int, k: int, ws: float, llc: int,
                    dtype: str = "fp32"):
    """``linear``: ``F.linear(x[m,k], W[n,k])``; ``mm``: ``A[m,k] @ B[k,n]``; ``mm_tn``: ``A[k,m].t() @ B[k,n]``."""
    def build():
        torch = backend.torch
        dev = backend.torch_device
        sets = rotation_sets(ws, llc)
        if dtype == "fp8":
            if layout not in FP8_GEMM_LAYOUTS:
                raise ValueError(f"fp8 GEMMs are timed in the {FP8_GEMM_LAYOUTS} layouts, not {layout!r}")
            e4m3, one = torch.float8_e4m3fn, torch.ones((), dtype=torch.float32, device=dev)
            data = [(random_tensor(torch, (m, k), torch.float32, dev).to(e4m3),
                     random_tensor(torch, (n, k), torch.float32, dev).to(e4m3)) for _ in range(sets)]
            return (lambda i: torch._scaled_mm(data[i % sets][0], data[i % sets][1].t(), scale_a=one, scale_b=one,
                                               out_dtype=torch.bfloat16)), None
        f32 = torch_dtype(torch, dtype)
        if backend.is_cuda:  # fp32 means fp32: never left in the TF32 mode a previous case set
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        if layout == "linear":
            data = [(random_tensor(torch, (m, k), f32, dev), random_tensor(torch, (n, k), f32, dev))
                    for _ in range(sets)]
            return (lambda i: torch.nn.functional.linear(*data[i % sets])), None
        if layout == "mm_tn":
            data = [(random_tensor(torch, (k, m), f32, dev), random_tensor(torch, (k, n), f32, dev))
                    for _ in range(sets)]
            return (lambda i: torch.mm(data[i % sets][0].t(), data[i % sets][1])), None
        data = [(random_tensor(torch, (m, k), f32, dev), random_tensor(torch, (k, n), f32, dev)) for _ in range(sets)]
        return (lambda i: torch.mm(*data[i % sets])), None

    return build


def _gemm_variant(op: str, m: int, n: int) -> str:
    if op == "gemv":
        return "mv" if n == 1 else "mm_m1"
    return {"gemm": "mm", "bmm": "bmm", "linear": "linear_nobias"}[op]


def _gemm_builder(backend: Backend, torch: Any, op: str, b: int, m: int, n: int, k: int, dtype: str,
                  ws: float, llc: int):
    def build():
        dev = backend.torch_device
        dt = torch_dtype(torch, dtype)
        if backend.is_cuda:
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        sets = rotation_sets(ws, llc)
        if op == "bmm":
            data = [(random_tensor(torch, (b, m, k), dt, dev), random_tensor(torch, (b, k, n), dt, dev))
                    for _ in range(sets)]
            return (lambda i: torch.bmm(*data[i % sets])), None
        if op == "linear":
            data = [(random_tensor(torch, (b, m, k), dt, dev), random_tensor(torch, (n, k), dt, dev))
                    for _ in range(sets)]
            return (lambda i: torch.nn.functional.linear(*data[i % sets])), None
        if op == "gemv" and n == 1:
            data = [(random_tensor(torch, (m, k), dt, dev), random_tensor(torch, (k,), dt, dev)) for _ in range(sets)]
            return (lambda i: torch.mv(*data[i % sets])), None
        data = [(random_tensor(torch, (m, k), dt, dev), random_tensor(torch, (k, n), dt, dev)) for _ in range(sets)]
        return (lambda i: torch.mm(*data[i % sets])), None

    return build


# ---------------------------------------------------------------------------------------------- elementwise
def elementwise_sizes(backend: Backend, quick: bool) -> list[int]:
    cap = ELEMENT_CAP[_mode(backend, quick)]
    step = 16 if quick else 4
    sizes, s = [], 2**10
    while s <= cap:
        sizes.append(s)
        s *= step
    return sizes


def elementwise_cases(backend: Backend, *, quick: bool, seed: int, llc_bytes: int) -> list[Case]:
    """Pointwise ops forward (add, mul, relu, gelu, silu, sigmoid, exp, copy) and activation backwards."""
    torch = backend.torch
    F = torch.nn.functional
    aten = torch.ops.aten
    fwd = {
        "add": lambda a, b: torch.add(a, b), "mul": lambda a, b: torch.mul(a, b), "relu": lambda a: torch.relu(a),
        "gelu": lambda a: F.gelu(a), "silu": lambda a: F.silu(a), "sigmoid": lambda a: torch.sigmoid(a),
        "exp": lambda a: torch.exp(a), "copy": lambda a: a.clone(),
    }
    bwd = {
        "relu": lambda g, x: aten.threshold_backward(g, x, 0), "gelu": lambda g, x: aten.gelu_backward(g, x),
        "silu": lambda g, x: aten.silu_backward(g, x), "sigmoid": lambda g, y: aten.sigmoid_backward(g, y),
    }
    variants = ("add", "mul", "relu", "gelu", "silu") if quick else tuple(fwd)
    cases = []
    for dtype in kernel_dtypes(backend, quick):
        if dtype == "tf32":
            continue  # TF32 only changes matmuls
        elem = 2 if dtype in ("bf16", "fp16") else 4
        sizes = elementwise_sizes(backend, quick)
        if dtype != "fp32":
            sizes = sizes[::2]
        for size in sizes:
            for variant in variants:
                n_in, n_out, fpe = ELEMENTWISE_FWD[variant]
                row = {"op": "elementwise", "dtype": dtype, "variant": variant, "direction": "fwd",
                       "elements": size, "n_inputs": n_in, "n_outputs": n_out, "flops_per_element": fpe}
                ws = float(size * elem * (n_in + n_out))
                cases.append(Case("elementwise", row, _pointwise_builder(backend, fwd[variant], n_in, size, dtype,
                                                                         ws, llc_bytes), ws))
            for variant in (v for v in bwd if v in variants or not quick):
                row = {"op": "elementwise", "dtype": dtype, "variant": variant, "direction": "bwd",
                       "elements": size, "n_inputs": 2, "n_outputs": 1,
                       "flops_per_element": ACTIVATION_BWD_FLOPS[variant]}
                ws = float(size * elem * 3)
                cases.append(Case("elementwise", row, _pointwise_builder(backend, bwd[variant], 2, size, dtype,
                                                                         ws, llc_bytes), ws))
    cases += _model_elementwise_cases(backend, quick, llc_bytes)
    return cases


#: In-place updates (variant ends in ``_``: no output is allocated), as optimizers and residual streams run them:
#: variant -> (tensor inputs incl. self, FLOPs/element). Values stay in range over thousands of repeats.
INPLACE_VARIANTS = {"add_": (2, 1.0), "mul_": (1, 1.0), "div_": (1, 1.0), "lerp_": (2, 2.0), "addcmul_": (3, 2.0),
                    "addcdiv_": (3, 2.0), "copy_": (1, 0.0)}
#: Hidden sizes of the broadcast cases (a [rows, hidden] tensor with a [hidden] bias / a [rows, 1] mask)
BROADCAST_HIDDEN = (768, 1024)
#: Sizes above the elementwise grid for the ops an optimizer step runs over a whole embedding / LM-head matrix
#: (BERT's 31 M, GPT-2's 39 M values): trees do not extrapolate, so the largest matrices are measured.
LARGE_ELEMENTS = {("cpu", False): (2**25, 3 * 2**24), ("cpu", True): (), ("cuda", False): (2**29,),
                  ("cuda", True): ()}
#: Ops measured at :data:`LARGE_ELEMENTS` (in-place updates, out-of-place add / scalar scale / sqrt, zero fill).
LARGE_VARIANTS = frozenset({*INPLACE_VARIANTS, "add", "mul", "sqrt", "zeros"})


def _model_elementwise_cases(backend: Backend, quick: bool, llc: int) -> list[Case]:
    """What transformer and CNN training steps run besides the plain pointwise ops (fp32): in-place updates,
    broadcast operands (bias add, scalar scale, attention-mask fill), tanh/pow (GPT-2's GELU), sqrt and training
    dropout (forward: mask + scale + multiply; backward: gradient x mask). The row columns are the ones
    :func:`hybrid.data.traces.opmap.map_op` gives the same ops in a trace."""
    torch = backend.torch
    F = torch.nn.functional
    sizes = elementwise_sizes(backend, quick)
    cases: list[Case] = []

    large_sizes = set(LARGE_ELEMENTS[_mode(backend, quick)])

    def add(variant: str, size: int, shapes: list[tuple[int, ...]], fn, n_in: float, fpe: float,
            direction: str = "fwd", n_out: float = 1.0, dtypes: tuple[Any, ...] = ()) -> None:
        if size in large_sizes and not (variant in LARGE_VARIANTS and direction == "fwd"
                                        and all(len(sh) == 1 for sh in shapes)):
            return  # above the grid: only what optimizer steps run over a whole large matrix
        row = {"op": "elementwise", "dtype": "fp32", "variant": variant, "direction": direction, "elements": size,
               "n_inputs": round(float(n_in), 4), "n_outputs": float(n_out), "flops_per_element": float(fpe)}
        ws = float(size * 4 * (n_in + n_out))
        cases.append(Case("elementwise", row, _shaped_builder(backend, fn, shapes, ws, llc, dtypes), ws))

    large = LARGE_ELEMENTS[_mode(backend, quick)]
    for size in [*sizes, *large]:
        flat = [(size,)]
        # a zero-filled new tensor (a dense gradient, zeros_like): allocation + fill, nothing read
        add("zeros", size, [], lambda n=size: torch.zeros(n, device=backend.torch_device), 0, 0.0)
        if size in large:
            add("add", size, flat * 2, lambda a, b: a + b, 2, 1.0)
        for variant, (n_in, fpe) in INPLACE_VARIANTS.items():
            fn = {"add_": lambda a, b: a.add_(b, alpha=1e-6), "mul_": lambda a: a.mul_(0.99999),
                  "div_": lambda a: a.div_(0.99999), "lerp_": lambda a, b: a.lerp_(b, 0.1),
                  "addcmul_": lambda a, b, c: a.addcmul_(b, c, value=1e-6),
                  "addcdiv_": lambda a, b, c: a.addcdiv_(b, c, value=1e-6), "copy_": None}[variant]
            if variant == "copy_":
                add(variant, size, flat * 2, lambda a, b: a.copy_(b), n_in, fpe)
            else:
                add(variant, size, flat * n_in, fn, n_in, fpe)
        add("mul", size, flat, lambda a: a * 0.125, 1, 1.0)  # scalar scale (out of place)
        add("tanh", size, flat, lambda a: torch.tanh(a), 1, 4.0)
        add("pow", size, flat, lambda a: torch.pow(a, 3.0), 1, 2.0)
        add("sqrt", size, flat, lambda a: torch.sqrt(a), 1, 2.0)
        add("dropout", size, flat, lambda a: F.dropout(a, 0.1, training=True), 1, 2.0, n_out=2.0)
        add("dropout", size, flat * 2, lambda g, m: g * m, 2, 1.0, direction="bwd")
        for hidden in (BROADCAST_HIDDEN if size not in large else ()):
            rows = size // hidden
            if rows < 1:
                continue
            el = rows * hidden
            # bias add: x[rows, hidden] + b[hidden]; mask fill: x.masked_fill(mask[rows, 1], v)
            add("add", el, [(rows, hidden), (hidden,)], lambda a, b: a + b, 1 + 1 / rows, 1.0)
            add("relu", el, [(rows, hidden), (rows, 1)], lambda a, m: a.masked_fill(m, -1e4), 1 + 1 / hidden, 1.0,
                dtypes=(None, torch.bool))
    return cases


def _shaped_builder(backend: Backend, fn, shapes: list[tuple[int, ...]], ws: float, llc: int,
                    dtypes: tuple[Any, ...] = ()):
    """Builder for ``fn(*tensors)`` over tensors of ``shapes`` (fp32, or ``dtypes[i]``: bool draws a 50% mask)."""
    def build():
        torch = backend.torch
        dev = backend.torch_device
        sets = rotation_sets(ws, llc)

        def tensor(i: int, shape: tuple[int, ...]) -> Any:
            dt = dtypes[i] if i < len(dtypes) and dtypes[i] is not None else torch.float32
            if dt == torch.bool:
                return torch.rand(shape, device=dev) < 0.5
            return random_tensor(torch, shape, dt, dev)

        data = [tuple(tensor(i, sh) for i, sh in enumerate(shapes)) for _ in range(sets)]
        return (lambda i: fn(*data[i % sets])), None

    return build


def _pointwise_builder(backend: Backend, fn, n_in: int, size: int, dtype: str, ws: float, llc: int):
    def build():
        torch = backend.torch
        dt = torch_dtype(torch, dtype)
        sets = rotation_sets(ws, llc)
        data = [tuple(random_tensor(torch, (size,), dt, backend.torch_device) for _ in range(n_in))
                for _ in range(sets)]
        return (lambda i: fn(*data[i % sets])), None

    return build


# ---------------------------------------------------------------------------------------------- norms, softmax
def row_shapes(backend: Backend, quick: bool) -> list[tuple[int, int]]:
    """(rows, hidden) pairs for norms and softmax, capped in elements."""
    cap = ELEMENT_CAP[_mode(backend, quick)]
    rows = (64, 2048) if quick else (16, 128, 512, 2048, 8192, 32768)
    hidden = (256, 2048) if quick else (64, 256, 768, 1024, 2048, 4096, 8192)
    return [(r, h) for r in rows for h in hidden if r * h <= cap]


def norm_cases(backend: Backend, *, quick: bool, seed: int, llc_bytes: int) -> list[Case]:
    """layernorm and rmsnorm (where ``torch.nn.functional.rms_norm`` exists), fwd and bwd."""
    torch = backend.torch
    ops = ["layernorm"] + (["rmsnorm"] if hasattr(torch.nn.functional, "rms_norm") else [])
    return _rowwise_cases(backend, ops, "norm", quick, llc_bytes)


def softmax_cases(backend: Backend, *, quick: bool, seed: int, llc_bytes: int) -> list[Case]:
    """softmax over the last dimension, fwd and bwd."""
    return _rowwise_cases(backend, ["softmax"], "softmax", quick, llc_bytes)


def _rowwise_cases(backend: Backend, ops: list[str], family: str, quick: bool, llc: int) -> list[Case]:
    cases = []
    for dtype in kernel_dtypes(backend, quick):
        if dtype == "tf32":
            continue
        elem = 2 if dtype in ("bf16", "fp16") else 4
        shapes = row_shapes(backend, quick)
        if dtype != "fp32":
            shapes = shapes[::2]
        for op in ops:
            for rows, hidden in shapes:
                for direction in ("fwd", "bwd"):
                    row = {"op": op, "dtype": dtype, "rows": rows, "hidden": hidden, "direction": direction,
                           "variant": "affine" if op == "layernorm" else ("weight" if op == "rmsnorm" else "lastdim")}
                    ws = float(rows * hidden * elem * (3 if direction == "bwd" else 2))
                    cases.append(Case(family, row, _rowwise_builder(backend, op, direction, rows, hidden, dtype,
                                                                    ws, llc), ws))
    return cases


def _fused_rms_norm_rstd(aten: Any, xs: list[Any], hidden: int, w: Any, grad: Any) -> list[Any] | None:
    """Per input tensor, the ``rstd`` that ``aten._fused_rms_norm`` saves for its backward; None where the fused
    backward does not run on the tensors' device (PyTorch 2.13 has it for CUDA/ROCm, not for CPUs)."""
    if not (hasattr(aten, "_fused_rms_norm") and hasattr(aten, "_fused_rms_norm_backward")):
        return None
    try:
        rstd = [aten._fused_rms_norm(x, [hidden], w, None)[1] for x in xs]  # (y, rstd)
        aten._fused_rms_norm_backward(grad, xs[0], [hidden], rstd[0], w, [True, True])
    except (NotImplementedError, RuntimeError):
        return None
    return rstd


def _rowwise_builder(backend: Backend, op: str, direction: str, rows: int, hidden: int, dtype: str,
                     ws: float, llc: int):
    def build():
        torch = backend.torch
        F = torch.nn.functional
        dt = torch_dtype(torch, dtype)
        dev = backend.torch_device
        sets = rotation_sets(ws, llc)
        xs = [random_tensor(torch, (rows, hidden), dt, dev) for _ in range(sets)]
        w = random_tensor(torch, (hidden,), dt, dev)
        bias = random_tensor(torch, (hidden,), dt, dev)

        if op == "layernorm":
            def forward(x):
                return F.layer_norm(x, (hidden,), w, bias)
        elif op == "rmsnorm":
            def forward(x):
                return F.rms_norm(x, (hidden,), w)
        else:
            def forward(x):
                return torch.softmax(x, dim=-1)

        if direction == "fwd":
            return (lambda i: forward(xs[i % sets])), None
        grads = [random_tensor(torch, (rows, hidden), dt, dev) for _ in range(sets)]
        if op == "softmax":
            outs = [torch.softmax(x, dim=-1) for x in xs]
            aten = torch.ops.aten
            return (lambda i: aten._softmax_backward_data(grads[i % sets], outs[i % sets], -1, dt)), None
        # norms: the ATen backward op alone, as a traced backward pass runs it (``aten::native_layer_norm_backward``
        # / ``aten::_fused_rms_norm_backward``, each a row of this family in hybrid.data.traces.opmap), from saved
        # forward statistics. Timing ``torch.autograd.grad`` instead (before 2026-11-27) added the autograd
        # engine's start-up to every row: ~100 us on the H100 profile (backward minus forward at tiny shapes:
        # layernorm 111 us, rmsnorm 92 us; softmax backward, timed as its ATen op: 14 us), which no op pays inside
        # a model's backward pass.
        aten = torch.ops.aten
        if op == "layernorm":
            stats = [aten.native_layer_norm(x, [hidden], w, bias, 1e-5)[1:] for x in xs]  # (mean, rstd)
            return (lambda i: aten.native_layer_norm_backward(
                grads[i % sets], xs[i % sets], [hidden], stats[i % sets][0], stats[i % sets][1], w, bias,
                [True, True, True])), None
        rstd = _fused_rms_norm_rstd(aten, xs, hidden, w, grads[0])
        if rstd is not None:
            return (lambda i: aten._fused_rms_norm_backward(grads[i % sets], xs[i % sets], [hidden], rstd[i % sets],
                                                           w, [True, True])), None
        # no fused RMSNorm backward on this backend (CPUs, older PyTorch): the composite's backward through
        # autograd, as a traced CPU step runs it (forward graph rebuilt untimed in prepare(); run() times the rest)
        params = [w]
        for p in params:
            p.requires_grad_(True)
        leaves = [x.requires_grad_(True) for x in xs]
        state: dict[str, Any] = {}

        def prepare(i: int) -> None:
            state["y"] = forward(leaves[i % sets])

        def run(i: int) -> Any:
            return torch.autograd.grad(state["y"], [leaves[i % sets], *params], grads[i % sets])

        return run, prepare

    return build
