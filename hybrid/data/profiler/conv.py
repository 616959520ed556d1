"""CNN sweeps: 2-D convolution forward and both backward passes, batch norm (training) and pooling, fwd and bwd.

* ``conv``: a seeded random design of convolution layers (batch, channels, spatial size, kernel 1-7, stride 1-2,
  "same" padding, some depthwise) capped in FLOPs, each timed forward (``F.conv2d``) and backward
  (``aten::convolution_backward`` with both gradients, and with the weight gradient only for every third layer:
  a network's first layer needs no input gradient). Rows: the ``conv`` family (``conv2d``).
* ``pool``: batch norm in training mode (``F.batch_norm(training=True)`` and ``aten::native_batch_norm_backward``:
  ``batchnorm`` rows of the ``norm`` family, rows = channels, hidden = N x H x W) and 2x2 / 3x3 max pooling with
  indices, 2x2 average pooling and global average pooling, forward and backward (``elementwise`` rows built by
  :func:`hybrid.ops.families.pool_row`, the same rows :mod:`hybrid.data.traces.opmap` gives traced pooling);
  interpolation (``upsample_nearest2d`` 2x and 4x, ``upsample_bilinear2d`` 2x, forward and backward:
  ``elementwise`` rows of :func:`hybrid.ops.families.upsample_row`, as traced ``F.interpolate`` calls map; grid
  sampling as rows of :func:`hybrid.ops.families.grid_sample_row`, as traced ``F.grid_sample`` calls map).

Shapes are NCHW fp32 (plus bf16 for every second convolution on request); the ops are the ones a traced CNN
training step runs, called with the arguments the trace records.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hybrid.data.profiler.backend import Backend
from hybrid.data.profiler.cases import Case, random_tensor
from hybrid.data.profiler.timing import rotation_sets
from hybrid.ops.families import grid_sample_row, pool_row, upsample_row

#: Forward FLOPs cap of one convolution, and configurations drawn, per (backend, quick).
CONV_FLOP_CAP = {("cpu", False): 3e9, ("cpu", True): 1e8, ("cuda", False): 2e11, ("cuda", True): 2e10}
CONV_CONFIGS = {False: 64, True: 4}
#: Largest feature map (elements) of the batch-norm / pooling sweep.
MAP_CAP = {("cpu", False): 2**24, ("cpu", True): 2**20, ("cuda", False): 2**27, ("cuda", True): 2**22}


def _mode(backend: Backend, quick: bool) -> tuple[str, bool]:
    return ("cuda" if backend.is_cuda else "cpu", quick)


def conv_design(backend: Backend, quick: bool, seed: int) -> list[dict[str, int]]:
    """Seeded random convolution layers: batch 1-32, channels 3-512 (log-uniform, multiples of 8 above 16),
    spatial 7-112, kernel 1/3/5/7 (3 most often), stride 1 or 2, padding kernel // 2, 1 in 8 depthwise."""
    cap = CONV_FLOP_CAP[_mode(backend, quick)]
    rng = np.random.default_rng(seed + 2)
    out: list[dict[str, int]] = []
    tries = 0
    while len(out) < CONV_CONFIGS[quick] and tries < 10000:
        tries += 1
        batch = int(rng.choice([1, 2, 4, 8, 16, 32]))
        cin = int(rng.choice([3, 3, 16]) if rng.random() < 0.12 else round(float(np.exp(rng.uniform(np.log(16),
                                                                                                  np.log(512))))))
        cout = int(round(float(np.exp(rng.uniform(np.log(16), np.log(512))))))
        if cin > 16:
            cin = max(16, int(round(cin / 8)) * 8)
        cout = max(16, int(round(cout / 8)) * 8)
        hw = int(rng.choice([7, 8, 14, 16, 28, 32, 56, 64, 112]))
        kernel = int(rng.choice([1, 3, 3, 3, 5, 7]))
        stride = int(rng.choice([1, 1, 1, 2]))
        groups = 1
        if rng.random() < 0.125 and cin >= 16:
            groups, cout = cin, cin  # depthwise
        if kernel > hw:
            continue
        cfg = {"batch": batch, "in_channels": cin, "out_channels": cout, "height": hw, "width": hw,
               "kernel_h": kernel, "kernel_w": kernel, "stride": stride, "padding": kernel // 2, "dilation": 1,
               "groups": groups}
        oh = (hw + 2 * (kernel // 2) - kernel) // stride + 1
        flops = 2.0 * batch * oh * oh * cout * cin / groups * kernel * kernel
        if flops > cap or flops < 1e5:
            continue
        out.append(cfg)
    return out


def conv_cases(backend: Backend, *, quick: bool, seed: int, llc_bytes: int) -> list[Case]:
    """Forward, backward (both gradients) and, for every third layer, backward with the weight gradient only."""
    cases = []
    for i, cfg in enumerate(conv_design(backend, quick, seed)):
        passes = [("fwd", "fwd"), ("bwd", "input_weight")] + ([("bwd", "weight")] if i % 3 == 0 else [])
        for direction, variant in passes:
            row = {"op": "conv2d", "dtype": "fp32", "direction": direction, "variant": variant, **cfg}
            ws = 4.0 * _conv_elements(cfg) * (1 if direction == "fwd" else 2)
            cases.append(Case("conv", row, _conv_builder(backend, cfg, direction, variant, ws, llc_bytes), ws))
    return cases


def _conv_elements(cfg: dict[str, int]) -> float:
    oh = (cfg["height"] + 2 * cfg["padding"] - cfg["kernel_h"]) // cfg["stride"] + 1
    x = cfg["batch"] * cfg["in_channels"] * cfg["height"] * cfg["width"]
    w = cfg["out_channels"] * cfg["in_channels"] // cfg["groups"] * cfg["kernel_h"] * cfg["kernel_w"]
    return float(x + w + cfg["batch"] * cfg["out_channels"] * oh * oh)


def _conv_builder(backend: Backend, cfg: dict[str, int], direction: str, variant: str, ws: float, llc: int):
    def build():
        torch = backend.torch
        dev = backend.torch_device
        f32 = torch.float32
        if backend.is_cuda:
            # rows are labelled fp32: cuDNN must not use TF32 tensor cores (PyTorch's default allows them, which
            # made the conv rows of datasets/H100-SXM TF32 times: 3x faster than the fp32 convs of real traces)
            torch.backends.cudnn.allow_tf32 = False
        sets = rotation_sets(ws, llc)
        b, cin, cout, g = cfg["batch"], cfg["in_channels"], cfg["out_channels"], cfg["groups"]
        k, s, p = cfg["kernel_h"], cfg["stride"], cfg["padding"]
        xs = [random_tensor(torch, (b, cin, cfg["height"], cfg["width"]), f32, dev) for _ in range(sets)]
        w = random_tensor(torch, (cout, cin // g, k, k), f32, dev)
        bias = random_tensor(torch, (cout,), f32, dev)
        F = torch.nn.functional
        if direction == "fwd":
            return (lambda i: F.conv2d(xs[i % sets], w, bias, s, p, 1, g)), None
        y = F.conv2d(xs[0], w, bias, s, p, 1, g)
        grads = [random_tensor(torch, tuple(y.shape), f32, dev) for _ in range(sets)]
        mask = [variant != "weight", True, True]
        aten = torch.ops.aten

        def run(i: int) -> Any:
            return aten.convolution_backward(grads[i % sets], xs[i % sets], w, [cout], [s, s], [p, p], [1, 1],
                                             False, [0, 0], g, mask)

        return run, None

    return build


def map_shapes(backend: Backend, quick: bool) -> list[tuple[int, int, int]]:
    """(batch, channels, spatial) feature maps of the batch-norm and pooling sweeps, capped in elements."""
    cap = MAP_CAP[_mode(backend, quick)]
    batches = (4, 32) if quick else (1, 8, 32)
    channels = (32, 256) if quick else (16, 32, 64, 128, 256, 512)
    spatial = (8, 32) if quick else (4, 8, 16, 32, 64)
    return [(n, c, h) for n in batches for c in channels for h in spatial if 256 <= n * c * h * h <= cap]


def pool_cases(backend: Backend, *, quick: bool, seed: int, llc_bytes: int) -> list[Case]:
    """Batch norm (training), pooling and interpolation, forward and backward, over :func:`map_shapes` (pooling
    every third shape: 2x2 max with indices and 2x2 average on all of those, 3x3/2 max and global average on every
    other; interpolation every third shape from the second: nearest and bilinear 2x, nearest 4x on every other)."""
    cases = []
    shapes = map_shapes(backend, quick)
    for n, c, h in shapes:
        for direction in ("fwd", "bwd"):
            row = {"op": "batchnorm", "dtype": "fp32", "rows": c, "hidden": n * h * h, "direction": direction,
                   "variant": "train"}
            ws = 4.0 * n * c * h * h * (3 if direction == "bwd" else 2)
            cases.append(Case("norm", row, _bn_builder(backend, (n, c, h, h), direction, ws, llc_bytes), ws))
    for j, (n, c, h) in enumerate(shapes[::3]):
        if h < 4:
            continue
        kinds = [("max", 2, 2, 0), ("avg", 2, 2, 0)] + ([("max", 3, 2, 1), ("global", h, h, 0)] if j % 2 == 0 else [])
        for kind, k, s, p in kinds:
            out_hw = 1 if kind == "global" else (h + 2 * p - k) // s + 1
            n_in, n_out = n * c * h * h, n * c * out_hw * out_hw
            for direction in ("fwd", "bwd"):
                row = pool_row("avg" if kind == "global" else kind, direction, n_in, n_out, k * k, "fp32",
                               indices=kind == "max")
                ws = 4.0 * (n_in + 3 * n_out)
                cases.append(Case("pool", row, _pool_builder(backend, kind, (n, c, h, h), k, s, p, direction, ws,
                                                             llc_bytes), ws))
    cap = MAP_CAP[_mode(backend, quick)]
    for j, (n, c, h) in enumerate(shapes[1::3]):
        # interpolation (F.interpolate / nn.Upsample): nearest and bilinear 2x on every shape of this third, nearest
        # 4x on every other one; the interpolated map stays under the sweep's cap
        for mode, scale in [("nearest", 2), ("bilinear", 2)] + ([("nearest", 4)] if j % 2 == 0 else []):
            oh = h * scale
            n_in, n_out = n * c * h * h, n * c * oh * oh
            if n_out > cap:
                continue
            for direction in ("fwd", "bwd"):
                row = upsample_row(mode, direction, n_in, n_out, "fp32", out_width=oh)
                ws = 4.0 * (n_in + n_out)
                cases.append(Case("pool", row, _upsample_builder(backend, mode, (n, c, h, h), oh, direction, ws,
                                                                 llc_bytes), ws))
    for j, (n, c, h) in enumerate(shapes[2::3]):
        # grid sampling (F.grid_sample on an affine grid: a slight rotation and zoom of the map), bilinear and
        # nearest, sampled at the map's size and, on every other shape, at twice its size (a warp that upsamples)
        if h < 4:
            continue
        for oh in [h] + ([2 * h] if j % 2 == 0 and n * c * 4 * h * h <= cap else []):
            for mode in ("bilinear", "nearest"):
                for direction in ("fwd", "bwd"):
                    row = grid_sample_row(mode, direction, n * c * h * h, c, n * oh * oh, "fp32", out_width=oh)
                    ws = 4.0 * (n * c * (h * h + oh * oh) + 2 * n * oh * oh)
                    cases.append(Case("pool", row, _grid_sample_builder(backend, mode, (n, c, h, h), oh, direction,
                                                                        ws, llc_bytes), ws))
    return cases


def _bn_builder(backend: Backend, shape: tuple[int, int, int, int], direction: str, ws: float, llc: int):
    def build():
        torch, aten, dev, f32, sets = _build_env(backend, ws, llc)
        c = shape[1]
        xs = [random_tensor(torch, shape, f32, dev) for _ in range(sets)]
        weight, bias = random_tensor(torch, (c,), f32, dev), random_tensor(torch, (c,), f32, dev)
        rm, rv = torch.zeros(c, device=dev), torch.ones(c, device=dev)
        if direction == "fwd":
            return (lambda i: torch.nn.functional.batch_norm(xs[i % sets], rm, rv, weight, bias, True, 0.1,
                                                             1e-5)), None
        saved = [aten.native_batch_norm(x, weight, bias, rm, rv, True, 0.1, 1e-5) for x in xs]
        grads = [random_tensor(torch, shape, f32, dev) for _ in range(sets)]

        def run(i: int) -> Any:
            _, mean, invstd = saved[i % sets]
            return aten.native_batch_norm_backward(grads[i % sets], xs[i % sets], weight, rm, rv, mean, invstd,
                                                   True, 1e-5, [True, True, True])

        return run, None

    return build


def _build_env(backend: Backend, ws: float, llc: int) -> tuple[Any, Any, Any, Any, int]:
    """(torch, its aten ops, the device, float32, rotation sets for a working set of ``ws`` bytes) of a case
    builder."""
    torch = backend.torch
    return torch, torch.ops.aten, backend.torch_device, torch.float32, rotation_sets(ws, llc)


def _pool_builder(backend: Backend, kind: str, shape: tuple[int, int, int, int], k: int, s: int, p: int,
                  direction: str, ws: float, llc: int):
    def build():
        torch, aten, dev, f32, sets = _build_env(backend, ws, llc)
        xs = [random_tensor(torch, shape, f32, dev) for _ in range(sets)]
        if kind == "max":
            if direction == "fwd":
                return (lambda i: aten.max_pool2d_with_indices(xs[i % sets], [k, k], [s, s], [p, p])), None
            outs = [aten.max_pool2d_with_indices(x, [k, k], [s, s], [p, p]) for x in xs]
            grads = [random_tensor(torch, tuple(o[0].shape), f32, dev) for o in outs]
            return (lambda i: aten.max_pool2d_with_indices_backward(
                grads[i % sets], xs[i % sets], [k, k], [s, s], [p, p], [1, 1], False, outs[i % sets][1])), None
        if kind == "global":
            if direction == "fwd":
                return (lambda i: aten._adaptive_avg_pool2d(xs[i % sets], [1, 1])), None
            grads = [random_tensor(torch, (shape[0], shape[1], 1, 1), f32, dev) for _ in range(sets)]
            return (lambda i: aten._adaptive_avg_pool2d_backward(grads[i % sets], xs[i % sets])), None
        if direction == "fwd":
            return (lambda i: aten.avg_pool2d(xs[i % sets], [k, k], [s, s], [p, p])), None
        oh = (shape[2] + 2 * p - k) // s + 1
        grads = [random_tensor(torch, (shape[0], shape[1], oh, oh), f32, dev) for _ in range(sets)]
        return (lambda i: aten.avg_pool2d_backward(grads[i % sets], xs[i % sets], [k, k], [s, s], [p, p], False,
                                                   True, None)), None

    return build


def _upsample_builder(backend: Backend, mode: str, shape: tuple[int, int, int, int], out_hw: int, direction: str,
                      ws: float, llc: int):
    """``aten::upsample_<mode>2d`` (``align_corners=False``) of an NCHW map to ``out_hw`` x ``out_hw``, or its
    backward: the ops ``F.interpolate`` calls and a trace records."""
    def build():
        torch, aten, dev, f32, sets = _build_env(backend, ws, llc)
        size = [out_hw, out_hw]
        if direction == "fwd":
            xs = [random_tensor(torch, shape, f32, dev) for _ in range(sets)]
            if mode == "nearest":
                return (lambda i: aten.upsample_nearest2d(xs[i % sets], size)), None
            return (lambda i: aten.upsample_bilinear2d(xs[i % sets], size, False)), None
        grads = [random_tensor(torch, (shape[0], shape[1], out_hw, out_hw), f32, dev) for _ in range(sets)]
        if mode == "nearest":
            return (lambda i: aten.upsample_nearest2d_backward(grads[i % sets], size, list(shape))), None
        return (lambda i: aten.upsample_bilinear2d_backward(grads[i % sets], size, list(shape), False)), None

    return build


def _grid_sample_builder(backend: Backend, mode: str, shape: tuple[int, int, int, int], out_hw: int, direction: str,
                         ws: float, llc: int):
    """``aten::grid_sampler_2d`` (zeros padding, ``align_corners=False``) of an NCHW map on an ``out_hw`` x
    ``out_hw`` affine grid (rotated by 0.1 rad, zoomed 0.9x: every point inside the map, neighbours' taps shared as
    in a real warp), or its backward (input and grid gradients): the ops ``F.grid_sample`` calls and a trace
    records."""
    def build():
        torch, aten, dev, f32, sets = _build_env(backend, ws, llc)
        n, c = shape[:2]
        h = w = out_hw
        a, z = 0.1, 0.9
        theta = torch.tensor([[z * np.cos(a), -z * np.sin(a), 0.0], [z * np.sin(a), z * np.cos(a), 0.0]],
                             dtype=f32, device=dev).expand(n, 2, 3)
        grid = torch.nn.functional.affine_grid(theta, [n, c, h, w], align_corners=False).contiguous()
        code = {"bilinear": 0, "nearest": 1}[mode]
        xs = [random_tensor(torch, shape, f32, dev) for _ in range(sets)]
        if direction == "fwd":
            return (lambda i: aten.grid_sampler_2d(xs[i % sets], grid, code, 0, False)), None
        grads = [random_tensor(torch, (n, c, h, w), f32, dev) for _ in range(sets)]
        return (lambda i: aten.grid_sampler_2d_backward(grads[i % sets], xs[i % sets], grid, code, 0, False,
                                                        [True, True])), None

    return build
