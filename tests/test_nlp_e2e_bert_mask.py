"""The NLP benchmark's BERT recording: the all-ones attention mask NeuSight's transformers added to every layer."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]


def _score_ops(bench, patched: bool) -> tuple[Counter, Counter]:
    """(ops whose first input is a [batch, heads, seq, seq] score tensor, mask-building ops) of a 2-layer BERT
    forward on the meta device."""
    cfg = tf.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        vocab_size=100, max_position_embeddings=32, attn_implementation="eager")
    with torch.device("meta"):
        model = tf.BertForSequenceClassification(cfg).eval()
    ids = torch.ones((2, 16), dtype=torch.long, device="meta")
    ctx = bench.legacy_bert_attention_mask() if patched else torch.no_grad()
    with torch.no_grad(), ctx, torch.profiler.profile(record_shapes=True) as prof:
        model(input_ids=ids)
    scores, masks = Counter(), Counter()
    for e in prof.events():
        shapes = e.input_shapes or []
        if e.name in ("aten::add", "aten::mul", "aten::softmax") and shapes and shapes[0] == [2, 4, 16, 16]:
            scores[(e.name, str(shapes[1]) if len(shapes) > 1 else "")] += 1
        if e.name in ("aten::ones", "aten::rsub"):
            masks[e.name] += 1
    return scores, masks


def test_bert_layers_add_the_extended_mask_as_neusights_transformers_did(load_experiment):
    """NeuSight ran BERT through transformers 4.36+ of the PyTorch 2.1 era, which built an all-ones mask when none
    was given and added its extended form ([batch, 1, 1, seq] zeros) to every layer's scores; transformers 5.x
    drops it (one pass over the scores fewer per layer). The benchmark's context manager puts it back: one add per
    layer, the mask built once per step."""
    bench = load_experiment("nlp_e2e")
    plain, plain_masks = _score_ops(bench, False)
    assert ("aten::add", "[2, 1, 1, 16]") not in plain and not plain_masks
    legacy, masks = _score_ops(bench, True)
    assert legacy[("aten::add", "[2, 1, 1, 16]")] == 2  # one per layer
    assert masks == Counter({"aten::ones": 1, "aten::rsub": 1})
    # the rest of the attention is unchanged: scale and softmax once per layer
    assert legacy[("aten::softmax", "[]")] == plain[("aten::softmax", "[]")] == 2
    mul = [k for k in legacy if k[0] == "aten::mul"]
    assert sum(legacy[k] for k in mul) == sum(plain[k] for k in mul) == 2
