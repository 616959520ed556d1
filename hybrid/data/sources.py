"""The registry of public measurement sources (``sources.toml``): where each file comes from and its checksum.

Each source is one folder of the public data layout (``$HYBRID_DATA_DIR``, ``../shared/datasets``) with its
upstream repository, pinned commit, path inside the repository, license, importer, and the sha256 of every
file (``files``), or, for folders of hundreds of logs, a ``glob`` with a ``manifest_sha256`` (sha256 over the
sorted lines ``"<relative path>\\t<file sha256>\\n"``) and a ``file_count``.

:func:`pull` materialises a source into an output directory, either from a local mirror (``from_dir``,
verified file by file) or from the upstream repository at the pinned commit (raw file URLs, or the commit's
tarball for glob sources); either way the files are verified before anything appears in the output, and the
source folder is renamed into place in one step.

Regenerate the checksums after a deliberate data update with ``python -m hybrid.data.sources DATA_DIR``.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import tomllib
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath

from hybrid.atomic import write_text
from hybrid.errors import HybridError, InvalidInputError

#: Packaged registry file.
SOURCES_FILE = "sources.toml"
RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
ARCHIVE_URL = "https://codeload.github.com/{repo}/tar.gz/{commit}"
_CHUNK = 1 << 20


class SourceError(HybridError):
    """A source that cannot be pulled or verified (missing file, checksum mismatch, download failure)."""


@dataclass(frozen=True)
class Source:
    """One public dataset folder and its provenance."""

    name: str
    description: str
    local_path: str
    repository: str = ""
    commit: str = ""
    upstream_path: str = ""
    license: str = ""
    #: the ``hybrid data import`` format(s) that read it, comma-separated ("" where none does)
    importer: str = ""
    derived: bool = False
    downloadable: bool = True
    note: str = ""
    files: dict[str, str] = field(default_factory=dict)
    #: pattern listing the files of a file-by-file source when checksums are regenerated
    include: str = ""
    glob: str = ""
    manifest_sha256: str = ""
    file_count: int = 0

    def file_url(self, rel: str) -> str:
        """Raw URL of ``rel`` (relative to :attr:`local_path`) at the pinned commit."""
        path = str(PurePosixPath(self.upstream_path) / rel) if self.upstream_path else rel
        return RAW_URL.format(repo=self.repository, commit=self.commit, path=urllib.parse.quote(path))

    def archive_url(self) -> str:
        """Tarball URL of the repository at the pinned commit (used for glob sources)."""
        return ARCHIVE_URL.format(repo=self.repository, commit=self.commit)

    def urls(self) -> list[str]:
        """Download URLs at the pinned commit (none for derived or re-laid-out sources)."""
        if self.derived or not self.downloadable or not self.repository:
            return []
        if self.glob:
            return [self.archive_url()]
        return [self.file_url(rel) for rel in sorted(self.files)]

    def to_dict(self) -> dict[str, object]:
        d = {k: v for k, v in self.__dict__.items() if k != "files"}
        d["n_files"] = len(self.files) if self.files else self.file_count
        return d


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def manifest_sha256(entries: Iterable[tuple[str, str]]) -> str:
    """sha256 over sorted ``"<relpath>\\t<sha256>\\n"`` lines."""
    h = hashlib.sha256()
    for rel, digest in sorted(entries):
        h.update(f"{rel}\t{digest}\n".encode())
    return h.hexdigest()


def _glob_files(root: Path, pattern: str) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())


def load_sources(path: str | os.PathLike | None = None) -> dict[str, Source]:
    """The registry (packaged ``sources.toml`` unless ``path`` is given)."""
    if path is None:
        text = resources.files("hybrid.data").joinpath(SOURCES_FILE).read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    raw = tomllib.loads(text)
    out = {}
    for name, entry in raw.get("sources", {}).items():
        if not isinstance(entry, dict):
            raise InvalidInputError(f"sources.toml: entry {name!r} is not a table")
        try:
            out[name] = Source(name=name, **entry)
        except TypeError as exc:
            raise InvalidInputError(f"sources.toml: entry {name!r}: {exc}") from None
    return out


def get_source(name: str, sources: dict[str, Source] | None = None) -> Source:
    sources = sources if sources is not None else load_sources()
    if name not in sources:
        raise InvalidInputError(f"unknown source {name!r}; known: {', '.join(sources)}")
    return sources[name]


# --------------------------------------------------------------------------------------------- verification
def verify_dir(source: Source, root: Path) -> list[str]:
    """Check the files ``source`` lists under ``root`` (the folder holding :attr:`Source.local_path`'s files).

    Returns the relative paths verified; raises :class:`SourceError` naming the first missing or mismatching
    file. Files under ``root`` that the source does not list are ignored (see :func:`unlisted_files`).
    """
    if not root.is_dir():
        raise SourceError(f"source {source.name}: directory not found: {root}")
    if not source.files:
        raise SourceError(f"source {source.name}: the registry lists no files for it")
    entries = []
    for rel, expected in sorted(source.files.items()):
        p = root / rel
        if not p.is_file():
            raise SourceError(f"source {source.name}: missing file {p}")
        got = sha256_file(p)
        if got != expected:
            what = "manifest mismatch" if source.glob else "checksum mismatch"
            raise SourceError(f"source {source.name}: {what}: {p}: sha256 {got[:16]}... "
                              f"(expected {expected[:16]}...)")
        entries.append((rel, got))
    if source.manifest_sha256 and (manifest_sha256(entries) != source.manifest_sha256
                                   or len(entries) != source.file_count):
        raise SourceError(f"source {source.name}: the registry's file list does not match its manifest_sha256 / "
                          "file_count (regenerate with python -m hybrid.data.sources DATA_DIR)")
    return sorted(source.files)


def unlisted_files(source: Source, root: Path) -> list[str]:
    """Files under ``root`` that match the source's ``glob``/``include`` pattern but that it does not list
    (e.g. added upstream after the pinned commit): not verified, not pulled, reported for a registry update."""
    pattern = source.glob or source.include
    if not pattern or not root.is_dir():
        return []
    return [rel for rel in _glob_files(root, pattern) if rel not in source.files]


# --------------------------------------------------------------------------------------------- pulling
def _fetch(url: str, timeout: float = 60.0) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - https URLs we built
            return resp.read()
    except OSError as exc:
        raise SourceError(f"download failed: {url}: {exc}") from None


def _download_into(source: Source, staging: Path, progress: bool) -> None:
    from tqdm.auto import tqdm

    if source.glob:
        data = _fetch(source.archive_url(), timeout=600.0)
        prefix = None
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                top, _, rest = member.name.partition("/")
                prefix = prefix or top
                base = source.upstream_path.strip("/")
                if not member.isfile() or (base and not rest.startswith(base + "/")):
                    continue
                rel = rest[len(base) + 1:] if base else rest
                if rel not in source.files or ".." in rel.split("/"):
                    continue
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                fh = tar.extractfile(member)
                if fh is not None:
                    target.write_bytes(fh.read())
        return
    for rel in tqdm(sorted(source.files), desc=f"download {source.name}", unit="file", disable=not progress,
                    leave=False):
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_fetch(source.file_url(rel)))


def _copy_into(source: Source, mirror_root: Path, staging: Path) -> None:
    src = mirror_root / source.local_path
    if not src.is_dir():
        raise SourceError(f"source {source.name}: {src} not found in the mirror {mirror_root} "
                          f"(expected the public data layout: {source.local_path}/...)")
    for rel in sorted(source.files):
        if not (src / rel).is_file():
            raise SourceError(f"source {source.name}: missing file {src / rel}")
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, staging / rel)


def pull(name: str, out_dir: str | os.PathLike, *, from_dir: str | os.PathLike | None = None,
         sources: dict[str, Source] | None = None, progress: bool = False) -> Path:
    """Materialise source ``name`` as ``out_dir/<local_path>`` (the public layout), verified by sha256.

    From a local mirror (``from_dir``, laid out like the public data directory) or, without it, from the
    upstream repository at the pinned commit. Files are staged in a temporary folder beside the target and
    renamed into place only after every checksum matched, so a failure leaves no output at all.
    """
    source = get_source(name, sources)
    if from_dir is None and (source.derived or not source.downloadable):
        why = "derived from upstream files" if source.derived else (source.note or "upstream layout differs")
        raise SourceError(f"source {name} cannot be downloaded file-for-file ({why}); pull it from a mirror "
                          "with --from DIR")
    target = Path(out_dir) / source.local_path
    # folders this pull creates: removed again (when still empty) if it fails, so a failure leaves nothing
    created = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
    done = False
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".pull-{name}-", dir=target.parent))
    except OSError as exc:
        from hybrid.atomic import output_error

        raise output_error(out_dir, exc) from None
    try:
        if from_dir is not None:
            _copy_into(source, Path(from_dir), staging)
        else:
            _download_into(source, staging, progress)
        try:
            rels = verify_dir(source, staging)
        except SourceError as exc:  # name where the bad file came from, not the deleted staging copy
            origin = str(Path(from_dir) / source.local_path) if from_dir is not None else f"{source.name} (download)"
            raise SourceError(str(exc).replace(str(staging), origin)) from None
        # Several sources may share a folder (xla/, neusight/): move file by file, each rename atomic, and
        # only after every checksum matched.
        for rel in rels:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, target / rel)
        done = True
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        if not done:
            for d in created:  # deepest first
                try:
                    d.rmdir()
                except OSError:
                    break
    return target


# --------------------------------------------------------------------------------------------- regeneration
def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    s = str(v).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{s}"'


def render_toml(sources: dict[str, Source], header: str = "") -> str:
    """Serialise the registry (the inverse of :func:`load_sources`)."""
    out = [header.rstrip() + "\n"] if header else []
    for s in sources.values():
        out.append(f"[sources.{s.name}]")
        for k, v in s.__dict__.items():
            if k in ("name", "files") or (not isinstance(v, bool) and v in ("", 0)) or (
                    k == "derived" and v is False) or (k == "downloadable" and v is True):
                continue
            out.append(f"{k} = {_toml_value(v)}")
        if s.files:
            out.append(f"\n[sources.{s.name}.files]")
            out.extend(f"{_toml_value(rel)} = {_toml_value(d)}" for rel, d in sorted(s.files.items()))
        out.append("")
    return "\n".join(out)


def recompute(sources: dict[str, Source], data_dir: Path, *, add_new: bool = True) -> dict[str, Source]:
    """Checksums of every source recomputed from the files under ``data_dir`` (public layout): the listed
    files, plus (``add_new``) every file matching the source's ``glob``/``include`` pattern."""
    new = {}
    for s in sources.values():
        root = data_dir / s.local_path
        pattern = s.glob or s.include
        rels = sorted(set(s.files) | (set(_glob_files(root, pattern)) if add_new and pattern else set()))
        files = {rel: sha256_file(root / rel) for rel in rels}
        extra = {"manifest_sha256": manifest_sha256(files.items()), "file_count": len(files)} if s.glob else {}
        new[s.name] = Source(**{**s.__dict__, "files": files, **extra})
    return new


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - maintenance entry point
    """``python -m hybrid.data.sources DATA_DIR``: rewrite ``sources.toml`` checksums from the real files."""
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m hybrid.data.sources DATA_DIR", file=sys.stderr)
        return 2
    path = Path(__file__).with_name(SOURCES_FILE)
    text = path.read_text(encoding="utf-8")
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    new = recompute(load_sources(path), Path(args[0]))
    write_text(path, render_toml(new, header))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
