"""``hybrid llm infer | serve | capacity``: LLM inference latency, throughput, serving limits and memory.

The commands are registered on the ``hybrid llm`` group with :func:`register`.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import click

from hybrid.cli.output import (
    NO_INTERVAL_NOTE,
    compare_names,
    e2e_line,
    echo_json,
    echo_table,
    gpu_hour_price_option,
    named,
    named_device,
    roofline_note,
)
from hybrid.errors import InvalidInputError


def _predictor(model_ref: str | None, tracking_uri: str | None) -> tuple[Any, Any, str]:
    """(cost model, its catalog, its reference: ``models:/NAME/VERSION`` or ``roofline``): the one loader every
    simulate/llm command uses (:func:`hybrid.cli.simulate.load_cost_model`: a calibrated predictor, else the
    roofline-only one)."""
    from hybrid.cli.simulate import load_cost_model
    from hybrid.engine.costs import model_catalog

    cost, ref = load_cost_model(model_ref, tracking_uri)
    return cost, model_catalog(cost), ref


#: ``--gpu-hour-price`` of ``infer`` and ``serve`` (no price is built in: :mod:`hybrid.workloads.llm.pricing`).
_price_option = gpu_hour_price_option("Adds the cost of a million output tokens (and ranks --compare by it).")


def _price(prices: Any, s: Any) -> float | None:
    """The GPU-hour price of setup ``s`` under ``prices`` (None: no prices given, or none for this system/GPU)."""
    return None if prices is None else prices.price(s.system.key, s.device.key)


def _deploy_options(fn):
    opts = [
        click.option("--device", "-d", default=None, callback=named_device,
                     help="Catalog GPU (default: the system's GPU)."),
        click.option("--system", "-s", default=None, callback=named, help="Catalog system (TP collectives run on its fabric)."),
        click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree."),
        click.option("--pp", type=int, default=1, show_default=True,
                     help="Pipeline-parallel degree (`llm serve` simulates one pipeline stage: 1 only)."),
        click.option("--ep", type=int, default=1, show_default=True,
                     help="Expert parallelism of an MoE model inside the TP group (experts spread over ep of the TP "
                          "ranks, each split tp/ep ways; TensorRT-LLM's moe_ep_size)."),
        click.option("--attention-dp", is_flag=True,
                     help="Attention data parallelism (MoE, with --ep equal to --tp): each rank runs attention and the "
                          "dense layers whole on its own share of the requests; experts over all ranks."),
        click.option("--dtype", default=None, callback=named,
                     help="Compute dtype fp16/bf16/fp8/fp4 (fp4: W4A4 on FP4 tensor cores), or weight-only "
                          "shorthand w8a16 / w4a16. Default: fp16, or the format a quantised checkpoint's "
                          "config.json declares (quantization_config: GPTQ/AWQ int4, fp8, MXFP4, ...)."),
        click.option("--weights", default=None, callback=named, help="Weight-only storage: int8, int4, fp4 (compute stays 16 bit)."),
        click.option("--kv-dtype", default=None, callback=named,
                     help="KV-cache dtype (default: fp8 with --dtype fp8 or fp4, else the dtype; a quantised "
                          "checkpoint served in its own format keeps a 16-bit cache unless it quantises the cache "
                          "too)."),
        click.option("--attention-kernel", type=click.Choice(["grouped", "per_query_head"]), default="grouped",
                     show_default=True, help="Decode attention: KV read once per KV head, or once per query head."),
        click.option("--softmax", type=click.Choice(["auto", "serial", "overlapped"]), default="auto",
                     show_default=True,
                     help="Fused attention's softmax: in series with its matrix multiplies (FlashAttention-2), "
                          "overlapped (FlashAttention-3, cuDNN, TensorRT-LLM on Hopper+), or auto (by GPU "
                          "generation: overlapped from Hopper on)."),
        click.option("--allreduce", type=click.Choice(["nccl", "custom"]), default="nccl", show_default=True,
                     help="TP all-reduce: NCCL (the collective model), or the one-/two-shot NVLink kernels of "
                          "TensorRT-LLM / vLLM for small messages inside a node."),
        click.option("--reserve-gib", type=float, default=2.0, show_default=True,
                     help="Memory kept back per GPU for the runtime (CUDA context, workspaces)."),
        click.option("--model", "model_ref", default=None, callback=named,
                     help="Calibrated model (NAME, NAME/3, models:/NAME/3); default: roofline only."),
        click.option("--tracking-uri", envvar="MLFLOW_TRACKING_URI", help="MLflow store holding --model."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return click.argument("model_name", metavar="MODEL_OR_FILE")(fn)


def _setup(model_name: str, device: str | None, system: str | None, tp: int, pp: int, dtype: str | None,
           weights: str | None, kv_dtype: str | None, attention_kernel: str, allreduce: str, reserve_gib: float,
           catalog: Any, ep: int = 1, attention_dp: bool = False, softmax: str = "auto"):
    from hybrid.workloads.llm.inference import make_setup

    return make_setup(model_name, device, system, dtype=dtype, weights=weights, kv_dtype=kv_dtype, tp=tp, pp=pp,
                      reserve_gib=reserve_gib, attention_kernel=attention_kernel, allreduce=allreduce,
                      catalog=catalog, ep=ep, attention_dp=attention_dp, softmax=softmax)


def _steady_cost(price: float, rate_per_s: float, mean_output_tokens: float, gpus: int) -> float | None:
    """Cost of a million output tokens with requests served at ``rate_per_s`` (steady state); None when the rate
    is not a positive finite number (requests that all arrived at once, a one-request trace)."""
    from hybrid.workloads.llm.pricing import cost_per_million_tokens

    tokens_per_s_per_gpu = rate_per_s * mean_output_tokens / gpus
    if not (math.isfinite(tokens_per_s_per_gpu) and tokens_per_s_per_gpu > 0):
        return None
    return cost_per_million_tokens(price, tokens_per_s_per_gpu)


def _positive(**values: int) -> None:
    for k, v in values.items():
        if v is None or v < 1:
            raise InvalidInputError(f"--{k.replace('_', '-')} must be a positive integer, got {v!r}")


@click.command("infer")
@_deploy_options
@click.option("--batch", "-b", type=int, default=1, show_default=True, help="Requests in the static batch.")
@click.option("--input", "input_len", type=int, default=128, show_default=True, help="Prompt tokens per request.")
@click.option("--output", "output_len", type=int, default=128, show_default=True, help="Generated tokens per request.")
@click.option("--ops", "show_ops", is_flag=True, help="Also print the per-op table (compute- or memory-bound).")
@click.option("--roofline-plot", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Write a roofline plot of the prefill and decode ops (PNG/SVG/PDF).")
@click.option("--compare", default=None,
              help="Comma-separated systems (or GPUs) to run the same static batch on too, ranked by output "
                   "tokens/s per GPU (or, with --gpu-hour-price for each, by the cost of a million output tokens).")
@_price_option
def infer(model_name: str, device: str | None, system: str | None, tp: int, pp: int, ep: int,
          attention_dp: bool, dtype: str | None, weights: str | None,
          kv_dtype: str | None, attention_kernel: str, softmax: str, allreduce: str, reserve_gib: float, model_ref: str | None,
          tracking_uri: str | None, as_json: bool, batch: int, input_len: int, output_len: int, show_ops: bool,
          roofline_plot: str | None, compare: str | None, gpu_hour_price: str | None) -> None:
    """Static-batch inference: TTFT, TPOT, latency, throughput, memory and a per-category breakdown.

    MODEL_OR_FILE: a library name (`hybrid llm models`), a YAML/JSON config (Megatron keys or a Hugging Face
    config.json) or a Hugging Face checkpoint directory holding config.json."""
    from hybrid.workloads.llm.dims import context_note
    from hybrid.workloads.llm.inference import CAP_NOTE, TPOT_UNDEFINED_NOTE, boundedness, predict_static
    from hybrid.workloads.llm.pricing import cost_per_million_tokens, parse_gpu_hour_prices, rank_compared

    _positive(batch=batch, input=input_len, output=output_len)
    cost, cat, cost_ref = _predictor(model_ref, tracking_uri)
    prices = parse_gpu_hour_prices(gpu_hour_price, cat) if gpu_hour_price is not None else None
    others = compare_names(compare, cat)
    s = _setup(model_name, device, system, tp, pp, dtype, weights, kv_dtype, attention_kernel, allreduce, reserve_gib, cat,
               ep=ep, attention_dp=attention_dp, softmax=softmax)
    res = predict_static(s, batch, input_len, output_len, cost, check_memory=False)
    if not res.memory.fits and not as_json and not others:
        # refused; --json still reports the prediction with fits: false, and --compare its ranking of the systems
        # (where the model does fit may be the answer), both before the refusal below
        raise InvalidInputError(f"does not fit: {res.memory.reason}")
    if roofline_plot and res.memory.fits:
        # nothing for a deployment that cannot run: the command fails (below), as its text form does before
        # this point, and a failed command leaves no output behind (--json and --compare still print theirs)
        from hybrid.reports.plots import save_png
        from hybrid.reports.roofline_plot import op_roofline

        save_png(op_roofline(boundedness(res), [s.device], s.precision.compute,
                             title=f"{s.model.name} on {s.device.key}: batch {batch}, {input_len}/{output_len} tokens"),
                 roofline_plot)
    out = res.to_dict()
    out["cost_model"] = cost_ref
    if roofline_plot and res.memory.fits:  # where it went, as `llm memory --plot` says (a JSON key, a line)
        out["plot"] = roofline_plot
        if not as_json:
            click.echo(f"plot written to {roofline_plot}")
    price = _price(prices, s)
    if prices is not None:
        # the static batch's throughput per GPU at that price (None: no price for this system or GPU)
        out["gpu_hour_price"] = price
        out["cost_per_1m_output_tokens"] = (None if price is None else
                                            cost_per_million_tokens(price, res.output_tokens_per_s_per_gpu))
        if price is None:
            note = f"no GPU-hour price given for {s.system.key} or {s.device.key}"
            out["notes"] = [*out.get("notes", []), note]
            click.echo(f"warning: {note}", err=True)
    if others:
        # this run's own system ranks with the others (a cheaper baseline is the answer too)
        ok = bool(res.memory.fits)  # a deployment that cannot run has no times to rank
        ranking = [{"system": s.system.key, "device": s.device.key, "gpus": s.gpus,
                    "ttft_ms": res.ttft_ms if ok else None, "tpot_ms": res.tpot_ms if ok else None,
                    "output_tokens_per_s_per_gpu": res.output_tokens_per_s_per_gpu if ok else None, "fits": ok, **({"gpu_hour_price": price, "cost_per_1m_output_tokens": (
                        out["cost_per_1m_output_tokens"] if res.memory.fits else None)} if prices is not None else {}),
                    "note": "this run" if res.memory.fits else f"this run; does not fit: {res.memory.reason}"}]
        from hybrid.ops.roofline import resolve_system

        for name in others:
            known = resolve_system(cat, name)  # checked already: its key and GPU for the row, whatever happens
            if (known.key, known.device) == (s.system.key, s.device.key):
                continue  # this run's own system, ranked above
            row: dict[str, Any] = {"system": known.key, "device": known.device, "gpus": tp * pp}
            try:
                o = _setup(model_name, None, name, tp, pp, dtype, weights, kv_dtype, attention_kernel, allreduce,
                           reserve_gib, cat, ep=ep, attention_dp=attention_dp, softmax=softmax)
                r = predict_static(o, batch, input_len, output_len, cost, check_memory=False)
            except InvalidInputError as exc:  # no fp8 rate there, TP wider than its node allows, ...: last
                ranking.append({**row, "fits": False, "output_tokens_per_s_per_gpu": None,
                                **({"gpu_hour_price": None, "cost_per_1m_output_tokens": None} if prices else {}),
                                "note": str(exc)})
                continue
            fits = bool(r.memory.fits)  # a deployment that cannot run has no times to show
            row.update(system=o.system.key, device=o.device.key, gpus=o.gpus, ttft_ms=r.ttft_ms if fits else None,
                       tpot_ms=r.tpot_ms if fits else None,
                       output_tokens_per_s_per_gpu=r.output_tokens_per_s_per_gpu if fits else None, fits=fits,
                       note="" if fits else f"does not fit: {r.memory.reason}")
            if prices is not None:
                p_o = _price(prices, o)
                row.update(gpu_hour_price=p_o, cost_per_1m_output_tokens=(
                    None if p_o is None or not r.memory.fits
                    else cost_per_million_tokens(p_o, r.output_tokens_per_s_per_gpu)))
            ranking.append(row)
        out["compare"], by_cost = rank_compared(
            ranking, lambda r: -r["output_tokens_per_s_per_gpu"] if r["fits"] else math.inf,
            "cost_per_1m_output_tokens", lambda r: r["fits"])
        out["compare_ranked_by"] = "cost_per_1m_output_tokens" if by_cost else "output_tokens_per_s_per_gpu"
    if model_ref and not res.interval:
        note = NO_INTERVAL_NOTE.format(what="deployment")
        out["notes"] = [*out.get("notes", []), note]
        click.echo(f"warning: {note}", err=True)
    if not show_ops:
        out.pop("ops")
    for note in res.notes:
        # costed anyway (a context past the model's positions; bf16 without bf16 units at the fp32 rate; a
        # device on another system's fabric, TP across nodes)
        if (note == context_note(s.model, res.input_len + res.output_len)
                or note == s.device.slow_dtype_note(s.precision.compute)
                or note in s.deployment_notes()):
            click.echo(f"warning: {note}", err=True)
    if as_json:
        echo_json(out)
    else:
        rows = [(k, "n/a" if out[k] is None else out[k])  # tpot_ms: none without a decode step (--output 1)
                for k in ("model", "device", "system", "tp", "pp", "ep", "attention_dp", "precision", "batch",
                          "input_len", "output_len", "ttft_ms", "tpot_ms", "latency_ms", "output_tokens_per_s",
                          "output_tokens_per_s_per_gpu", "roofline_latency_ms", "method", "max_batch", "fits")]
        if out.get("cost_per_1m_output_tokens") is not None:
            rows += [("gpu_hour_price", f"{out['gpu_hour_price']:g}"),
                     ("cost_per_1m_output_tokens", f"{out['cost_per_1m_output_tokens']:.4g}")]
        echo_table(rows, ["", "value"])
        if res.interval:  # a calibrated model's 80% interval (every op at the low / high end of its own)
            iv = res.interval
            tpot = (f"TPOT {iv['tpot_ms_low']:.2f} - {iv['tpot_ms_high']:.2f} ms, " if "tpot_ms_low" in iv
                    else "")  # one output token: no TPOT
            click.echo(f"80% interval: TTFT {iv['ttft_ms_low']:.2f} - {iv['ttft_ms_high']:.2f} ms, "
                       f"{tpot}{iv['output_tokens_per_s_per_gpu_low']:,.0f}"
                       f" - {iv['output_tokens_per_s_per_gpu_high']:,.0f} tokens/s per GPU (how far the op costs can "
                       "be off, not the serving software's own overheads: published TensorRT-LLM figures fell inside "
                       "8-38% of the time per table, experiments/llm_inference)")
            if "ttft_ms_e2e_low" in out:
                click.echo(e2e_line([f"TTFT {out['ttft_ms_e2e_low']:.2f} - {out['ttft_ms_e2e_high']:.2f} ms",
                                     *([f"TPOT {out['tpot_ms_e2e_low']:.2f} - {out['tpot_ms_e2e_high']:.2f} ms"]
                                       if out.get("tpot_ms_e2e_low") is not None else []),
                                     f"{out['output_tokens_per_s_per_gpu_e2e_low']:,.0f} - "
                                     f"{out['output_tokens_per_s_per_gpu_e2e_high']:,.0f} tokens/s per GPU"],
                                    out, "figures"))
        mem = res.memory.to_dict()
        click.echo(f"\nmemory per GPU: weights {mem['weights_gib']:.1f} GiB, KV cache {mem['kv_cache_gib']:.1f} GiB, "
                   f"activations {mem['activations_gib']:.1f} GiB, reserve {mem['reserve_gib']:.1f} GiB "
                   f"of {mem['capacity_gib']:.0f} GiB ({mem['reason']})")
        for phase, cats in res.breakdown_ms.items():
            tot = sum(cats.values()) or 1.0
            click.echo(f"{phase:>8}: " + (", ".join(f"{c} {v:.1f} ms ({100 * v / tot:.0f}%)"
                                                    for c, v in sorted(cats.items(), key=lambda kv: -kv[1]))
                                          or "none (no decode step)"))
        for note in res.notes:
            if note.startswith("pipeline") or note == TPOT_UNDEFINED_NOTE:  # the schedule the totals use, and the
                click.echo(note)  # engine's run of it; why TPOT reads n/a
            elif CAP_NOTE in note:  # a phase's attention priced at its pieces, with the learned time beside it
                click.echo(f"note: {note}")
        if show_ops:
            b = boundedness(res)
            echo_table([(r["phase"], r["name"], r["op"], int(r["count"]), r["intensity"], r["time_us"], r["roofline_us"],
                         r["bound"])
                        for _, r in b.iterrows()],
                       ["phase", "op", "kind", "count", "FLOP/B", "time_us", "roofline_us", "bound"])
        if "compare" in out:
            by_cost = out["compare_ranked_by"] == "cost_per_1m_output_tokens"
            click.echo("\nsystems by " + ("cost per million output tokens (lowest first):" if by_cost
                                          else "output tokens/s per GPU (highest first):"))
            dash = "-"
            echo_table([[r["system"], r["device"], r["gpus"], dash if r.get("ttft_ms") is None else f"{r['ttft_ms']:.2f}",
                         dash if r.get("tpot_ms") is None else f"{r['tpot_ms']:.2f}",
                         dash if r["output_tokens_per_s_per_gpu"] is None else f"{r['output_tokens_per_s_per_gpu']:,.0f}",
                         *([dash if r["gpu_hour_price"] is None else f"{r['gpu_hour_price']:g}",
                            dash if r["cost_per_1m_output_tokens"] is None else f"{r['cost_per_1m_output_tokens']:.4g}"]
                           if prices is not None else []), r["note"]] for r in out["compare"]],
                       ["system", "device", "gpus", "TTFT ms", "TPOT ms", "tokens/s/GPU",
                        *(["GPU-hour price", "per 1M tokens"] if prices is not None else []), "note"])
        roofline_note(cost_ref)
    if not res.memory.fits:
        raise InvalidInputError(f"does not fit: {res.memory.reason}")


@click.command("capacity")
@_deploy_options
@click.option("--input", "input_len", type=int, default=None, help="Prompt tokens (with --output: one context).")
@click.option("--output", "output_len", type=int, default=None, help="Generated tokens.")
@click.option("--batch", "-b", type=int, default=None,
              help="Batch for the longest-context question (its prefill activations: the whole context as prompt, "
                   "or the --input / --output share of it).")
@click.option("--max-num-tokens", type=int, default=None,
              help="Prompt tokens per forward pass (TensorRT-LLM's max_num_tokens, vLLM's max_num_batched_tokens; "
                   "never less than one request's prompt): caps the prefill activations. Default: every request's "
                   "prompt in one pass, as `llm infer`'s static batch.")
def capacity(model_name: str, device: str | None, system: str | None, tp: int, pp: int, ep: int,
             attention_dp: bool, dtype: str | None,
             weights: str | None, kv_dtype: str | None, attention_kernel: str, softmax: str, allreduce: str,
             reserve_gib: float,
             model_ref: str | None, tracking_uri: str | None, as_json: bool, input_len: int | None,
             output_len: int | None, batch: int | None, max_num_tokens: int | None) -> None:
    """The largest batch that fits per context length (and the longest context for --batch).

    MODEL_OR_FILE: a library name (`hybrid llm models`), a YAML/JSON config (Megatron keys or a Hugging Face
    config.json) or a Hugging Face checkpoint directory holding config.json."""
    from hybrid.workloads.llm.kv_cache import (
        GIB,
        kv_bytes_per_token,
        max_context,
        memory_plan,
        weight_bytes_per_gpu,
    )

    _, cat, _ = _predictor(model_ref, tracking_uri)
    s = _setup(model_name, device, system, tp, pp, dtype, weights, kv_dtype, attention_kernel, allreduce, reserve_gib, cat,
               ep=ep, attention_dp=attention_dp, softmax=softmax)
    if (input_len is None) != (output_len is None):
        raise InvalidInputError("give both --input and --output (or neither)")
    contexts = [(input_len, output_len)] if input_len is not None else [(c // 2, c - c // 2) for c in
                                                            (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)]
    if max_num_tokens is not None:
        _positive(max_num_tokens=max_num_tokens)
    rows = []
    for i, o in contexts:
        _positive(input=i, output=o)
        kw = {"input_len": i, "output_len": o, "tp": tp, "pp": pp, "reserve_gib": reserve_gib,
              "attention_dp": attention_dp, "prefill_tokens": max_num_tokens}
        plan = memory_plan(s.model, s.precision, s.device.mem_capacity, batch=1, **kw)
        at_max = memory_plan(s.model, s.precision, s.device.mem_capacity, batch=max(plan.max_batch, 1), **kw)
        reason = plan.reason if plan.max_batch < 1 else f"KV cache {plan.kv_per_request / 2**20:.0f} MiB per request"
        if plan.max_batch >= 1 and at_max.activations > 0.05 * (at_max.kv_cache + at_max.activations):
            # the prefill's working set, not the cache, limits the batch: say so (and how to cap it)
            reason += (f"; +{at_max.activations / GIB:.1f} GiB of prefill activations"
                       + ("" if max_num_tokens else " (all prompts at once; --max-num-tokens caps them)"))
        if s.model.position_note(i + o):  # a learned position table: the real model cannot run it
            reason += f"; beyond the {s.model.max_position_embeddings} learned positions: the model cannot run it"
        elif s.model.max_position_embeddings and i + o > s.model.max_position_embeddings:
            reason += f"; beyond the model's {s.model.max_position_embeddings} positions"
        rows.append({"context": i + o, "input_len": i, "output_len": o, "max_batch": plan.max_batch,
                     "fits": plan.max_batch >= 1, "kv_cache_gib": at_max.kv_cache / GIB if plan.max_batch else 0.0,
                     "activations_gib": at_max.activations / GIB if plan.max_batch else 0.0, "reason": reason})
    out = {"model": s.model.name, "device": s.device.key, "system": s.system.key, "tp": tp, "pp": pp, "gpus": s.gpus,
           "ep": ep, "attention_dp": attention_dp, "precision": s.precision.label, "capacity_gib": s.device.mem_capacity / GIB,
           "weights_gib_per_gpu": weight_bytes_per_gpu(s.model, s.precision, tp, pp, attention_dp) / GIB,
           "kv_bytes_per_token_per_gpu": kv_bytes_per_token(s.model, s.precision, tp, pp, attention_dp),
           "reserve_gib": reserve_gib, "max_num_tokens": max_num_tokens, "max_batch": rows[0]["max_batch"] if input_len else None,
           "fits": rows[0]["fits"] if input_len else any(r["fits"] for r in rows), "by_context": rows}
    if s.deployment_notes():
        out["notes"] = s.deployment_notes()
        for note in out["notes"]:
            click.echo(f"warning: {note}", err=True)
    if max_num_tokens and input_len:  # what `llm infer` (one prefill pass for the static batch) can run instead
        whole = memory_plan(s.model, s.precision, s.device.mem_capacity, batch=1, input_len=input_len,
                            output_len=output_len, tp=tp, pp=pp, reserve_gib=reserve_gib, attention_dp=attention_dp)
        if whole.max_batch < rows[0]["max_batch"]:
            out["static_max_batch"] = whole.max_batch
            out.setdefault("notes", []).append(
                f"`llm infer` prefills a static batch in one pass, so it runs at most batch {whole.max_batch} here; "
                f"{rows[0]['max_batch']} needs prompts prefilled in chunks (`llm serve --max-batched-tokens`)")
            click.echo(f"note: {out['notes'][-1]}", err=True)
    if batch is not None:
        _positive(batch=batch)
        # with attention data parallelism a rank holds ceil(batch / tp) requests whole: the context per request
        # is that of those requests on one GPU with the experts' share of the weights
        share = input_len / (input_len + output_len) if input_len else 1.0  # of the context that is prompt
        out["max_context_for_batch"] = mc = {"batch": batch, "prompt_share": share, "max_context": max_context(
            s.model, s.precision, s.device.mem_capacity, batch=-(-batch // tp) if attention_dp else batch,
            tp=tp, pp=pp, reserve_gib=reserve_gib, attention_dp=attention_dp, prefill_tokens=max_num_tokens,
            prompt_share=share)}
        if s.model.position_note(mc["max_context"]):
            mc["note"] = (f"the model learns {s.model.max_position_embeddings} absolute positions: it cannot run a "
                          "context past them")
        elif s.model.max_position_embeddings and mc["max_context"] > s.model.max_position_embeddings:
            # as the per-context rows say: memory allows it, the model was built for fewer positions
            mc["note"] = f"beyond the model's {s.model.max_position_embeddings} positions"
        if mc["max_context"] < 1:  # not even one token per request fits beside the weights
            out["fits"] = False
            from hybrid.workloads.llm.kv_cache import request_bytes

            free_gib = out["capacity_gib"] - out["weights_gib_per_gpu"] - reserve_gib
            on_rank = -(-batch // tp) if attention_dp else batch
            one = request_bytes(s.model, s.precision, batch=1, context=1, tp=tp, pp=pp,
                                attention_dp=attention_dp) / GIB  # one request of one token, per GPU
            out["max_context_for_batch"]["reason"] = (
                f"batch {batch} does not fit at any context: the weights ({out['weights_gib_per_gpu']:.1f} GiB/GPU) "
                f"and {reserve_gib:g} GiB reserve leave no room for requests on {out['capacity_gib']:.0f} GiB"
                if free_gib <= 0 else
                f"batch {batch} does not fit at any context: even one token per request (its KV cache, prefill "
                f"activations and logits) takes {on_rank * one:.1f} GiB per GPU, beyond the {free_gib:.1f} GiB the "
                f"weights and reserve leave: at most {int(free_gib / one) * (tp if attention_dp else 1):,} requests "
                "fit")
    if as_json:
        echo_json(out)
    else:
        click.echo(f"{s.model.name} on {s.device.key} x{tp * pp} ({s.precision.label}): weights "
                   f"{out['weights_gib_per_gpu']:.1f} GiB/GPU, KV {out['kv_bytes_per_token_per_gpu'] / 1024:.1f} KiB "
                   f"per token per GPU, reserve {reserve_gib} GiB")
        echo_table([(r["context"], r["max_batch"], r["reason"]) for r in rows], ["context", "max batch", "note"])
        if batch is not None:
            mc = out["max_context_for_batch"]
            click.echo(f"longest context for batch {batch}: {mc['max_context']} tokens"
                       + (f" ({mc['note']})" if "note" in mc else ""))
    if batch is not None and "reason" in out["max_context_for_batch"]:
        raise InvalidInputError(out["max_context_for_batch"]["reason"])
    if not out["fits"]:  # reported above (--json included), then refused like `llm infer`
        raise InvalidInputError(f"does not fit at any context asked: {rows[0]['reason']}")


@click.command("serve")
@_deploy_options
@click.option("--rate", default="10/s", show_default=True,
              help="Arrival rate: 10, 10/s, 600/min; inf (or max, offline): every request at once, the maximum "
                   "throughput that vendor benchmarks (trtllm-bench throughput, vLLM benchmark_throughput) report.")
@click.option("--requests", "n_requests", type=int, default=500, show_default=True, help="Requests simulated.")
@click.option("--input-dist", default="512", show_default=True,
              help="Prompt lengths: 512, 64-1024 (uniform), exp:512, normal:512,128, lognormal:300,0.8.")
@click.option("--output-dist", default="128", show_default=True, help="Output lengths (same forms).")
@click.option("--arrival", type=click.Choice(["poisson", "uniform"]), default="poisson", show_default=True,
              help="Arrival times at --rate: a Poisson process (exponential gaps) or evenly spaced.")
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Replay a request trace (CSV: arrival_s,input_len,output_len) instead of --rate/--*-dist.")
@click.option("--slo-ttft", default=None, callback=named, help="TTFT target, e.g. 200ms or 0.5s (a bare number is milliseconds).")
@click.option("--slo-tpot", default=None, callback=named, help="Time-per-output-token target, e.g. 50ms (a bare number is milliseconds).")
@click.option("--slo-latency", default=None, callback=named, help="End-to-end latency target, e.g. 10s (a bare number is milliseconds).")
@click.option("--slo-percentile", type=float, default=99.0, show_default=True,
              help="Percentile of the requests' TTFT / TPOT / latency that must meet each --slo-* target.")
@click.option("--max-batched-tokens", type=int, default=2048, show_default=True,
              help="Tokens per engine step (per rank with --attention-dp: each rank schedules its own; SGLang's "
                   "--chunked-prefill-size is the group's: divide it by --tp).")
@click.option("--max-seqs", type=int, default=256, show_default=True,
              help="Requests running at once (per rank with --attention-dp, as TensorRT-LLM's max_batch_size and "
                   "vLLM's max_num_seqs; SGLang's --max-running-requests is the group's: divide it by --tp).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Random seed of the arrivals and lengths (the same lengths at every rate).")
@click.option("--compare", default=None,
              help="Comma-separated systems to rank by the SLO-meeting rate per GPU (which serves the target most "
                   "cheaply), e.g. DGX-A100,DGX-H100,HGX-H200; with --gpu-hour-price for each, by the cost of a "
                   "million output tokens at that rate.")
@_price_option
def serve(model_name: str, device: str | None, system: str | None, tp: int, pp: int, ep: int,
          attention_dp: bool, dtype: str | None, weights: str | None,
          kv_dtype: str | None, attention_kernel: str, softmax: str, allreduce: str, reserve_gib: float, model_ref: str | None,
          tracking_uri: str | None, as_json: bool, rate: str, n_requests: int, input_dist: str, output_dist: str,
          arrival: str, trace_file: str | None, slo_ttft: str | None, slo_tpot: str | None, slo_latency: str | None, slo_percentile: float,
          max_batched_tokens: int, max_seqs: int, seed: int, compare: str | None,
          gpu_hour_price: str | None) -> None:
    """Continuous batching at a request rate: TTFT/TPOT/latency percentiles and the highest rate meeting the SLO.

    MODEL_OR_FILE: a library name (`hybrid llm models`), a YAML/JSON config (Megatron keys or a Hugging Face
    config.json) or a Hugging Face checkpoint directory holding config.json."""
    from hybrid.workloads.llm.pricing import cost_per_million_tokens, parse_gpu_hour_prices, rank_compared
    from hybrid.workloads.llm.serving import (
        SLO,
        SchedulerConfig,
        StepCosts,
        Trace,
        make_trace,
        max_rate,
        parse_dist,
        parse_rate,
        parse_time_ms,
        read_trace,
        simulate,
    )

    _positive(requests=n_requests)
    if trace_file:
        # a trace brings its own arrivals, lengths and count: options that generate requests would be ignored
        # (`--trace t.csv --rate 50/s` replayed the trace at its own rate, silently)
        ctx = click.get_current_context()
        generating = [p.opts[0] for p in ctx.command.params
                      if p.name in ("rate", "n_requests", "input_dist", "output_dist", "arrival", "seed")
                      and ctx.get_parameter_source(p.name) not in (None, click.core.ParameterSource.DEFAULT)]
        if generating:
            raise InvalidInputError(f"{', '.join(generating)} generate{'s' if len(generating) == 1 else ''} requests; "
                                    "--trace replays its own (arrival times, lengths, count): give one or the other")
    if not 0 < slo_percentile <= 100:
        raise InvalidInputError(f"--slo-percentile must be in (0, 100], got {slo_percentile}")
    cost, cat, cost_ref = _predictor(model_ref, tracking_uri)
    prices = parse_gpu_hour_prices(gpu_hour_price, cat) if gpu_hour_price is not None else None
    if compare is not None:  # checked before any simulation: a typo is an error now, not after the searches
        if [c for c in compare.split(",") if c.strip()] and not (slo_ttft or slo_tpot or slo_latency):
            raise InvalidInputError("--compare needs an SLO (--slo-ttft, --slo-tpot or --slo-latency)")
        compare_names(compare, cat)
    s = _setup(model_name, device, system, tp, pp, dtype, weights, kv_dtype, attention_kernel, allreduce, reserve_gib, cat,
               ep=ep, attention_dp=attention_dp, softmax=softmax)
    r_s = parse_rate(rate)
    idist, odist = parse_dist(input_dist), parse_dist(output_dist)
    sched = SchedulerConfig(max_batched_tokens, max_seqs)
    trace = read_trace(trace_file) if trace_file else make_trace(r_s, n_requests, idist, odist, seed, arrival)
    costs, costs_low, costs_high = StepCosts.build_bounds(s, sched.max_batched_tokens, sched.max_seqs,
                                                          int((trace.input_len + trace.output_len).max()), cost,
                                                          prompt_lengths=trace.input_len)
    slo = SLO(parse_time_ms(slo_ttft) if slo_ttft else None, parse_time_ms(slo_tpot) if slo_tpot else None,
              parse_time_ms(slo_latency) if slo_latency else None, slo_percentile)
    mean_out = float(trace.output_len.mean())

    def rank_others(ranking: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
        """``ranking`` (this run's row) with every --compare system's SLO-meeting rate, ranked (see below)."""
        from hybrid.ops.roofline import resolve_system

        for name in [c.strip() for c in str(compare).split(",") if c.strip()]:
            known = resolve_system(cat, name)
            if (known.key, known.device) == (s.system.key, s.device.key):
                continue  # this run's own system, ranked above
            try:
                other = _setup(model_name, None, name, tp, pp, dtype, weights, kv_dtype, attention_kernel,
                               allreduce, reserve_gib, cat, ep=ep, attention_dp=attention_dp, softmax=softmax)
                r_best, at_best = max_rate(other, slo, n_requests, idist, odist, cost, sched, seed,
                                           trace=trace if trace_file else None, progress=sys.stderr.isatty(),
                                           arrival=arrival)
                row = {"system": other.system.key, "device": other.device.key, "gpus": other.gpus}
                if prices is not None:
                    p_other = _price(prices, other)
                    row["gpu_hour_price"] = p_other
                    # steady state at the SLO-meeting rate (the rate its arrivals realised): every request served
                    row["cost_per_1m_output_tokens"] = (
                        None if p_other is None or at_best is None or not math.isfinite(r_best)
                        else _steady_cost(p_other, at_best.rate, mean_out, other.gpus))
                if math.isfinite(r_best):
                    ranking.append({**row, "max_rate_per_s": r_best, "rate_per_gpu": r_best / other.gpus,
                                    "note": "" if r_best > 0 else "no rate meets the SLO"})
                else:  # the trace cannot load this system: no rate to rank it by
                    ranking.append({**row, "max_rate_per_s": None, "rate_per_gpu": None,
                                    "note": "every rate meets the SLO with so few requests (--requests)"})
            except InvalidInputError as exc:  # does not fit / no fp8 there: ranked last, with the reason
                ranking.append({"system": known.key, "device": known.device, "gpus": tp * pp, "max_rate_per_s": 0.0,
                                "rate_per_gpu": 0.0, **({"gpu_hour_price": None, "cost_per_1m_output_tokens": None}
                                                        if prices is not None else {}), "note": str(exc)})
        # unloaded systems (every rate meets the SLO: None) first, as the fastest; no rate at all last
        return rank_compared(
            ranking, lambda r: -(math.inf if r["rate_per_gpu"] is None else r["rate_per_gpu"]),
            "cost_per_1m_output_tokens", lambda r: r["rate_per_gpu"] is not None and r["rate_per_gpu"] > 0)

    try:
        res = simulate(s, trace, cost, sched, costs)
    except InvalidInputError as exc:
        if not compare or slo.empty:
            raise
        # this run's own deployment does not fit: the other systems are still ranked (where it does fit may be
        # the answer), this one last with the reason, as `llm infer --compare` does; then the refusal
        ranking = [{"system": s.system.key, "device": s.device.key, "gpus": s.gpus, "max_rate_per_s": 0.0,
                    "rate_per_gpu": 0.0, **({"gpu_hour_price": _price(prices, s), "cost_per_1m_output_tokens": None}
                                            if prices is not None else {}), "note": f"this run: {exc}"}]
        ranked, by_cost = rank_others(ranking)
        failed = {"model": s.model.name, "device": s.device.key, "system": s.system.key, "tp": tp, "pp": pp,
                  "gpus": s.gpus, "error": str(exc), "compare": ranked,
                  "compare_ranked_by": "cost_per_1m_output_tokens" if by_cost else "rate_per_gpu"}
        if as_json:
            echo_json(failed)
            return
        _compare_table(failed, prices is not None)
        raise
    out: dict[str, Any] = {"model": s.model.name, "device": s.device.key, "system": s.system.key, "tp": tp,
                           "pp": pp, "gpus": s.gpus, "ep": ep, "attention_dp": attention_dp, "precision": s.precision.label, "input_dist": input_dist, "output_dist": output_dist,
                           **res.to_dict(), "cost_model": cost_ref, "method": costs.method}
    if costs_low is not None and costs_high is not None:
        # the same trace with every op at the low / high end of its 80% interval (how far the op costs can be off;
        # the scheduler re-batches at each end, so queueing moves with them)
        ends = {"low": simulate(s, trace, cost, sched, costs_low).percentiles(),
                "high": simulate(s, trace, cost, sched, costs_high).percentiles()}
        out["interval"] = {f"{metric}_{p}_{end}": ends[end][metric][p] for metric in ends["low"]
                           for p in ("p50", "p90", "p99") for end in ("low", "high")}
    elif model_ref:
        out["interval"] = None
        note = NO_INTERVAL_NOTE.format(what="deployment")
        out["notes"] = [*out.get("notes", []), note]
        click.echo(f"warning: {note}", err=True)
    price = _price(prices, s)
    if prices is not None:
        # offline: the deployment's throughput, every GPU busy. At a finite rate the GPUs are paid for whether busy
        # or not, and a short trace's throughput is diluted by its ramp-up and drain: the cost is given at the
        # highest rate meeting the SLO (at_max_rate), where the deployment keeps up with the requests by construction
        out["gpu_hour_price"] = price
        out["cost_per_1m_output_tokens"] = (cost_per_million_tokens(price, res.output_tokens_per_s_per_gpu)
                                            if price is not None and math.isinf(r_s) and not trace_file else None)
        if price is None:
            note = f"no GPU-hour price given for {s.system.key} or {s.device.key}"
            out["notes"] = [*out.get("notes", []), note]
            click.echo(f"warning: {note}", err=True)
    if trace_file:
        out.update(trace=trace_file, input_dist=None, output_dist=None)
    else:
        out["rate_per_s"] = r_s  # null in --json when offline (inf)
        out["offline"] = math.isinf(r_s)
    from hybrid.workloads.llm.dims import context_note

    longest = context_note(s.model, int((trace.input_len + trace.output_len).max()))
    if longest:  # in place of the simulation's own copy of the same note
        out["notes"] = [*(n for n in out.get("notes", []) if n != longest), f"the longest request: {longest}"]
        click.echo(f"warning: the longest request: {longest}", err=True)
    for note in s.deployment_notes():
        out["notes"] = [*out.get("notes", []), note]
        click.echo(f"warning: {note}", err=True)
    if res.overloaded:  # the percentiles of a growing queue: said, not only listed in the JSON's notes
        click.echo(f"warning: {res.notes[-1]}", err=True)
    if not slo.empty:
        out["slo"] = {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms, "latency_ms": slo.latency_ms,
                      "percentile": slo_percentile, "met_at_rate": slo.met(res)}
        best, best_res = max_rate(s, slo, n_requests, idist, odist, cost, sched, seed,
                                  trace=trace if trace_file else None, progress=sys.stderr.isatty(), arrival=arrival)
        # nominal rate of the search; at_max_rate's rate_per_s is the rate its random arrivals realised
        out["max_rate_meeting_slo_per_s"] = best if math.isfinite(best) else None
        out["at_max_rate"] = best_res.to_dict() if best_res is not None else None
        if out["at_max_rate"] is not None and price is not None:
            # steady state at that rate: every request's output tokens served (the SLO is met); none when every
            # rate meets it (the requests arrived at once: no sustained rate to price)
            out["at_max_rate"]["cost_per_1m_output_tokens"] = (
                _steady_cost(price, best_res.rate, mean_out, s.gpus) if math.isfinite(best) else None)
        if out["at_max_rate"] is not None:
            out["at_max_rate"]["rate_note"] = (
                "max_rate_meeting_slo_per_s is the nominal arrival rate the search found; rate_per_s here is the "
                "rate the simulated arrivals realised at it ((requests - 1) / span of their arrival times)")
        if best == 0:  # not even requests one at a time meet it: say by how much they miss it alone
            import numpy as np

            # this run's own requests (the trace's, or the lengths every rate draws), each alone on the deployment
            # (1000 s apart, as the search's slowest rate spaces them), at the SLO's percentile. One request drawn
            # from the default --input-dist stood in for them before: a trace of 8000-token prompts missing a 50 ms
            # TTFT by itself (151 ms) was said to miss it by queueing
            gap = min(1e3, 1e9 / len(trace))  # the clock resolves a step at the last arrival (simulate)
            alone = simulate(s, Trace(np.arange(len(trace)) * gap, trace.input_len, trace.output_len), cost, sched,
                             costs)
            misses = []
            for k, v, times in (("ttft", slo.ttft_ms, alone.ttft_ms), ("tpot", slo.tpot_ms, alone.tpot_ms),
                                ("latency", slo.latency_ms, alone.latency_ms)):
                times = times[np.isfinite(times)]  # TPOT: the requests that generate more than one token
                if v is not None and len(times) and float(np.percentile(times, slo_percentile)) > v:
                    misses.append(f"p{slo_percentile:g} {k} {float(np.percentile(times, slo_percentile)):.4g} ms "
                                  f"> {v:g} ms")
            note = ("no rate meets the SLO: " + (f"the requests alone on the deployment miss it ({', '.join(misses)})"
                                                 if misses else "queueing misses it at every rate tried"))
            out["notes"] = [*out.get("notes", []), note]
            click.echo(f"warning: {note}", err=True)
        elif math.isfinite(best) and not trace_file and n_requests < 2000:
            note = (f"the highest rate comes from {n_requests} simulated requests: a short trace drains before its "
                    "queues reach steady state, so it tends to overstate what a deployment sustains (more "
                    "--requests, e.g. 2000, converge it)")
            out["notes"] = [*out.get("notes", []), note]
            click.echo(f"note: {note}", err=True)
        if not math.isfinite(best):
            out["at_max_rate"] = None  # no highest rate: the run at the fastest rate tried is not one
            more = ("a longer trace (more requests in --trace)" if trace_file
                    else "more requests (--requests)")
            note = (f"every rate meets the SLO: even all {len(trace)} requests arriving at once do, so they cannot "
                    f"load the system; simulate {more} to find the highest rate")
            out["notes"] = [*out.get("notes", []), note]
            click.echo(f"warning: {note}", err=True)
    if compare:
        if slo.empty:
            raise InvalidInputError("--compare needs an SLO (--slo-ttft, --slo-tpot or --slo-latency)")
        mine = out.get("max_rate_meeting_slo_per_s")  # None: every rate meets the SLO (the trace cannot load it)
        ranking = [{"system": s.system.key, "device": s.device.key, "gpus": s.gpus, "max_rate_per_s": mine,
                    "rate_per_gpu": None if mine is None else mine / s.gpus,
                    **({"gpu_hour_price": price, "cost_per_1m_output_tokens": (out["at_max_rate"] or {}).get(
                        "cost_per_1m_output_tokens")} if prices is not None else {}),
                    "note": ("this run; every rate meets the SLO with so few requests (--requests)" if mine is None
                             else "this run" if mine > 0 else "this run; no rate meets the SLO")}]
        out["compare"], by_cost = rank_others(ranking)
        out["compare_ranked_by"] = "cost_per_1m_output_tokens" if by_cost else "rate_per_gpu"
    if as_json:
        echo_json(out)
        return
    what = (f"trace {trace_file} ({len(trace)} requests)" if trace_file else
            f"{n_requests} requests " + ("at once (offline: maximum throughput)" if math.isinf(r_s) else f"at {r_s:g}/s")
            + f", input {input_dist}, output {output_dist}")
    click.echo(f"{s.model.name} on {s.device.key} x{tp} ({s.precision.label}), {what}")
    pct = res.percentiles()
    echo_table([(k, *("-" if v[c] is None else v[c] for c in ("p50", "p90", "p99", "mean"))) for k, v in pct.items()],
               ["metric", "p50", "p90", "p99", "mean"])
    if out.get("interval"):
        iv = out["interval"]
        tpot = ("" if iv["tpot_ms_p50_low"] is None or iv["tpot_ms_p50_high"] is None  # one-token outputs: none
                else f", p50 TPOT {iv['tpot_ms_p50_low']:.2f} - {iv['tpot_ms_p50_high']:.2f} ms")
        click.echo(f"80% interval (every op at the low / high end of its own): p50 TTFT {iv['ttft_ms_p50_low']:.1f} - "
                   f"{iv['ttft_ms_p50_high']:.1f} ms{tpot} (how far the op costs can be off, not the serving "
                   "software's own overheads)")
    tps = res.output_tokens_per_s_per_gpu
    click.echo(f"throughput {f'{tps:,.0f}' if tps >= 10 else f'{tps:.3g}'} output tokens/s per GPU; "
               f"{res.steps} steps, up to {res.max_running} running, KV capacity {res.kv_capacity_tokens} tokens")
    if out.get("max_rate_meeting_slo_per_s") is not None:
        click.echo(f"highest rate meeting the SLO (p{slo_percentile:g}): {out['max_rate_meeting_slo_per_s']:.3g}/s")
    at_max = out.get("at_max_rate") or {}
    costs = ([f"{out['cost_per_1m_output_tokens']:.4g} per million output tokens at full throughput"]
             if out.get("cost_per_1m_output_tokens") is not None else [])
    if at_max.get("cost_per_1m_output_tokens") is not None:
        costs.append(f"{at_max['cost_per_1m_output_tokens']:.4g} per million output tokens at the highest rate "
                     "meeting the SLO")
    if costs:
        click.echo(f"at {out['gpu_hour_price']:g} per GPU-hour: " + "; ".join(costs))
    if "compare" in out:
        _compare_table(out, prices is not None)
    roofline_note(cost_ref)


def _compare_table(out: dict[str, Any], priced: bool) -> None:
    """`llm serve --compare`'s ranking of the systems (``out["compare"]``) as a text table."""
    dash = "-"
    if out["compare_ranked_by"] == "cost_per_1m_output_tokens":
        click.echo("\nsystems by cost per million output tokens at their SLO-meeting rate (lowest first):")
    else:
        click.echo("\nsystems by SLO-meeting requests/s per GPU (highest first):")
    echo_table([(r["system"], r["device"], r["gpus"], dash if r["max_rate_per_s"] is None else r["max_rate_per_s"],
                 dash if r["rate_per_gpu"] is None else r["rate_per_gpu"],
                 *([dash if r["gpu_hour_price"] is None else f"{r['gpu_hour_price']:g}",
                    dash if r["cost_per_1m_output_tokens"] is None else f"{r['cost_per_1m_output_tokens']:.4g}"]
                   if priced else []), r["note"])
                for r in out["compare"]],
               ["system", "device", "gpus", "max rate/s", "per GPU",
                *(["GPU-hour price", "per 1M tokens"] if priced else []), "note"])


def register(group: click.Group) -> None:
    """Add ``infer``, ``serve`` and ``capacity`` to the ``hybrid llm`` group."""
    for cmd in (infer, serve, capacity):
        group.add_command(cmd)

