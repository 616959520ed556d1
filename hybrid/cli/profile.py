"""``hybrid profile``: measure this machine (CUDA GPU if present, else the CPU) into a measurement bundle."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hybrid.cli.output import named
from hybrid.data.profiler.cases import PROFILE_FAMILIES
from hybrid.errors import InvalidInputError


def _parse_ranks(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        ranks = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise InvalidInputError(f"--ranks takes integers like 2 or 2,4; got {value!r}") from None
    if not ranks:
        raise InvalidInputError("--ranks is empty")
    return ranks


@click.command("profile")
@click.option("--quick", is_flag=True, help="Small sweeps (1-3 minutes on 2 CPU cores, most of it the ceilings and pooling); collectives with 2 ranks.")
@click.option("-o", "--output", "outdir", type=click.Path(), default=None, callback=named,
              help="Bundle directory to create [default: ./profile-<device key>].")
@click.option("--device-name", default=None,
              help="Device key to record (CPU: replaces cpu-<model>-<cores>c; GPU: a catalog name or alias).")
@click.option("--ranks", default=None, help="Local process counts for collectives, e.g. 2 or 2,4 [default: 2,4; quick: 2].")
@click.option("--only", default=None,
              help=f"Comma-separated op families: {','.join(PROFILE_FAMILIES)} [default: all].")
@click.option("--threads", type=int, default=None, help="torch.set_num_threads value [default: all available cores].")
@click.option("--seed", type=click.IntRange(min=0, max=2**32 - 1), default=0, show_default=True,
              help="Seed of the shape / embedding designs.")
@click.option("--cpu", "force_cpu", is_flag=True, help="Profile the CPU even when a CUDA GPU is available.")
@click.option("--clock", type=click.Choice(["auto", "wall", "thread"]), default="auto", show_default=True,
              help="CPU timer: thread = on-core time of the measuring thread (needs --threads 1; robust to other "
                   "processes on the machine), wall = wall clock; auto = thread with --threads 1, else wall. "
                   "GPUs always use CUDA events.")
@click.option("--skip-existing", "skip_existing", multiple=True, type=click.Path(path_type=Path),
              help="Bundle or table whose configurations are not measured again (extend a bundle); repeatable.")
@click.option("--kernel-times", is_flag=True,
              help="GPU only: also time every configuration by its CUPTI kernels alone (torch.profiler, after the "
                   "eager timings): kernel_times.csv beside measurements.csv, framework cupti (docs/profiler.md).")
@click.option("--force", is_flag=True, help="Replace an existing output directory.")
@click.option("--no-progress", is_flag=True, help="No progress bars on stderr.")
def profile(quick: bool, outdir: str | None, device_name: str | None, ranks: str | None, only: str | None,
            threads: int | None, seed: int, force_cpu: bool, clock: str, skip_existing: tuple[Path, ...],
            kernel_times: bool, force: bool, no_progress: bool) -> None:
    """Measure GEMM/GEMV, elementwise, norms, softmax, convolutions, batch norm, pooling, interpolation and grid
    sampling, embedding-bag lookups (fwd+bwd), optimizer steps and collectives on this machine and write a bundle:
    measurements.csv (canonical table), catalog.toml (the measured device/system), meta.json (machine, versions,
    ceilings, durations). Needs PyTorch (the `profile` extra)."""
    from hybrid.data.profiler.runner import ProfileOptions, run_profile
    from hybrid.invocation import invocation

    families = tuple(only.split(",")) if only is not None else PROFILE_FAMILIES
    opts = ProfileOptions(quick=quick, families=families, ranks=_parse_ranks(ranks), device_name=device_name,
                          threads=threads, seed=seed, progress=not no_progress, force_cpu=force_cpu, clock=clock,
                          skip_existing=tuple(str(p) for p in skip_existing), kernel_times=kernel_times)
    # the command line as typed (when called through main(argv) from Python, sys.argv is someone else's)
    command = [*invocation(), *sys.argv[1:]] if sys.argv[1:2] == ["profile"] else None
    result = run_profile(opts, Path(outdir) if outdir is not None else None, force=force, command=command,
                         log=lambda msg: click.echo(msg, err=True))
    counts = ", ".join(f"{k} {v}" for k, v in result.meta["row_counts"].items())
    kt = result.meta.get("kernel_times")
    extra = f"; {kt['rows']} kernel-timed rows in {kt['file']}" if kt else ""
    click.echo(f"wrote {result.path} ({len(result.table)} rows: {counts}{extra}) in "
               f"{result.meta['durations_s']['total']:.0f} s")
