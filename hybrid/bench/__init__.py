"""Real measurements to validate the predictor against: a multi-process PyTorch DLRM trainer
(:mod:`~hybrid.bench.dlrm_harness`), random configuration/plan campaigns (:mod:`~hybrid.bench.campaign`) and
prediction-versus-measurement figures (:mod:`~hybrid.bench.validate`). torch is needed only to measure."""
