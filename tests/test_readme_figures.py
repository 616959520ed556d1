"""README's accuracy table must agree with the benchmarks' committed results.

Every row of the "How accurate and how fast, measured" table names its source in the last column (links to
``experiments/<name>/results.md``); every percentage in the row's "roofline only" and "hybrid" cells must appear as
a number in the GENERATED part of one of those files (above the hand-written ``## Discussion`` / ``## Notes``
tail, so a figure quoted only in prose does not count). A README figure that no re-run produced fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hybrid.reports.markdown import hand_written_part

ROOT = Path(__file__).resolve().parents[1]
HEADING = "## How accurate and how fast, measured"
LINK = re.compile(r"\]\(([^)]+results\.md)\)")
PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")


def accuracy_rows(readme: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and body rows (cells) of the first table after :data:`HEADING`."""
    section = readme.split(HEADING, 1)[1]
    lines = [ln.strip() for ln in section.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    table = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        table.append([c.strip() for c in ln.strip("|").split("|")])
    header, body = table[0], [r for r in table[2:]]
    return header, body


def generated_numbers(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    tail = hand_written_part(text)
    generated = text[: len(text) - len(tail)] if tail else text
    return set(re.findall(r"(?<![\d.])\d+(?:\.\d+)?(?![\d])", generated))


def quoted_from(figure: str, numbers: set[str]) -> bool:
    """True if ``figure`` is one of ``numbers`` as written, or one of them rounded to the figure's decimals
    (README may quote 52.1 as 52)."""
    if figure in numbers:
        return True
    decimals = len(figure.split(".")[1]) if "." in figure else 0
    return any(f"{float(n):.{decimals}f}" == figure for n in numbers)


def test_every_readme_figure_is_in_its_results_file():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    header, rows = accuracy_rows(readme)
    assert header[-1].lower() == "source", header
    checked = {header.index(h) for h in header if h.lower() in ("roofline only", "hybrid")}
    assert len(checked) == 2, header
    problems = []
    for row in rows:
        assert len(row) == len(header), row
        links = LINK.findall(row[-1])
        if not links:
            problems.append(f"{row[0]!r}: no results.md linked in the source column")
            continue
        files = [ROOT / link for link in links]
        missing = [str(f.relative_to(ROOT)) for f in files if not f.is_file()]
        if missing:
            problems.append(f"{row[0]!r}: linked file(s) {missing} do not exist")
            continue
        numbers = set().union(*(generated_numbers(f) for f in files))
        for i in sorted(checked):
            for figure in PERCENT.findall(row[i]):
                if not quoted_from(figure, numbers):
                    problems.append(f"{row[0]!r}: {figure}% ({header[i]}) is not in {', '.join(links)}")
    assert not problems, "README figures disagree with the committed results:\n" + "\n".join(problems)


def test_the_check_catches_a_stale_figure(tmp_path):
    """The mechanism itself: a figure absent from the generated part fails, one in the prose tail too."""
    res = tmp_path / "results.md"
    res.write_text("| a | 12.5 |\n\n## Notes\n\nonce it was 9.9%\n")
    assert "12.5" in generated_numbers(res)
    assert "9.9" not in generated_numbers(res)
    assert quoted_from("12.5", {"12.5"}) and quoted_from("13", {"12.5"}) is False
    assert quoted_from("12", {"12.4"}) and not quoted_from("12.4", {"12.46", "12"})
    readme = (f"{HEADING}\n\n| what | roofline only | hybrid | target | source |\n|---|---|---|---|---|\n"
              "| x | 50% | **12.5%** | | [r](results.md) |\n")
    header, rows = accuracy_rows(readme)
    assert header[-1] == "source" and PERCENT.findall(rows[0][2]) == ["12.5"]
    with pytest.raises(StopIteration):
        accuracy_rows(f"{HEADING}\n\nno table\n")
