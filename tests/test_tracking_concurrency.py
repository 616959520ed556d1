"""Two calibrations writing to one local SQLite store at the same time (separate processes, fresh store: both
race to create the schema, the experiment and the registered model) must both succeed, as versions 1 and 2."""

from __future__ import annotations

import os

import pytest
from test_tracking_support import concurrent_calibrations, neusight_table, write_csv


@pytest.mark.slow
def test_two_concurrent_calibrations_share_one_sqlite_store(tmp_path, shared_datasets):
    csv = write_csv(neusight_table(shared_datasets, max_rows=300, files=("bmm.csv", "ln.csv")), tmp_path / "t.csv")
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    env = {**os.environ, "HYBRID_HOME": str(tmp_path / "home")}
    results = concurrent_calibrations(csv, "shared", env, extra=("--tracking-uri", uri))
    assert sorted(r["version"] for r in results) == [1, 2]
    assert len({r["run_id"] for r in results}) == 2

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("hybrid-calibration").experiment_id])
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
    versions = client.search_model_versions("name = 'shared'")
    assert sorted(int(v.version) for v in versions) == [1, 2]
    # both runs' models load
    from hybrid.tracking.registry import load_predictor

    for ref in ("shared/1", "shared/2"):
        loaded = load_predictor(ref, tracking_uri=uri)
        assert loaded.run_id in {r["run_id"] for r in results}
    # nothing was written to the default store
    assert not (tmp_path / "home").exists()
