"""``hybrid llm models|train|memory|search``: transformer training on Megatron-style parallel mappings."""

from __future__ import annotations

import math
from typing import Any

import click

from hybrid.cli.output import (
    compare_names,
    e2e_line,
    echo_json,
    echo_table,
    gpu_hour_price_option,
    named,
    roofline_note,
)
from hybrid.cli.simulate import load_cost_model, model_options

#: ``--softmax``: how the fused attention kernel schedules the softmax's exps (hybrid.ops.roofline.softmax_schedule)
SOFTMAX_HELP = ("Fused attention's softmax: in series with its matrix multiplies (FlashAttention-2, PyTorch's SDPA "
                "default), overlapped (FlashAttention-3, cuDNN / Transformer Engine on Hopper+), or auto (by GPU "
                "generation: overlapped from Hopper on).")
#: ``--dropout/--no-dropout``: the job's dropout, by default the model's own (TransformerConfig.dropout)
DROPOUT_HELP = ("Train with / without hidden and attention dropout. Default: as the model does (on for Megatron GPT, "
                "GPT-2, BERT; off for Llama, Mistral, Qwen, DeepSeek, MPT...: its config's dropout probabilities).")


def dropout_text(model: Any, cfg: Any) -> str:
    """'dropout on (the model's)' / 'dropout off (--no-dropout)'."""
    on = cfg.uses_dropout(model)
    return (f"dropout {'on' if on else 'off'} "
            + ("(the model's)" if cfg.dropout_source() == "model" else f"({'--dropout' if on else '--no-dropout'})"))


def job_line(model: Any, cfg: Any, device: str, system: str) -> str:
    """The job a command sized, first line of `llm train` and `llm memory` alike: the mapping, microbatches,
    sequence length (a config without one trains at a default), recompute, SP, optimizer states, dropout and
    attention kernel, which all move the numbers that follow."""
    states = "FSDP" if cfg.fsdp else "distributed" if cfg.distributed_optimizer else "replicated"
    return (f"{model.name} ({model.num_params / 1e9:.1f}B) on {cfg.gpus} x {device} ({system}); "
            f"tp {cfg.tp} pp {cfg.pp} dp {cfg.dp} cp {cfg.cp} ep {cfg.ep} vp {cfg.vp}, micro {cfg.micro_batch} x "
            f"{cfg.num_microbatches}, seq {cfg.seq(model)}, recompute {cfg.recompute}, sp {'on' if cfg.sp else 'off'}, "
            f"optimizer states {states}, {dropout_text(model, cfg)}, "
            f"{'FlashAttention' if cfg.flash_attention else 'unfused attention'}")


@click.group("llm")
def llm() -> None:
    """LLMs: model library; training (iteration time, memory per GPU, mapping search); inference (static batch, serving, capacity)."""


@llm.command("models")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def models(as_json: bool) -> None:
    """List the built-in transformer models (parameters, shapes, source)."""
    from hybrid.workloads.llm.model import library

    rows = [m.summary() for m in library().values()]
    if as_json:
        echo_json(rows)
        return
    echo_table([[r["name"], r["params_b"], r["active_params_b"] if r["experts"] else "", r["layers"], r["hidden"],
                 r["heads"], r["kv_heads"], r["ffn"], r["activation"], r["vocab"], r["seq"], r["experts"]]
                for r in rows],
               ["name", "params_b", "active_b", "layers", "hidden", "heads", "kv", "ffn", "act", "vocab", "seq",
                "experts"])


def job_options(fn: Any) -> Any:
    opts = [
        click.argument("model_name", metavar="MODEL_OR_FILE"),
        click.option("--system", required=True, help="Catalog system (DGX-A100, DGX-H100, DGX-B200, GB200-NVL72...)."),
        click.option("--gpus", type=int, required=True, help="Total GPUs (multi-node implied)."),
        click.option("--tp", type=int, default=1, show_default=True, help="Tensor parallel size."),
        click.option("--pp", type=int, default=1, show_default=True, help="Pipeline parallel size."),
        click.option("--cp", type=int, default=1, show_default=True, help="Context parallel size."),
        click.option("--ep", type=int, default=1, show_default=True, help="Expert parallel size (MoE)."),
        click.option("--vp", type=int, default=1, show_default=True,
                     help="Virtual pipeline stages per rank (interleaved 1F1B)."),
        click.option("--global-batch", type=int, required=True, help="Sequences per iteration."),
        click.option("--micro-batch", type=int, default=1, show_default=True),
        click.option("--seq", type=int, default=None, help="Sequence length (default: the model's)."),
        click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none",
                     show_default=True),
        click.option("--sp", is_flag=True, help="Sequence parallelism."),
        click.option("--distributed-optimizer", is_flag=True, help="Shard optimizer states over DP (ZeRO-1)."),
        click.option("--fsdp", is_flag=True, help="FSDP / ZeRO-3: shard parameters, gradients, optimizer."),
        click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8", "fp32"]), default="bf16", show_default=True),
        click.option("--fp8-weight-cast", type=click.Choice(["microbatch", "step"]), default="microbatch",
                     show_default=True,
                     help="fp8: cast each weight to fp8 every microbatch (Transformer Engine's default) or once per "
                          "iteration (Megatron-LM)."),
        click.option("--no-flash-attention", is_flag=True, help="Unfused attention (s x s scores in memory)."),
        click.option("--softmax", type=click.Choice(["auto", "serial", "overlapped"]), default="auto",
                     show_default=True, help=SOFTMAX_HELP),
        click.option("--dropout/--no-dropout", default=None, help=DROPOUT_HELP),
        click.option("--no-overlap-grad-reduce", is_flag=True, help="DP gradient reduce after the backward."),
        click.option("--no-overlap-param-gather", is_flag=True, help="Parameter all-gathers not prefetched."),
        click.option("--tp-comm-overlap", is_flag=True, help="Hide TP collectives behind the GEMMs."),
        click.option("--reserve-gib", type=float, default=3.0, show_default=True,
                     help="Framework reserve per GPU (CUDA context, NCCL, fragmentation)."),
        click.option("--eager-ops", is_flag=True,
                     help="Cost ops with the eager per-op dispatch a --model calibrated on eager timings includes "
                          "(small runs that wait on the host); default: kernel times."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _job(kw: dict[str, Any]) -> tuple[Any, Any]:
    from hybrid.workloads.llm.config import TrainingConfig
    from hybrid.workloads.llm.model import load_model

    model = load_model(kw["model_name"])
    if kw["sp"] and kw["tp"] == 1:  # as Megatron-LM does: nothing to split the norms and dropout over
        click.echo("warning: --sp needs tensor parallelism (--tp > 1); sequence parallelism is off at tp 1", err=True)
    cfg = TrainingConfig(
        gpus=kw["gpus"], global_batch=kw["global_batch"], micro_batch=kw["micro_batch"], tp=kw["tp"], pp=kw["pp"],
        cp=kw["cp"], ep=kw["ep"], vp=kw["vp"], seq_length=kw["seq"], sp=kw["sp"] and kw["tp"] > 1,
        distributed_optimizer=kw["distributed_optimizer"], fsdp=kw["fsdp"], recompute=kw["recompute"],
        dtype=kw["dtype"], flash_attention=not kw["no_flash_attention"], softmax=kw["softmax"],
        dropout=kw["dropout"],
        overlap_grad_reduce=not kw["no_overlap_grad_reduce"], overlap_param_gather=not kw["no_overlap_param_gather"],
        tp_comm_overlap=kw["tp_comm_overlap"], reserve_gib=kw["reserve_gib"], kernel_times=not kw["eager_ops"],
        fp8_weight_cast=kw["fp8_weight_cast"])
    return model, cfg


def remedy_text(remedies: list[dict[str, Any]]) -> str:
    """One phrase for :func:`hybrid.workloads.llm.train.memory_remedies`."""
    if not remedies:
        return ("none of its memory knobs (SP, distributed optimizer, FSDP, micro-batch, recomputation) makes it fit: "
                "more GPUs or another mapping (`hybrid llm search`)")
    return "it fits with " + " or ".join(f"{r['flags']} ({r['memory_gib']:.1f} GiB)" for r in remedies)


@llm.command("train")
@job_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Chrome trace of the pipeline (one process per stage).")
@click.option("--allow-oom", is_flag=True, help="Predict even when the mapping does not fit in memory.")
@gpu_hour_price_option("Adds the cost of a million training tokens.")
@click.option("--train-tokens", default=None,
              help="Tokens of the whole run (300B, 1.5T, 2e12): its days, GPU-hours and, with a price, cost.")
@model_options
def train(as_json: bool, trace_path: str | None, allow_oom: bool, gpu_hour_price: str | None,
          train_tokens: str | None, model_ref: str | None, tracking_uri: str | None, **kw: Any) -> None:
    """Predict one training iteration: time, tokens/s, MFU/HFU, breakdown, memory per GPU.

    MODEL_OR_FILE: a library name (`hybrid llm models`), a YAML/JSON config (Megatron keys or a Hugging Face
    config.json) or a Hugging Face checkpoint directory holding config.json."""
    from hybrid.engine.costs import model_catalog
    from hybrid.errors import InvalidInputError
    from hybrid.workloads.llm.pricing import (
        cost_per_million_tokens,
        parse_gpu_hour_prices,
        parse_token_count,
        training_run,
    )
    from hybrid.workloads.llm.train import memory_remedies, predict_training

    model, cfg = _job(kw)
    cost_model, name = load_cost_model(model_ref, tracking_uri)
    run_tokens = parse_token_count(train_tokens) if train_tokens is not None else None
    prices = None
    if gpu_hour_price is not None:
        from hybrid.engine.costs import model_catalog
        from hybrid.hardware.catalog import default_catalog

        prices = parse_gpu_hour_prices(gpu_hour_price, model_catalog(cost_model, default_catalog()))
    pred = predict_training(model, cfg, kw["system"], cost_model, name)
    remedies = None if pred.fits else memory_remedies(model, cfg, kw["system"], model_catalog(cost_model))
    if remedies is not None and not allow_oom:
        raise InvalidInputError(f"mapping does not fit: {pred.fit_reason}; {remedy_text(remedies)} "
                                "(--allow-oom predicts anyway)")
    summary = pred.summary()
    if remedies is not None:  # --allow-oom: predicted anyway, with what would make it fit (as `llm memory` says)
        summary["fits_with"] = remedies
    for note in pred.notes:
        click.echo(f"warning: {note}", err=True)
    price = prices.price(pred.target.system, pred.target.device) if prices is not None else None
    if prices is not None:
        summary["gpu_hour_price"] = price
        summary["cost_per_1m_tokens"] = (cost_per_million_tokens(price, pred.tokens_per_s / cfg.gpus)
                                         if price is not None else None)
        if price is None:
            summary["notes"] = [*summary.get("notes", []),
                                f"no GPU-hour price given for {pred.target.system} or {pred.target.device}"]
            click.echo(f"warning: {summary['notes'][-1]}", err=True)
    if run_tokens is not None:
        summary["run"] = training_run(run_tokens, pred.tokens_per_s, cfg.gpus, price)
    if trace_path:
        from hybrid.engine.trace import write_chrome_trace

        assert pred.sim is not None
        write_chrome_trace(pred.sim, trace_path, name=f"{model.name} tp{cfg.tp} pp{cfg.pp} dp{cfg.dp}")
        summary["trace"] = str(trace_path)
        if pred.simulated_microbatches is not None and pred.simulated_microbatches < cfg.num_microbatches:
            note = (f"the trace shows {pred.simulated_microbatches} of the {cfg.num_microbatches} microbatches (the "
                    "engine extends the repeating steady state exactly beyond them)")
            summary["notes"] = [*summary.get("notes", []), note]
            click.echo(f"note: {note}", err=True)
    if as_json:
        echo_json(summary)
        return
    click.echo(f"{job_line(model, cfg, pred.target.device, pred.target.system)}, cost model {name}")
    click.echo(f"iteration: {pred.iteration_s:.3f} s (closed form {pred.closed_form_iteration_s:.3f} s)   "
               f"tokens/s: {pred.tokens_per_s:,.0f} ({pred.tokens_per_s / cfg.gpus:,.0f} per GPU)   "
               f"MFU {pred.mfu * 100:.1f}%  HFU {pred.hfu * 100:.1f}%")
    if pred.mfu > 1.0:
        click.echo(f"note: MFU above 100% because model FLOPs count the full s x s attention scores (Megatron's "
                   f"convention) while causal attention kernels compute about half of them; counting only those, MFU "
                   f"is {pred.mfu_causal * 100:.1f}%" + ("" if model_ref else "; without --model every GEMM runs at "
                                                          "the datasheet peak (roofline)"))
    if pred.iteration_s_low is not None and pred.iteration_s_high is not None:
        click.echo(f"iteration 80% interval: {pred.iteration_s_low:.3f} - {pred.iteration_s_high:.3f} s "
                   "(every op at the low / high end of its interval: how far the op costs can be off, not the "
                   "schedule or framework; published iterations fell inside 90% of the time, "
                   "experiments/llm_training)")
    if "iteration_s_e2e_low" in summary:
        click.echo(e2e_line([f"{summary['iteration_s_e2e_low']:.3f} - {summary['iteration_s_e2e_high']:.3f} s"], summary,
                            "iterations"))
    echo_table([[k, v, v / pred.iteration_s * 100] for k, v in pred.breakdown_s.items()],
               ["part", "seconds", "% of iteration"])
    click.echo(f"closed-form bubble (pp-1)/vp x t_layers + lighter end: {pred.bubble_closed_form_s:.3f} s")
    # the reason holds both figures ("fits: 59.9 of 80.0 GiB"): said once, at one precision (the capacity was also
    # printed rounded to whole GiB before it, "74.5 GiB of 75 (fits: 74.5 of 74.5 GiB)")
    click.echo(f"memory per GPU: {pred.fit_reason}" + ("" if remedies is None else f"; {remedy_text(remedies)}"))
    click.echo("placement: " + "; ".join(f"{k}: {v}" for k, v in pred.placement.items() if v != "none"))
    click.echo(f"FLOPs: {summary['flops_formula']}")
    if summary.get("cost_per_1m_tokens") is not None:
        click.echo(f"at {price:g} per GPU-hour: {summary['cost_per_1m_tokens']:.4g} per million training tokens")
    if "run" in summary:
        r = summary["run"]
        click.echo(f"run of {r['tokens']:.4g} tokens: {r['days']:.3g} days on {cfg.gpus} GPUs, "
                   f"{r['gpu_hours']:,.0f} GPU-hours" + (f", cost {r['cost']:,.0f}" if "cost" in r else "")
                   + " (every iteration as predicted: no restarts, evaluation or input stalls)")
    if trace_path:
        click.echo(f"trace written to {trace_path}")
    roofline_note(name)


@llm.command("memory")
@job_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, callback=named,
              help="Bar plot of the breakdown (PNG/SVG/PDF).")
def memory(as_json: bool, plot_path: str | None, **kw: Any) -> None:
    """Memory per GPU of a training job (weights, gradients, optimizer, activations, ...), and whether it fits."""
    from hybrid.workloads.llm.train import job_notes, memory_only, memory_remedies

    model, cfg = _job(kw)
    mem, tgt = memory_only(model, cfg, kw["system"])
    row = mem.row(0)
    # the mapping and the memory keys of `llm train --json` (memory_gib_per_rank, memory_breakdown_gib,
    # fit_reason), beside this command's own memory_gib / reason
    out = {"model": model.name, "system": tgt.system, "device": tgt.device, "gpus": cfg.gpus, "tp": cfg.tp,
           "pp": cfg.pp, "dp": cfg.dp, "cp": cfg.cp, "ep": cfg.ep, "vp": cfg.vp, "micro_batch": cfg.micro_batch,
           "global_batch": cfg.global_batch, "seq_length": cfg.seq(model), "sp": cfg.sp, "recompute": cfg.recompute,
           "distributed_optimizer": cfg.distributed_optimizer, "fsdp": cfg.fsdp, "dtype": cfg.dtype,
           "dropout": cfg.uses_dropout(model), "dropout_from": cfg.dropout_source(), "memory_gib": row, "memory_gib_per_rank": row["total"], "memory_breakdown_gib": row,
           "fits": bool(mem.fits[0]), "reason": mem.reason(0), "fit_reason": mem.reason(0)}
    if not out["fits"]:  # what of the job's own memory knobs makes it fit
        out["fits_with"] = memory_remedies(model, cfg, kw["system"])
    if notes := job_notes(model, cfg):
        out["notes"] = notes
        for note in notes:
            click.echo(f"warning: {note}", err=True)
    if plot_path:
        from hybrid.reports.llm_plots import memory_bars

        # the plot file stands alone: its title names the job and says whether it fits, as the text form does
        verdict = "fits" if out["fits"] else "does not fit"
        memory_bars({f"{model.name}, recompute {cfg.recompute}": row}, row["capacity"], plot_path,
                    title=f"Memory per GPU: {verdict}\n{model.name} on {cfg.gpus} x {tgt.device} ({tgt.system}), "
                          f"tp {cfg.tp} pp {cfg.pp} dp {cfg.dp}"
                          # the other degrees where used: the mapping multiplies to the GPUs of the title
                          + "".join(f" {k} {v}" for k, v in (("cp", cfg.cp), ("ep", cfg.ep), ("vp", cfg.vp)) if v > 1)
                          + f", micro {cfg.micro_batch}")
        out["plot"] = plot_path
        if not as_json:
            click.echo(f"plot written to {plot_path}")
    if as_json:
        echo_json(out)
        return
    click.echo(job_line(model, cfg, tgt.device, tgt.system))
    echo_table([[k, v] for k, v in row.items()], ["part", "GiB"])
    click.echo(out["reason"] + ("" if out["fits"] else f"; {remedy_text(out['fits_with'])}"))


@llm.command("search")
@click.argument("model_name", metavar="MODEL_OR_FILE")
@click.option("--system", required=True, help="Catalog system (DGX-A100, DGX-H100, DGX-B200, GB200-NVL72...) or GPU.")
@click.option("--gpus", type=int, required=True, help="Total GPUs: every mapping uses all of them.")
@click.option("--global-batch", type=int, required=True,
              help="Sequences per iteration: a multiple of micro-batch x DP for each mapping.")
@click.option("--seq", type=int, default=None, help="Sequence length (default: the model's).")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8", "fp32"]), default="bf16", show_default=True)
@click.option("--fp8-weight-cast", type=click.Choice(["microbatch", "step"]), default="microbatch", show_default=True,
              help="fp8: cast each weight to fp8 every microbatch (Transformer Engine's default) or once per "
                   "iteration (Megatron-LM).")
@click.option("--no-flash-attention", is_flag=True, help="Unfused attention (s x s scores in memory; no CP).")
@click.option("--softmax", type=click.Choice(["auto", "serial", "overlapped"]), default="auto", show_default=True,
              help=SOFTMAX_HELP)
@click.option("--dropout/--no-dropout", default=None, help=DROPOUT_HELP)
@click.option("--reserve-gib", type=float, default=3.0, show_default=True,
              help="Framework reserve per GPU (CUDA context, NCCL, fragmentation), as `llm train` / `llm memory` "
                   "count it: what a mapping must leave free to fit.")
@click.option("--top", type=int, default=10, show_default=True, help="Fitting mappings shown, fastest first.")
@click.option("--max-cp", type=int, default=8, show_default=True,
              help="Largest context-parallel degree searched (1: no CP).")
@click.option("--no-fsdp", is_flag=True, help="Leave FSDP / ZeRO-3 out of the search.")
@click.option("--no-ep", is_flag=True, help="Leave expert parallelism out of the search (MoE models).")
@click.option("--compare", default=None,
              help="Comma-separated systems to search too, ranked by their fastest mapping's tokens/s per GPU (or, "
                   "with --gpu-hour-price for each, by its cost per million tokens): which hardware to train on.")
@gpu_hour_price_option("Adds each mapping's cost per million training tokens.", "DGX-H100=3.9,DGX-A100=1.6")
@click.option("--train-tokens", default=None,
              help="Tokens of the whole run (300B, 1.5T): days, GPU-hours and, with a price, cost of the fastest "
                   "mapping (of each --compare system).")
@click.option("--json", "as_json", is_flag=True)
@model_options
def search_cmd(model_name: str, system: str, gpus: int, global_batch: int, seq: int | None, dtype: str,
               fp8_weight_cast: str, no_flash_attention: bool, softmax: str, dropout: bool | None, reserve_gib: float,
               top: int, max_cp: int, no_fsdp: bool, no_ep: bool,
               compare: str | None, gpu_hour_price: str | None, train_tokens: str | None, as_json: bool,
               model_ref: str | None, tracking_uri: str | None) -> None:
    """Every (tp, pp, cp, dp, ep, micro-batch, vp, recompute, SP, distributed optimizer or FSDP) mapping that
    fits, fastest first (CP up to --max-cp, EP for MoE models only).

    MODEL_OR_FILE: a library name (`hybrid llm models`), a YAML/JSON config or a Hugging Face config.json (or its
    checkpoint directory), as `hybrid llm train` takes.

    With a calibrated --model (80% intervals), each mapping carries iteration_s_low / iteration_s_high and the
    picks whose interval overlaps the fastest pick's are flagged (overlaps_fastest; '~' in the table)."""
    from hybrid.engine.costs import model_catalog
    from hybrid.errors import InvalidInputError
    from hybrid.hardware.catalog import default_catalog
    from hybrid.ops.roofline import resolve_system
    from hybrid.workloads.llm.costing import kv_replication_note
    from hybrid.workloads.llm.model import load_model
    from hybrid.workloads.llm.pricing import (
        cost_per_million_tokens,
        parse_gpu_hour_prices,
        parse_token_count,
        rank_compared,
        training_run,
    )
    from hybrid.workloads.llm.train import search, search_base

    if top <= 0:
        raise InvalidInputError(f"--top must be positive, got {top}")
    model = load_model(model_name)
    base = search_base(gpus, global_batch, seq_length=seq, dtype=dtype, flash_attention=not no_flash_attention,
                       softmax=softmax, fp8_weight_cast=fp8_weight_cast, dropout=dropout, reserve_gib=reserve_gib)
    cost_model, name = load_cost_model(model_ref, tracking_uri)
    if max_cp <= 0:
        raise InvalidInputError(f"--max-cp must be positive, got {max_cp}")
    cat = model_catalog(cost_model, default_catalog())
    run_tokens = parse_token_count(train_tokens) if train_tokens is not None else None
    prices = parse_gpu_hour_prices(gpu_hour_price, cat) if gpu_hour_price is not None else None
    others = compare_names(compare, cat)  # a typo is an error before any search
    targets = {n: resolve_system(cat, n) for n in [system, *others]}
    space = {"max_cp": max_cp, "fsdp": not no_fsdp, "expert_parallel": not no_ep}

    def priced(frame: Any, sys_name: str) -> float | None:
        """Add cost_per_1m_tokens to the mappings of ``sys_name`` (where a price applies); return the price."""
        if prices is None:
            return None
        t = targets[sys_name]
        price = prices.price(t.key, t.device)
        frame["cost_per_1m_tokens"] = (cost_per_million_tokens(price, frame["tokens_per_s_per_gpu"].to_numpy())
                                       if price is not None else None)
        return price

    # with --compare, this run's system is one of the ranked ones: where nothing fits (or it cannot run the dtype)
    # it ranks last with the reason, as a compared system does, instead of ending the comparison
    own_error: InvalidInputError | None = None
    try:
        res = search(model, base, system, cost_model, top=top, **space)
    except InvalidInputError as exc:
        if not others:
            raise
        own_error, res = exc, None
    price = priced(res, system) if res is not None else None
    payload: dict[str, Any] = {"model": model.name, "cost_model": name,
                               "candidates": None if res is None else res.attrs.get("n_candidates"),
                               "fitting": 0 if res is None else res.attrs.get("n_fit"),
                               "dropout": base.uses_dropout(model), "dropout_from": base.dropout_source()}
    if own_error is not None:
        payload["error"] = str(own_error)
    # the fastest pick's own warnings: a learned position table too short, TP above the KV heads
    kv_note = kv_replication_note(model, int(res["tp"].iloc[0])) if res is not None else ""
    price_notes: list[str] = []
    if prices is not None:  # as `llm train` says it; and a price that prices no searched system is no silent no-op
        systems = list({t.key: t for t in targets.values()}.values())
        if unpriced := [f"{t.key} ({t.device})" for t in systems if prices.price(t.key, t.device) is None]:
            price_notes.append(f"no GPU-hour price given for {', '.join(unpriced)}: no cost per token for it")
        if unused := prices.unused([(t.key, t.device) for t in systems]):
            price_notes.append(f"the GPU-hour price of {', '.join(unused)} prices none of the systems searched "
                               f"({', '.join(t.key for t in systems)}): ignored"
                               + ("; a system's own price wins over its GPU's"
                                  if set(unused) & {t.device for t in systems} else "")
                               + ("" if others else " (--compare a system to rank it beside this one)"))
    if notes := [n for n in (model.position_note(base.seq(model)), kv_note and f"fastest mapping: {kv_note}",
                             *([] if res is None else res.attrs.get("notes", [])), *price_notes) if n]:
        payload["notes"] = notes
        for note in notes:
            click.echo(f"warning: {note}", err=True)
    if prices is not None and res is not None:
        payload["gpu_hour_price"] = price
    if run_tokens is not None and res is not None:  # the fastest mapping's run
        payload["run"] = training_run(run_tokens, float(res["tokens_per_s_per_gpu"].iloc[0]) * gpus, gpus, price)
    ranking: list[dict[str, Any]] = []
    if own_error is not None:
        t0 = targets[system]
        ranking.append({"system": t0.key, "device": t0.device, "gpus": gpus, "mapping": None, "iteration_s": None,
                        "engine_s": None, "tokens_per_s_per_gpu": None, "mfu": None,
                        **({"gpu_hour_price": None, "cost_per_1m_tokens": None} if prices is not None else {}),
                        "note": f"this run: {own_error}"})
    elif others:  # this run's own system ranks with the others (its fastest mapping)
        b0 = res.iloc[0]
        t0 = targets[system]
        ranking.append({"system": t0.key, "device": t0.device, "gpus": gpus, "mapping": {
            "tp": int(b0.tp), "pp": int(b0.pp), "cp": int(b0.cp), "dp": int(b0.dp), "ep": int(b0.ep),
            "micro_batch": int(b0.mb), "vp": int(b0.vp), "recompute": str(b0.recompute), "sp": bool(b0.sp),
            "optimizer": "dist" if b0.distopt else ("fsdp" if b0.fsdp else "")},
            "iteration_s": float(b0.iteration_s), "engine_s": float(b0.engine_s),
            "tokens_per_s_per_gpu": float(b0.tokens_per_s_per_gpu),
            "mfu": float(b0.mfu), "memory_gib": float(b0.memory_gib), **_interval_of(b0),
            **({"gpu_hour_price": price, "cost_per_1m_tokens": None if price is None
                else float(b0.cost_per_1m_tokens)} if prices is not None else {}),
            **({"run": training_run(run_tokens, float(b0.tokens_per_s_per_gpu) * gpus, gpus, price)}
               if run_tokens is not None else {}), "note": "this run"})
    for other in others:
        if targets[other].key == targets[system].key:
            continue  # this run's own system, ranked above
        row: dict[str, Any] = {"system": targets[other].key, "device": targets[other].device, "gpus": gpus}
        try:
            best = search(model, base, other, cost_model, top=1, engine_top=1, **space)
        except InvalidInputError as exc:  # nothing fits there, no fp8 rate, ...: ranked last, with the reason
            ranking.append({**row, "mapping": None, "iteration_s": None, "engine_s": None, "tokens_per_s_per_gpu": None,
                            "mfu": None,
                            **({"gpu_hour_price": None, "cost_per_1m_tokens": None} if prices is not None else {}),
                            "note": str(exc)})
            continue
        p_other = priced(best, other)
        b = best.iloc[0]
        row.update(mapping={"tp": int(b.tp), "pp": int(b.pp), "cp": int(b.cp), "dp": int(b.dp), "ep": int(b.ep),
                            "micro_batch": int(b.mb), "vp": int(b.vp), "recompute": str(b.recompute),
                            "sp": bool(b.sp), "optimizer": "dist" if b.distopt else ("fsdp" if b.fsdp else "")},
                   iteration_s=float(b.iteration_s), engine_s=float(b.engine_s),
                   tokens_per_s_per_gpu=float(b.tokens_per_s_per_gpu),
                   mfu=float(b.mfu), memory_gib=float(b.memory_gib), **_interval_of(b))
        if prices is not None:
            row.update(gpu_hour_price=p_other, cost_per_1m_tokens=(None if p_other is None
                                                                   else float(b.cost_per_1m_tokens)))
        if run_tokens is not None:
            row["run"] = training_run(run_tokens, float(b.tokens_per_s_per_gpu) * gpus, gpus, p_other)
        # what its own search warns (bf16 on a GPU without bf16 units, ranked at its fp32 rate; a device costed as
        # generic nodes; more nodes than the catalog describes; a partly filled node), as this run's are
        ranking.append({**row, "note": "; ".join(best.attrs.get("notes", []))})
    if others:
        payload["compare"], by_cost = rank_compared(
            ranking, lambda r: math.inf if r["mapping"] is None else -r["tokens_per_s_per_gpu"], "cost_per_1m_tokens",
            lambda r: r["mapping"] is not None)
        payload["compare_ranked_by"] = "cost_per_1m_tokens" if by_cost else "tokens_per_s_per_gpu"
        _flag_overlapping_systems(payload["compare"], by_cost)
        if own_error is not None and all(r["mapping"] is None for r in payload["compare"]):
            raise own_error  # nothing fits anywhere: this run's own one-line error, as without --compare
    if as_json:
        payload["mappings"] = [] if res is None else res.to_dict(orient="records")
        if res is not None and "overlapping_fastest" in res.attrs:
            payload["overlapping_fastest"] = res.attrs["overlapping_fastest"]
        echo_json(payload)
        return
    if res is None:
        click.echo(f"{model.name} on {gpus} GPUs ({system}), global batch {global_batch}: {own_error}; "
                   f"{dropout_text(model, base)}; cost model {name}")
    else:
        click.echo(f"{model.name} on {gpus} GPUs ({system}), global batch {global_batch}: "
                   f"{res.attrs.get('n_candidates', 0):,} mappings, {res.attrs.get('n_fit', 0):,} fit; "
                   f"{dropout_text(model, base)}; cost model {name}")
        _search_table(res, price, payload)
    if "compare" in payload:
        by_cost = payload["compare_ranked_by"] == "cost_per_1m_tokens"
        intervals = "overlaps_first" in payload["compare"][0]
        click.echo("\nsystems by " + ("cost per million training tokens of their fastest mapping (lowest first):"
                                      if by_cost else "tokens/s per GPU of their fastest mapping (highest first):"))
        dash = "-"

        def _m(m: dict | None) -> str:
            return dash if m is None else (f"tp{m['tp']} pp{m['pp']} cp{m['cp']} dp{m['dp']}"
                                           + (f" ep{m['ep']}" if m["ep"] > 1 else "") + f" mb{m['micro_batch']}"
                                           + (f" vp{m['vp']}" if m["vp"] > 1 else "")
                                           + (f" {m['recompute']}" if m["recompute"] != "none" else "")
                                           + (" sp" if m["sp"] else "") + (f" {m['optimizer']}" if m["optimizer"] else ""))

        def _num(v: Any, f: str) -> str:
            return dash if v is None else format(v, f)

        echo_table([[r["system"], r["device"], _m(r["mapping"]), _num(r["iteration_s"], ".3f"),
                     _num(r["tokens_per_s_per_gpu"], ",.0f"), _num(None if r["mfu"] is None else r["mfu"] * 100, ".1f"),
                     *([_num(r["gpu_hour_price"], "g"), _num(r["cost_per_1m_tokens"], ".4g")] if prices is not None
                       else []),
                     *([_num(r["run"]["days"], ".3g") if "run" in r else dash] if run_tokens is not None else []),
                     *(["~" if r.get("overlaps_first") else ""] if intervals else []),
                     r["note"]] for r in payload["compare"]],
                   ["system", "device", "fastest mapping", "iter_s", "tokens/s/GPU", "mfu%",
                    *(["GPU-hour price", "per 1M tokens"] if prices is not None else []),
                    *(["run days"] if run_tokens is not None else []), *(["overlap"] if intervals else []),
                    "note"])
        if intervals and len(payload["compare"]) > 1:
            click.echo(f"~: 80% interval overlaps the first system's ({sum(bool(r.get('overlaps_first')) for r in payload['compare'])} of "
                       f"{len(payload['compare']) - 1}): the model cannot rank them apart at that confidence")
    shown_mfu = ([] if res is None else [float(res["mfu"].max())]) + [
        r["mfu"] for r in payload.get("compare", []) if r["mfu"] is not None]
    if shown_mfu and max(shown_mfu) > 1.0:  # as `llm train` says it, per mapping there (with its causal-FLOP MFU)
        click.echo("note: MFU above 100% because model FLOPs count the full s x s attention scores (Megatron's "
                   "convention) while causal attention kernels compute about half of them; `hybrid llm train` with a "
                   "mapping gives its MFU counting only those (mfu_causal)")
    roofline_note(name)


def _interval_of(best: Any) -> dict[str, float]:
    """A compared system's fastest mapping's 80% interval (``iteration_s_low`` / ``_high``; {} without one)."""
    if "iteration_s_low" not in best.index:
        return {}
    return {"iteration_s_low": float(best.iteration_s_low), "iteration_s_high": float(best.iteration_s_high)}


def _flag_overlapping_systems(rows: list[dict[str, Any]], by_cost: bool) -> None:
    """``overlaps_first`` on each ranked system with an interval (a calibrated --model): whether its 80% interval
    overlaps the first-ranked system's, in the quantity ranked by (iteration time, the same tokens per iteration
    everywhere; or cost per million tokens, proportional to it at each system's price), as the mapping table flags
    the picks it cannot tell from the fastest. False for the first; absent without intervals."""
    def span(r: dict[str, Any]) -> tuple[float, float] | None:
        if r.get("iteration_s_low") is None or r.get("iteration_s") is None:
            return None
        scale = r["cost_per_1m_tokens"] / r["iteration_s"] if by_cost else 1.0
        return r["iteration_s_low"] * scale, r["iteration_s_high"] * scale

    first = span(rows[0]) if rows else None
    if first is None:
        return
    for i, r in enumerate(rows):
        if (own := span(r)) is not None:
            r["overlaps_first"] = i > 0 and own[0] <= first[1] and own[1] >= first[0]


def _search_table(res: Any, price: float | None, payload: dict[str, Any]) -> None:
    """`llm search`'s text output of its own system: the mappings, their notes, the price and run of the fastest."""
    intervals = "iteration_s_low" in res.columns

    def sec(v: float) -> str:  # 4 significant digits: close picks differ in the third (0.8161 / 0.8173, not 0.82)
        return "-" if v != v else f"{v:.4g}"

    echo_table([[r.tp, r.pp, r.cp, r.dp, r.ep, r.mb, r.vp, r.recompute, "y" if r.sp else "",
                 "dist" if r.distopt else ("fsdp" if r.fsdp else ""), sec(r.iteration_s),
                 *([sec(r.iteration_s_low), sec(r.iteration_s_high), "~" if r.overlaps_fastest else ""]
                   if intervals else []), sec(r.engine_s), r.mfu * 100, r.memory_gib]
                for r in res.itertuples()],
               ["tp", "pp", "cp", "dp", "ep", "mb", "vp", "recompute", "sp", "optim", "iter_s",
                *(["iter_low", "iter_high", "overlap"] if intervals else []), "engine_s", "mfu%", "mem_gib"])
    if res["engine_s"].isna().any():
        click.echo(f"engine_s: the {int(res['engine_s'].notna().sum())} fastest by the closed form re-timed on the "
                   "engine (-: not simulated)")
    if intervals and len(res) > 1:  # with one pick there is nothing to overlap
        click.echo(f"~: 80% interval overlaps the fastest pick's ({res.attrs.get('overlapping_fastest', 0)} of "
                   f"{len(res) - 1}): the model cannot tell them apart at that confidence")
    if price is not None:
        click.echo(f"at {price:g} per GPU-hour: {float(res['cost_per_1m_tokens'].iloc[0]):.4g} per million training "
                   "tokens (fastest mapping)")
    if "run" in payload:
        r = payload["run"]
        click.echo(f"run of {r['tokens']:.4g} tokens (fastest mapping): {r['days']:.3g} days, "
                   f"{r['gpu_hours']:,.0f} GPU-hours" + (f", cost {r['cost']:,.0f}" if "cost" in r else ""))


# inference commands (infer, serve, capacity) live in their own module
from hybrid.cli.llm_infer import register as _register_inference  # noqa: E402

_register_inference(llm)
