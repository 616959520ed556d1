"""Report figures and HTML pages drawn from small hand-made prediction frames (no calibration needed)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.reports.plots import figure_png, standard_figures


def _frame(devices: list[str], n: int = 12, families: tuple[str, ...] = ("gemm", "norm")) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for dev in devices:
        for fam in families:
            for i in range(n):
                meas = float(10 ** rng.uniform(1, 3))
                rows.append({"split": "all", "device": dev, "op": fam, "family": fam, "size": 1e6 * (i + 1),
                             "size_unit": "FLOP" if fam == "gemm" else "B", "measured_us": meas,
                             "predicted_us": meas * rng.uniform(0.8, 1.2), "roofline_us": meas * 0.5})
    return pd.DataFrame(rows)


def test_a_name_with_dollar_signs_is_drawn_as_written_not_as_mathtext():
    """A device named with two '$' (a catalog key is any TOML string) was parsed as mathtext by matplotlib: the
    report died at save time with 'ValueError: Unknown symbol: \\x' (or drew the name as a formula)."""
    name = 'Lab<b>&"GPU"$\\x$'
    figs = standard_figures(_frame([name, "H100-SXM"]), title="all")
    for fig in figs.values():
        assert figure_png(fig).startswith(b"\x89PNG")
    ticks = [t.get_text() for t in figs["error_by_device"].axes[0].get_xticklabels()]
    assert "Lab<b>&\"GPU\"\\$\\x\\$" in ticks


def test_llm_plots_draw_a_model_name_with_dollar_signs(tmp_path):
    from hybrid.hardware import default_catalog
    from hybrid.reports.llm_plots import breakdown_bars, memory_bars
    from hybrid.reports.plots import save_png
    from hybrid.reports.roofline_plot import op_roofline

    memory_bars({"tiny$\\x$ full": {"weights": 1.0, "reserve": 2.0}}, 80.0, tmp_path / "m.png", title="a$\\y$")
    breakdown_bars({"sys$\\x$": {"compute$\\z$": 1.0}}, tmp_path / "b.png")
    points = pd.DataFrame({"intensity": [1.0, 100.0], "achieved_tflops": [1.0, 50.0], "phase": ["prefill", "decode"],
                           "name": ["op$\\x$", "mlp"]})
    save_png(op_roofline(points, [default_catalog().device("H100-SXM")], title="m$\\q$"), tmp_path / "r.png")
    assert all((tmp_path / f).read_bytes().startswith(b"\x89PNG") for f in ("m.png", "b.png", "r.png"))


def test_a_roofline_report_shows_the_roofline_once_not_as_a_calibrated_model(tmp_path, monkeypatch, capsys):
    """`report --model roofline --table T` put the roofline's own figures under "hybrid (calibrated)" beside the same
    figures as "roofline only", every model cell marked worse (red) than the identical baseline."""
    from hybrid.cli.main import main

    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    csv = tmp_path / "t.csv"
    csv.write_text("device,op,dtype,time_us,m,n,k\nH100-SXM,gemm,fp16,900,4096,4096,4096\n"
                   "H100-SXM,gemm,fp16,120,1024,2048,512\n")
    out = tmp_path / "r.html"
    assert main(["report", "--model", "roofline", "--table", str(csv), "-o", str(out), "-q"]) == 0
    text = out.read_text()
    assert "hybrid (calibrated)" not in text and 'class="worse"' not in text and "Green:" not in text
    assert text.count("roofline only<br>geomean %") == 3  # overall, per family, per device
    assert text.count("data:image/png;base64,") == 4


def test_a_model_cell_equal_to_the_roofline_is_not_marked_worse():
    from hybrid.reports.html import error_table

    same = {"n_rows": 2, "geomean_pct": 10.0, "mape_pct": 12.0, "median_pct": 10.0, "p90_pct": 20.0}
    text = error_table({"model": dict(same, p90_pct=30.0), "roofline": same})
    assert text.count('class="worse"') == 1 and 'class="better"' not in text


def test_the_error_cdf_of_a_one_row_family_draws_its_step():
    """An ECDF drawn from (e_i, i/n) alone drew nothing for a family of one row (a table with one row: an empty
    right panel beside its legend) and started every curve at 1/n instead of 0."""
    from hybrid.reports.plots import error_cdf

    frame = pd.concat([_frame(["H100-SXM"], n=5, families=("gemm",)), _frame(["H100-SXM"], n=1, families=("norm",))])
    fig = error_cdf(frame)
    lines = {ln.get_label().split(" (")[0]: ln for ln in fig.axes[1].get_lines() if not ln.get_label().startswith("_")}
    y = lines["norm"].get_ydata()
    assert list(y) == [0.0, 1.0]
    assert lines["gemm"].get_ydata()[0] == 0.0 and len(set(lines["gemm"].get_xdata()[:2])) == 1


def test_the_interval_table_counts_only_rows_with_an_interval():
    """Collectives scored by a model calibrated without any get no interval (NaN): the table showed their device
    as '-' marked red with a width of 'nanx', and its 'all rows' line counted them in the rows whose coverage it gave."""
    from hybrid.reports.html import interval_table

    frame = _frame(["H200", "A100-SXM4-40GB"], n=3)
    seen = frame["device"] == "H200"
    frame["predicted_us_low"] = np.where(seen, frame["measured_us"] / 2, np.nan)
    frame["predicted_us_high"] = np.where(seen, frame["measured_us"] * 2, np.nan)
    frame["interval_band"] = np.where(seen, "seen", None)
    text = interval_table(frame)
    assert "nan" not in text.lower()
    assert "<tr><td>A100-SXM4-40GB</td><td>0 of 6</td><td>no interval</td><td>-</td></tr>" in text
    assert "<tr><td>H200</td><td>6</td>" in text and "<td>4.00x</td>" in text
    assert "<tr><td>all rows</td><td>6 of 12</td><td>100.0</td><td>4.00x</td></tr>" in text
    assert "6 rows have no prediction interval" in text


def test_the_adapted_split_has_a_table_per_number_of_rows_adapted_to():
    """`hybrid calibrate` prints the adapted split per number of rows adapted to (5, 10, 20, 50: how the error falls
    with them); the report gave only the pooled figures of all four."""
    from hybrid.reports.html import render_report

    frame = _frame(["H100-SXM"], n=8).assign(split="adapted")
    frame["shots"] = np.resize([5, 10, 20, 50], len(frame))
    text = render_report(frame, title="t", images={"adapted": {"x": b"png"}})
    table = text[text.index("Per number of rows adapted to"):]
    table = table[:table.index("</table>")]
    assert [m for m in ("5 rows", "10 rows", "20 rows", "50 rows") if f"<td>{m}</td>" in table] == [
        "5 rows", "10 rows", "20 rows", "50 rows"]
    assert table.index("<td>5 rows</td>") < table.index("<td>10 rows</td>") < table.index("<td>50 rows</td>")
    assert "<th>rows adapted to</th>" in table


def test_llm_memory_plot_names_the_job_and_whether_it_fits(tmp_path, capsys):
    """The --plot file stands alone: it was titled 'Memory per GPU' whatever the job, its one bar labelled
    'llama2-70b none' (the recompute setting, unnamed), and nothing on it said that the job does not fit."""
    import matplotlib

    from hybrid.cli.main import main

    out = tmp_path / "m.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as <text>, readable here
        assert main(["llm", "memory", "llama2-70b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "8",
                     "--plot", str(out)]) == 0
    svg = out.read_text()
    assert "Memory per GPU: does not fit" in svg
    assert "llama2-70b on 8 x A100-SXM4-80GB (DGX-A100), tp 1 pp 1 dp 8, micro 1" in svg
    assert "llama2-70b, recompute none" in svg


def test_llm_memory_plot_title_holds_the_whole_mapping(tmp_path):
    """The title said 'on 64 x A100 ..., tp 2 pp 4 dp 2' for a job with cp 4 and vp 5: a mapping of 16 GPUs, the
    context-parallel (and expert, virtual-pipeline) degree left out."""
    import matplotlib

    from hybrid.cli.main import main

    out = tmp_path / "m.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        assert main(["llm", "memory", "llama2-70b", "--system", "DGX-A100", "--gpus", "64", "--global-batch", "128",
                     "--tp", "2", "--pp", "4", "--cp", "4", "--vp", "5", "--sp", "--distributed-optimizer",
                     "--plot", str(out)]) == 0
        assert "on 64 x A100-SXM4-80GB (DGX-A100), tp 2 pp 4 dp 2 cp 4 vp 5, micro 1" in out.read_text()
        assert main(["llm", "memory", "mixtral-8x7b", "--system", "DGX-H100", "--gpus", "16", "--global-batch", "32",
                     "--tp", "2", "--ep", "8", "--fsdp", "--recompute", "full", "--plot", str(out)]) == 0
        assert "on 16 x H100-SXM (DGX-H100), tp 2 pp 1 dp 8 ep 8, micro 1" in out.read_text()


def test_a_report_on_tables_keeps_the_warnings_in_its_header(tmp_path, monkeypatch, capsys):
    """Data-quality and transfer warnings of `report --table` (a table named twice; a model that never measured a
    processor of the table's kind) went to stderr only; the page, which is what is kept and shared, said nothing."""
    from hybrid.cli.main import main

    monkeypatch.setenv("HYBRID_HOME", str(tmp_path / "home"))
    csv = tmp_path / "t.csv"
    csv.write_text("device,op,dtype,time_us,m,n,k\nH100-SXM,gemm,fp16,900,4096,4096,4096\n")
    out = tmp_path / "r.html"
    assert main(["report", "--model", "roofline", "--table", str(csv), "--table", str(csv), "-o", str(out), "-q"]) == 0
    assert "warning: 1 measurement table(s) named more than once" in capsys.readouterr().err  # still said there
    text = out.read_text()
    assert "<tr><th>warning</th><td>1 measurement table(s) named more than once; each is read once</td></tr>" in text
    assert f"<tr><th>tables</th><td>{csv}</td></tr>" in text  # read once, listed once


def test_simulate_prints_the_throughput_with_thousands_separators(capsys):
    """'throughput: 7055453 samples/s' had to be counted digit by digit (the memory and times beside it are
    formatted); it reads 7,055,453."""
    from pathlib import Path

    from hybrid.cli.main import main

    config = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "dlrm_example.yaml"
    assert main(["simulate", str(config)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "throughput:" in ln)
    value = line.split("throughput: ")[1].split(" samples/s")[0]
    assert "," in value and value.replace(",", "").isdigit()


def test_a_ratio_axis_over_decades_is_labelled_per_decade():
    """Ratios from 0.0003 to 1 (a roofline thousands of times off) got the fixed labels 0.01 ... 1: nothing under
    0.01, and six labels crowded between 0.1 and 2."""
    from hybrid.reports.plots import error_vs_size

    frame = _frame(["H100-SXM"], families=("gemm",))
    frame["roofline_us"] = frame["measured_us"] * np.geomspace(3e-4, 1, len(frame))
    ax = error_vs_size(frame).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["0.001", "0.01", "0.1", "1"]
    narrow = error_vs_size(_frame(["H100-SXM"], families=("gemm",))).axes[0]
    assert [t.get_text() for t in narrow.get_yticklabels()] == ["0.5", "1", "2"]


def test_llm_train_says_the_memory_per_gpu_once(capsys):
    """'memory per GPU: 59.9 GiB of 80 (fits: 59.9 of 80.0 GiB)': the same two figures twice, the capacity at two
    precisions."""
    from hybrid.cli.main import main

    assert main(["llm", "train", "llama2-7b", "--system", "DGX-A100", "--gpus", "8", "--global-batch", "32",
                 "--fsdp"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("memory per GPU"))
    assert line.startswith("memory per GPU: fits: ") and line.endswith(" of 80.0 GiB") and line.count(" of ") == 1


def test_llm_search_counts_its_mappings_with_thousands_separators(capsys):
    from hybrid.cli.main import main

    assert main(["llm", "search", "gpt3-175b", "--system", "DGX-A100", "--gpus", "1024", "--global-batch", "1536",
                 "--top", "1"]) == 0
    head = next(x for x in capsys.readouterr().out.splitlines() if " mappings, " in x)
    count = head.split(": ")[1].split(" mappings")[0]
    assert "," in count and count.replace(",", "").isdigit()  # 12,236, not 12236
