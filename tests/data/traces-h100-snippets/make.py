"""Cut small test fixtures out of the real H100 traces in ``datasets/traces-h100`` (run from the repository root).

Each snippet keeps, from one trace, the ``ProfilerStep#0`` annotation (shrunk to the window), one top-level op of
the main thread with every host event inside it, the CUDA runtime calls and the GPU kernels it launched, and the
matching execution-trace nodes (same record-function ids), so that the linked pair parses as a 1-op step.

    python tests/data/traces-h100-snippets/make.py
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "datasets" / "traces-h100"
OUT = Path(__file__).resolve().parent
#: snippet name -> (trace, op name, which outermost occurrence of it, op that ends the window or None = itself)
SNIPPETS = {"autocast-linear": ("bert-bf16", "aten::linear", 0, None),
            "foreach-mul": ("bert-bf16", "aten::_foreach_mul_", 0, None),
            "foreach-add-cpu": ("bert-bf16", "aten::_foreach_add_", 0, "aten::_foreach_mul_"),
            "cudnn-conv": ("cnn-fp32", "aten::conv2d", 1, None),
            "final-sync": ("gpt2-fp32", "aten::_foreach_addcdiv_", 0, "cudaDeviceSynchronize")}


def cut(trace: str, op: str, nth: int, until: str | None) -> tuple[dict, dict]:
    kin = json.loads(gzip.decompress((SRC / trace / "kineto_rank0.json.gz").read_bytes()))
    et = json.loads(gzip.decompress((SRC / trace / "et_rank0.json.gz").read_bytes()))
    ev = [e for e in kin["traceEvents"] if e.get("ph") == "X"]
    step = next(e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#"))
    cands = sorted((e for e in ev if e.get("cat") == "cpu_op" and e["name"] == op), key=lambda e: e["ts"])
    # outermost occurrences only (not an autocast re-dispatch inside another)
    outer = [e for e in cands if not any(o is not e and o["tid"] == e["tid"] and o["ts"] <= e["ts"]
                                         and o["ts"] + o["dur"] >= e["ts"] + e["dur"] for o in cands)]
    top = outer[nth]
    lo, hi = top["ts"], top["ts"] + top["dur"]
    if until:
        last = min((e for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime") and e["name"] == until
                    and e["ts"] >= hi), key=lambda e: e["ts"])
        hi = last["ts"] + last["dur"]
    host = [e for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver") and e["tid"] == top["tid"]
            and lo <= e["ts"] and e["ts"] + e["dur"] <= hi]
    ext = {e["args"].get("External id") for e in host if "args" in e}
    dev = [e for e in ev if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")
           and e.get("args", {}).get("External id") in ext]
    end = max([hi] + [e["ts"] + e["dur"] for e in dev])
    ann = {**step, "ts": lo - 5, "dur": end - lo + 10}
    doc = {k: kin[k] for k in ("schemaVersion", "deviceProperties", "record_shapes", "hybrid_traced_device")
           if k in kin}
    doc["traceEvents"] = [ann, *host, *dev]
    rf = {e["args"].get("Record function id") for e in host if "args" in e}
    roots = [n for n in et["nodes"] if n["name"].startswith("[pytorch|profiler|execution_trace|")]
    nodes = [n for n in et["nodes"] if any(a.get("name") == "rf_id" and a.get("value") in rf
                                           for a in n.get("attrs", []))]
    keep = {n["id"] for n in roots + nodes}
    thread = next(n["id"] for n in roots if n["name"].endswith("thread]"))
    nodes = [{**n, "ctrl_deps": n["ctrl_deps"] if n["ctrl_deps"] in keep else thread} for n in nodes]
    etdoc = {k: et[k] for k in ("schema", "pid", "time", "start_ts", "finish_ts") if k in et}
    etdoc["nodes"] = roots + nodes
    return doc, etdoc


def main() -> None:
    for name, (trace, op, nth, until) in SNIPPETS.items():
        kin, et = cut(trace, op, nth, until)
        d = OUT / name
        d.mkdir(exist_ok=True)
        (d / "kineto_rank0.json.gz").write_bytes(gzip.compress(json.dumps(kin).encode(), mtime=0))
        (d / "et_rank0.json.gz").write_bytes(gzip.compress(json.dumps(et).encode(), mtime=0))


if __name__ == "__main__":
    main()
