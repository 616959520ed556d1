"""Importers: public measurement formats -> the canonical measurement table (:mod:`hybrid.data.schema`).

Every importer is a function with the same signature::

    fn(paths, device=None, catalog=None, system=None) -> pandas.DataFrame

that reads the given files and returns a validated canonical table, raising
:class:`~hybrid.errors.ImportFormatError` (message starting with the file name) on malformed input, and
emitting :class:`DataImportWarning` for rows it skips on purpose. :data:`IMPORTERS` registers them with the
glob patterns (relative to the public data directory) of the files they read; :func:`import_paths` accepts
files and directories the way ``hybrid data import`` does.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pandas as pd

from hybrid.data.importers._common import DataImportWarning
from hybrid.data.importers.deepbench import import_deepbench
from hybrid.data.importers.llmcompass import import_llmcompass, import_llmcompass_pointwise
from hybrid.data.importers.nccl_tests import import_nccl_tests, looks_like_log
from hybrid.data.importers.neusight import drop_cross_file_duplicates, import_neusight
from hybrid.data.importers.vidur import import_vidur_compute, import_vidur_network
from hybrid.data.importers.xla import import_xla_collectives, import_xla_matmul
from hybrid.data.schema import validate
from hybrid.errors import ImportFormatError, InvalidInputError
from hybrid.hardware.catalog import Catalog, default_catalog

ImportFunction = Callable[..., pd.DataFrame]


@dataclass(frozen=True)
class Importer:
    """One public format: its function, and where its files sit in the public data layout."""

    name: str
    description: str
    function: ImportFunction
    #: glob patterns relative to the public data directory (``**`` allowed)
    globs: tuple[str, ...]
    #: file-name pattern used inside a directory that does not follow the public layout
    fallback: str
    #: names of the :mod:`hybrid.data.sources` entries these files come from
    sources: tuple[str, ...] = ()
    #: applied to the concatenated table of all files (drops copies of one measurement in several files)
    dedupe: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    #: whether a file's content shows it is of this format whatever its name (nccl-tests output saved by a
    #: scheduler as ``slurm-1234.out``): :meth:`unread` names such files that :meth:`find` leaves out
    sniff: Callable[[Path], bool] | None = None
    #: whether the format holds collectives, whose catalog system ``system=`` (``--system``) names; the kernel
    #: formats ignore it, so the CLI refuses it for them rather than drop it without a word
    takes_system: bool = True

    def find(self, directory: str | os.PathLike) -> list[Path]:
        """Files of this format under ``directory``: the public-layout globs if ``directory`` is a data root;
        else every file below it whose path ends like one of the globs; else every ``fallback`` file."""
        d = Path(directory)
        found = sorted({p for g in self.globs for p in d.glob(g) if p.is_file()})
        if found:
            return found
        tails = [g.rsplit("**/", 1)[-1] for g in self.globs]
        files = [p for p in d.rglob("*") if p.is_file()]
        found = sorted(p for p in files if any(PurePosixPath(p.as_posix()).match(t) for t in tails))
        if found:
            return found
        return sorted(p for p in files if PurePosixPath(p.name).match(self.fallback))

    def unread(self, directory: str | os.PathLike, found: Iterable[Path]) -> list[Path]:
        """Files under ``directory`` that :meth:`find` left out although ``sniff`` recognises their content (a
        ``slurm-1234.out`` beside ``all_reduce_perf.log``: the name pattern of the other files hid it)."""
        d = Path(directory)
        if self.sniff is None or any(p.is_file() for g in self.globs for p in d.glob(g)):
            return []  # a public data root: its registry (the globs) says which files are data
        chosen = set(found)
        return sorted(p for p in Path(directory).rglob("*") if p.is_file() and p not in chosen and self.sniff(p))


_NEUSIGHT = "neusight/scripts/asplos/data"
#: Registered importers by format name.
IMPORTERS: dict[str, Importer] = {
    i.name: i
    for i in (
        Importer("neusight", "NeuSight FP32 PyTorch kernel CSVs (bmm, linear, layernorm, softmax, elementwise; conv2d from a conv collection named by path)",
                 import_neusight,
                 (*(f"{_NEUSIGHT}/dataset/{split}/{f}" for split in ("train", "test")
                    for f in ("*.csv", "collect/*.csv",
                              *(f"collect/{op}/p*/*.csv" for op in ("bmm", "linear", "ln", "softmax")))),
                  f"{_NEUSIGHT}/dataset_amd/test/collect/*/p*/*.csv",
                  # the test collections: the derived subset, or the whole upstream folder beside it
                  "neusight/test-dev/*.csv", "neusight/test/*.csv"),
                 "*.csv", ("neusight-train", "neusight-amd", "neusight-test-dev"), drop_cross_file_duplicates,
                 takes_system=False),
        Importer("xla-matmul", "XLA H100 matmul perf table (CSV or upstream .txtpb)", import_xla_matmul,
                 ("xla/matmul_*.csv", "xla/*matmul_perf_table*.txtpb"), "*matmul*", ("xla-matmul",), takes_system=False),
        Importer("xla-collectives", "XLA H100x8 collective perf table (CSV or upstream .txtpb)",
                 import_xla_collectives, ("xla/collectives_*.csv", "xla/*collective_perf_table*.txtpb"),
                 "*collective*", ("xla-collectives",)),
        Importer("vidur-compute", "Vidur FP16 transformer-layer op profiles (mlp.csv)", import_vidur_compute,
                 ("vidur/data/profiling/compute/*/*/*/mlp.csv",), "mlp.csv", ("vidur-compute",), takes_system=False),
        Importer("vidur-network", "Vidur all_reduce / send_recv profiles", import_vidur_network,
                 ("vidur/data/profiling/network/*/all_reduce.csv", "vidur/data/profiling/network/*/send_recv.csv"),
                 "*.csv", ("vidur-network",)),
        Importer("deepbench", "DeepBench GEMM and all-reduce results (tidy CSVs)", import_deepbench,
                 ("deepbench/deepbench_gemm_tidy.csv", "deepbench/deepbench_allreduce_tidy.csv"),
                 "deepbench_*_tidy.csv", ("deepbench-tidy",)),
        Importer("llmcompass", "LLMCompass A100 / MI210 FP16 matmul tables (figure 5 real hardware)",
                 import_llmcompass, ("llmcompass/*matmul_*.csv",), "*matmul_*.csv", ("llmcompass",), takes_system=False),
        Importer("llmcompass-pointwise", "LLMCompass A100 / MI210 FP16 softmax, layernorm and GELU tables (figure 5 "
                 "real hardware)", import_llmcompass_pointwise,
                 ("llmcompass/*softmax_*.csv", "llmcompass/*layernorm_*.csv", "llmcompass/*gelu_*.csv"),
                 "*_*.csv", ("llmcompass",), takes_system=False),
        Importer("nccl-tests", "raw nccl-tests stdout logs (*_perf output)", import_nccl_tests,
                 ("nccl-tests/**/*.log", "nccl-tests/**/*output.dat", "nccl-tests/**/*output.dat.*"),
                 "*", ("nccl-tests-alcf", "nccl-tests-xxrjun"), sniff=looks_like_log),
    )
}


def get_importer(name: str) -> Importer:
    """The importer called ``name`` (``InvalidInputError`` listing the known ones otherwise)."""
    key = str(name).strip().lower().replace("_", "-")
    if key not in IMPORTERS:
        raise InvalidInputError(f"unknown import format {name!r}; known: {', '.join(IMPORTERS)}")
    return IMPORTERS[key]


def expand_paths(importer: Importer, paths: Iterable[str | os.PathLike]) -> tuple[list[Path], list[Path]]:
    """(explicit files, files found in directories); a path that does not exist is an error."""
    explicit, found = [], []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            explicit.append(p)
        elif p.is_dir():
            hits = importer.find(p)
            if not hits:
                raise ImportFormatError(f"{p}: no {importer.name} files found (patterns: "
                                        f"{', '.join(importer.globs)}; outside that layout, any file named "
                                        f"{importer.fallback} below the directory)")
            found.extend(hits)
            if left := importer.unread(p, hits):
                names = ", ".join(str(x) for x in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
                warnings.warn(f"{p}: {len(left)} file(s) hold {importer.name} output but are not named like the "
                              f"files read there ({', '.join(g.rsplit('/', 1)[-1] for g in importer.globs)}), so "
                              f"were not read: {names}; name them explicitly (or rename them) to import them",
                              DataImportWarning, stacklevel=3)
        else:
            raise ImportFormatError(f"{p}: no such file or directory")
    if not explicit and not found:
        raise ImportFormatError("no input files given")
    # a file given twice (overlapping globs, a directory and a file in it, a path spelt two ways) is read once: it
    # was read twice, every row doubled, said only as configurations "measured more than once ... each a sample"
    seen: dict[Path, Path] = {}
    repeats: dict[Path, list[Path]] = {}
    kept: tuple[list[Path], list[Path]] = ([], [])
    for out, files in zip(kept, (explicit, found), strict=True):
        for f in files:
            key = f.resolve()
            if key in seen:
                repeats.setdefault(seen[key], []).append(f)
                continue
            seen[key] = f
            out.append(f)
    for first, again in repeats.items():
        warnings.warn(f"{first}: given more than once (as {', '.join(str(x) for x in [first, *again][:4])}); read "
                      "once", DataImportWarning, stacklevel=3)
    return kept


def import_paths(fmt: str, paths: Iterable[str | os.PathLike] | str | os.PathLike, *, device: str | None = None,
                 system: str | None = None, catalog: Catalog | None = None, progress: bool = False,
                 chunk: int = 64) -> pd.DataFrame:
    """Import files and directories (searched with the importer's globs) of format ``fmt``.

    Files found by searching directories may be skipped when they hold no measurements (nccl-tests logs of
    failed jobs), with a warning; files named explicitly must parse. ``progress`` shows a tqdm bar (stderr).
    """
    importer = get_importer(fmt)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    explicit, found = expand_paths(importer, paths)
    cat = catalog if catalog is not None else default_catalog()
    params = inspect.signature(importer.function).parameters
    takes_skip = "skip_empty" in params
    # an importer that de-duplicates across files does it once here, over every chunk, not per chunk as well
    once = {"dedupe": False} if importer.dedupe is not None and "dedupe" in params else {}
    jobs: list[tuple[list[Path], bool]] = [(explicit[i:i + chunk], False) for i in range(0, len(explicit), chunk)]
    jobs += [(found[i:i + chunk], True) for i in range(0, len(found), chunk)]
    frames = []
    from tqdm.auto import tqdm

    with tqdm(total=len(explicit) + len(found), unit="file", desc=f"import {importer.name}",
              disable=not progress or len(explicit) + len(found) < 2, leave=False) as bar:
        for files, discovered in jobs:
            kwargs = {**once, **({"skip_empty": True} if discovered and takes_skip else {})}
            try:
                frames.append(importer.function(files, device=device, catalog=cat, system=system, **kwargs))
            except ImportFormatError as exc:
                if discovered and takes_skip and str(exc).startswith("no nccl-tests data rows"):
                    pass  # a whole chunk of failed-job logs: each was already reported as a warning
                else:
                    raise
            bar.update(len(files))
    if not frames:
        raise ImportFormatError(f"no {importer.name} measurements in {len(explicit) + len(found)} file(s)")
    table = pd.concat(frames, ignore_index=True, sort=False)
    if importer.dedupe is not None and (once or len(frames) > 1):
        table = importer.dedupe(table)
    table = validate(table, cat, source=f"{importer.name} import") if len(frames) > 1 else table
    _warn_repeats(importer.name, table)
    return table


def _warn_repeats(name: str, table: pd.DataFrame) -> None:
    """A :class:`DataImportWarning` when ``table`` measures a configuration more than once
    (:func:`hybrid.data.quality.repeated_configs`): how many, and how far their times spread. They are all kept:
    each is a sample of that configuration for the fits."""
    from hybrid.data.quality import describe_repeats, repeated_configs

    _, by_op = repeated_configs(table)
    if len(by_op):
        warnings.warn(f"{name} import: {describe_repeats(by_op)}; all kept, each a sample for the fits "
                      "(`hybrid data validate` lists them by device and op)", DataImportWarning, stacklevel=3)


__all__ = [
    "IMPORTERS",
    "DataImportWarning",
    "ImportFunction",
    "Importer",
    "expand_paths",
    "get_importer",
    "import_deepbench",
    "import_llmcompass",
    "import_llmcompass_pointwise",
    "import_nccl_tests",
    "import_neusight",
    "import_paths",
    "import_vidur_compute",
    "import_vidur_network",
    "import_xla_collectives",
    "import_xla_matmul",
]
