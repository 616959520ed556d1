"""Inference precisions: compute dtype, weight storage (weight-only int8/int4/fp4) and KV-cache dtype.

``compute`` is the dtype GEMMs run in (``fp16``, ``bf16``, ``fp8``, ``fp4``); it must have a rate in the catalog
for the device (fp8 only where the device lists an fp8 tensor-core rate, fp4 only on FP4 tensor cores: Blackwell,
CDNA4). ``fp4`` is W4A4 block-scaled FP4 (NVFP4/MXFP4): weights stored in it, each GEMM's input activations
quantised to it, outputs in 16 bit, attention in fp8 over an fp8 KV cache (the TensorRT-LLM / vLLM FP4
recipes). ``weights`` is the storage of the weight matrices: ``None`` (same as compute) or a weight-only format
dequantised in the GEMM kernel (``int8``, ``int4``, ``fp4``: 1, 0.5, 0.5 bytes plus one fp16 scale per group of
128). ``kv`` is the KV-cache element type (``fp16``, ``bf16``, ``fp8``, ``int8``, ``fp4``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid.errors import InvalidInputError
from hybrid.hardware.device import Device
from hybrid.units import DTYPE_BYTES, normalize_dtype

#: Compute dtypes an inference GEMM can run in.
COMPUTE_DTYPES = ("fp16", "bf16", "fp8", "fp4")
#: Weight-only storage formats: bytes per weight (group-wise fp16 scale per 128 weights included).
WEIGHT_ONLY_BYTES = {"int8": 1.0 + 2.0 / 128, "int4": 0.5 + 2.0 / 128, "fp4": 0.5 + 2.0 / 128}
#: KV-cache element types.
KV_DTYPES = ("fp16", "bf16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class Precision:
    compute: str = "fp16"
    weights: str | None = None
    kv: str | None = None

    def __post_init__(self) -> None:
        c = normalize_dtype(self.compute) if self.compute not in WEIGHT_ONLY_BYTES else self.compute
        if c in WEIGHT_ONLY_BYTES and c not in COMPUTE_DTYPES:  # int8, int4: storage, not a GEMM's arithmetic
            short = {"int8": "w8a16", "int4": "w4a16"}[c]
            raise InvalidInputError(f"{c} is a weight-only storage format here, not a compute dtype (int8 GEMMs, "
                                    f"W8A8, are not modelled): --weights {c} or --dtype {short} (16-bit compute)")
        if c not in COMPUTE_DTYPES:
            raise InvalidInputError(f"compute dtype must be one of {COMPUTE_DTYPES}, got {self.compute!r} "
                                    "(weight-only storage: --weights int8/int4/fp4 or --dtype w8a16/w4a16)")
        object.__setattr__(self, "compute", c)
        if self.weights is not None:
            w = str(self.weights).lower()
            if w in ("none", "same", ""):
                w = None
            elif c == "fp4" and w in ("fp4", "nvfp4", "mxfp4"):
                w = None  # W4A4: the weights are already fp4
            elif c == "fp4":
                raise InvalidInputError(f"weight-only {w} storage with fp4 compute makes no sense (the weights "
                                        "of an fp4 GEMM are fp4); drop --weights")
            elif w not in WEIGHT_ONLY_BYTES:
                try:
                    w = normalize_dtype(w)
                except InvalidInputError:
                    raise InvalidInputError(f"weights must be one of {sorted(WEIGHT_ONLY_BYTES)} or the compute "
                                            f"dtype, got {self.weights!r}") from None
                if w != c:
                    raise InvalidInputError(f"weights must be one of {sorted(WEIGHT_ONLY_BYTES)} or the compute "
                                            f"dtype, got {self.weights!r}")
                w = None
            object.__setattr__(self, "weights", w)
        kv = normalize_dtype(self.kv) if self.kv else ("fp8" if c in ("fp8", "fp4") else c)
        if kv not in KV_DTYPES:
            raise InvalidInputError(f"KV-cache dtype must be one of {KV_DTYPES}, got {self.kv!r}")
        object.__setattr__(self, "kv", kv)

    @property
    def act_bytes(self) -> float:
        """Activations stay in 16 bit (fp8 GEMMs take fp8 inputs but norms/residuals run in 16 bit)."""
        return 2.0

    @property
    def attention_dtype(self) -> str:
        """The dtype attention runs in: the compute dtype, but fp8 under fp4 compute (FP4 attention kernels are
        not what the FP4 recipes run)."""
        return "fp8" if self.compute == "fp4" else self.compute

    @property
    def gemm_input_bytes(self) -> float:
        """Bytes per activation element a GEMM reads (quantised to the compute dtype under fp8/fp4)."""
        return DTYPE_BYTES[self.compute] if self.compute in ("fp8", "fp4") else 2.0

    @property
    def gemm_output_bytes(self) -> float:
        """Bytes per output element a GEMM writes: 16 bit under fp4 (the next op re-quantises), else as its
        inputs (fp8 GEMMs counted as writing fp8, as before)."""
        return 1.0 if self.compute == "fp8" else 2.0

    @property
    def weight_bytes(self) -> float:
        return WEIGHT_ONLY_BYTES[self.weights] if self.weights else DTYPE_BYTES[self.compute]

    @property
    def kv_bytes(self) -> float:
        return DTYPE_BYTES[str(self.kv)]

    @property
    def label(self) -> str:
        s = self.compute
        if self.weights:
            s += f"/w-{self.weights}"
        if self.kv != self.compute:
            s += f"/kv-{self.kv}"
        return s

    def check_device(self, device: Device) -> None:
        """Refuse a compute dtype the device has no rate for (fp8 on A100, say)."""
        if self.compute == "fp8" and "fp8" not in device.peak_flops:
            alt = "fp16 (its bf16 runs at the fp32 rate)" if device.lacks_units("bf16") else "fp16/bf16"
            raise InvalidInputError(f"{device.key} has no fp8 tensor-core rate in the catalog; use --dtype {alt} "
                                    "(optionally with weight-only int8/int4 weights)")
        if self.compute == "fp4" and "fp4" not in device.peak_flops:
            raise InvalidInputError(f"{device.key} has no fp4 tensor-core rate in the catalog (FP4 tensor cores: "
                                    "Blackwell B200/GB200/B300/GB300/RTX PRO 6000, AMD MI350X/MI355X); use --dtype "
                                    "fp8 where the device has it, or weight-only fp4 storage with --weights fp4")
        if self.compute == "bf16" and "bf16" not in device.peak_flops:
            raise InvalidInputError(f"{device.key} has no bf16 rate in the catalog")
        # an fp8/int8 KV cache or weight-only format is storage only (dequantised in the kernel): any GPU


def parse_precision(dtype: str, weights: str | None = None, kv: str | None = None) -> Precision:
    """``--dtype`` accepts ``fp16``, ``bf16``, ``fp8``, ``fp4`` (also ``nvfp4``/``mxfp4``: W4A4 on FP4 tensor cores)
    or a weight-only shorthand ``w8a16``/``w4a16``/``int4``..."""
    d = str(dtype).strip().lower()
    short = {"w8a16": "int8", "int8-weight": "int8", "w4a16": "int4", "int4": "int4", "int4-awq": "int4",
             "fp4-weight": "fp4", "w4a16-fp4": "fp4"}
    if d in short:
        if weights is not None:
            raise InvalidInputError(f"--dtype {dtype} already names the weight format; drop --weights")
        return Precision("fp16", short[d], kv)
    return Precision(d, weights, kv)


def checkpoint_precision(quantization: str | None, quantized_kv_cache: bool, device: Device,
                         kv: str | None = None) -> tuple[Precision, str]:
    """The precision a quantised checkpoint is served in on ``device`` when the user names none, and a note saying
    so. ``int8`` / ``int4``: weight-only over 16-bit compute (GPTQ/AWQ kernels); ``fp8``: fp8 GEMMs where the device
    has an fp8 rate, else 8-bit weight-only (vLLM's FP8 Marlin path on Ampere); ``fp4``: W4A4 on FP4 tensor cores,
    else 4-bit weight-only. The KV cache stays 16-bit unless the checkpoint quantises it too (or ``kv`` is given)."""
    kv_dtype = kv or ("fp8" if quantized_kv_cache else "fp16")
    if quantization is None:
        return Precision("fp16", None, kv), ""
    if quantization in ("int8", "int4"):
        prec = Precision("fp16", quantization, kv_dtype)
    elif quantization in ("fp8", "fp4") and quantization in device.peak_flops:
        prec = Precision(quantization, None, kv_dtype)
    elif quantization == "fp8":
        prec = Precision("fp16", "int8", kv_dtype)
    elif quantization == "fp4":
        prec = Precision("fp16", "fp4", kv_dtype)
    else:
        raise InvalidInputError(f"unknown checkpoint quantization {quantization!r}")
    how = (f"{prec.compute} compute" if prec.weights is None else f"{prec.weights} weight-only over fp16 compute")
    if quantization in ("fp8", "fp4") and prec.weights is not None:
        how += f" ({device.key} has no {quantization} tensor-core rate)"
    return prec, (f"precision from the checkpoint's format ({quantization} weights): {how}, {prec.kv} KV cache; "
                  "--dtype / --weights / --kv-dtype choose another")
