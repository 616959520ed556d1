"""``hybrid devices``: list and show catalog entries."""

from __future__ import annotations

import click

from hybrid.cli.output import echo_json, echo_table
from hybrid.hardware.catalog import default_catalog


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--systems", is_flag=True, help="List systems (nodes, clusters) instead of devices.")
@click.pass_context
def devices(ctx: click.Context, as_json: bool, systems: bool) -> None:
    """List the hardware catalog (add or override entries with a TOML file named in $HYBRID_CATALOG)."""
    if ctx.invoked_subcommand is not None:
        return
    cat = default_catalog()
    if systems:
        entries = [s.to_entry() for s in cat.systems.values()]
        if as_json:
            echo_json(entries)
            return
        echo_table(
            [[e["key"], e["device"], e["gpus_per_node"], e["intra_node_gbps"], e["inter_node_gbps"], e["intra_fabric"]]
             for e in entries],
            ["system", "device", "gpus/node", "intra GB/s", "inter GB/s/GPU", "fabric"],
        )
        return
    entries = [d.to_entry() for d in cat]
    if as_json:
        echo_json(entries)
        return
    rows = []
    for e in entries:
        p = e["peak_tflops"]
        rows.append([e["key"], e["vendor"], e["arch"], p.get("fp32", ""), p.get("fp16", "-"), p.get("bf16", "-"),
                     p.get("fp8", "-"), p.get("fp4", "-"), e["mem_bw_gbps"], e["mem_gib"], e["sms"]])
    # fp16 and bf16 apart: pre-Ampere parts run fp16 on tensor cores but bf16 only emulated (at the fp32 rate)
    echo_table(rows, ["device", "vendor", "arch", "fp32 TF", "fp16 TF", "bf16 TF", "fp8 TF", "fp4 TF", "mem GB/s",
                      "mem GiB", "SMs"])


@devices.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(name: str, as_json: bool) -> None:
    """Show one device or system (any alias works: 'Tesla T4', 'sm_90', 'DGX H100', ...)."""
    if not name.strip():  # ("", an unset shell variable: was "unknown device ''; closest known: Vega-FE, ...")
        from hybrid.errors import InvalidInputError

        raise InvalidInputError("NAME is empty: give a device or system (`hybrid devices` and `hybrid devices "
                                "--systems` list them)")
    cat = default_catalog()
    key = cat.resolve_system(name, missing_ok=True)
    entry = cat.systems[key].to_entry() if key else cat.device(name).to_entry()
    if key:  # what the collective models assume, whether the entry says so or the hardware decides
        from hybrid.hardware.device import nvls_capable

        entry["nvls_all_reduce"] = nvls_capable(cat.systems[key], cat.system_device(key, missing_ok=True))
        kind, note = cat.systems[key].host_mem_origin(name)  # as named: an HGX name borrows the DGX's figure
        entry["host_mem_origin"] = {"kind": kind, "note": note}
    if not key and not entry.get("l2_bw_gbps"):  # not published: the estimate the cost models use
        entry["l2_bw_gbps_estimated"] = round(cat.device(name).l2_bandwidth() / 1e9, 1)
    same_arch = [] if key else cat.arch_alternatives(name)
    if same_arch:  # a bare architecture string: the other GPUs it could mean
        entry["same_arch_devices"] = same_arch
    if not key:  # other variants of this die: a model that measured one of its power class gives the sibling band
        from hybrid.corrections.intervals import SIBLING_MAX_TDP_RATIO

        same_die = cat.same_die(name)
        if same_die:
            entry["same_die"] = same_die
            entry["same_die_power_class"] = cat.same_die(name, SIBLING_MAX_TDP_RATIO)
    if as_json:
        echo_json(entry)
        return
    width = max(map(len, entry))
    for k, v in entry.items():
        if isinstance(v, dict):
            v = ", ".join(f"{dk}={dv:g}" if isinstance(dv, (int, float)) else f"{dk}={dv}" for dk, dv in v.items())
        elif isinstance(v, list):
            v = ", ".join(map(str, v))
        click.echo(f"{k:>{width}}: {v}")
