"""Benchmark result files: generated tables on top, the engineers' hand-written discussion kept below.

Every ``experiments/*/run.py`` regenerates its ``results.md``; the honest discussion of what the numbers mean
(``## Discussion ...`` / ``## Notes ...``) is written by people and must survive a re-run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hybrid.atomic import write_text

#: Headings that start the hand-written part of a results file (it runs to the end of the file).
HAND_WRITTEN_HEADINGS = ("## Discussion", "## Notes")

_HAND_WRITTEN = re.compile(r"^(?:" + "|".join(re.escape(h) for h in HAND_WRITTEN_HEADINGS) + r")\b.*$", re.M)


def hand_written_part(text: str) -> str:
    """The hand-written tail of a results file ('' if it has none)."""
    match = _HAND_WRITTEN.search(text)
    return text[match.start():] if match else ""


def write_benchmark_results(path: str | os.PathLike, generated: str) -> Path:
    """Write ``generated`` markdown to ``path`` atomically, keeping the hand-written tail of the existing file
    (unless ``generated`` brings its own)."""
    p = Path(path)
    kept = "" if hand_written_part(generated) else (hand_written_part(p.read_text(encoding="utf-8"))
                                                    if p.is_file() else "")
    text = generated.rstrip("\n") + "\n"
    if kept:
        text += "\n" + kept.rstrip("\n") + "\n"
    return write_text(p, text)
