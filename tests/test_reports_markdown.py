"""Regenerating a benchmark's results.md keeps the hand-written discussion."""

from __future__ import annotations

from hybrid.reports.markdown import hand_written_part, write_benchmark_results


def test_rerun_keeps_discussion_and_replaces_tables(tmp_path):
    p = tmp_path / "results.md"
    write_benchmark_results(p, "# Bench\n\n| a |\n|---|\n| 1 |\n")
    p.write_text(p.read_text() + "\n## Discussion (honest)\n\n* misses 10% because ...\n")
    write_benchmark_results(p, "# Bench\n\n| a |\n|---|\n| 2 |\n")
    text = p.read_text()
    assert "| 2 |" in text and "| 1 |" not in text
    assert text.count("## Discussion (honest)") == 1 and "misses 10% because" in text
    assert text.index("| 2 |") < text.index("## Discussion")


def test_generated_discussion_wins_and_notes_heading_counts(tmp_path):
    p = tmp_path / "results.md"
    p.write_text("# old\n\n## Notes (read first)\nold note\n")
    assert hand_written_part(p.read_text()).startswith("## Notes")
    write_benchmark_results(p, "# new\n\n## Discussion\nnew text\n")
    assert "old note" not in p.read_text() and "new text" in p.read_text()
    write_benchmark_results(tmp_path / "fresh.md", "# only tables\n")
    assert (tmp_path / "fresh.md").read_text() == "# only tables\n"
