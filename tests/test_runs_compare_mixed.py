"""Mixed inputs: our dumper's dump of the bf16 Llama step compared with msprobe 26.2's dump of the same step."""
from __future__ import annotations

import importlib.util
import json
import os

import zoo  # noqa: F401 - torchvision's shim before transformers

from pytest_msprobe.runs_compare.diverge import analyze
from pytest_msprobe.runs_compare.runner import compare_runs

FIXTURES = os.path.join(os.path.dirname(__file__), "data", "msprobe_26_2_compare")


def _fixture_module():
    spec = importlib.util.spec_from_file_location("make_fixtures", os.path.join(FIXTURES, "make_fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_our_dump_against_msprobes_same_step(tmp_path):
    import torch

    from pytest_msprobe import PrecisionDebugger

    mf = _fixture_module()
    model = mf._model()                       # the fixtures' model, seed and batch
    ids = torch.randint(0, mf.VOCAB, (mf.BATCH, mf.SEQ), generator=torch.Generator().manual_seed(1))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), "level": "mix",
                                  "statistics": {"data_mode": ["all"]}}))
    debugger = PrecisionDebugger(config_path=str(config))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                  # as the fixtures were made: GEMMs sum in one thread's order
    try:
        debugger.start(model)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        debugger.stop()
    finally:
        torch.set_num_threads(threads)
    results = compare_runs(str(tmp_path / "dump" / "step0"),
                           os.path.join(FIXTURES, "llama", "statistics", "golden", "step0"), str(tmp_path / "out"),
                           report=lambda line: None)
    lines = results[0].lines
    matched = [line for line in lines if line.golden is not None]
    assert len(matched) > 0.7 * len(lines)
    forward = [line for line in matched if ".forward." in line.target.name and line.target.key.startswith(
        ("Functional.", "Torch.", "Tensor.")) and (line.golden.item or {}).get("type") == "torch.Tensor"]
    assert forward
    for line in forward:        # Max and Min are elements; Mean and Norm are sums of N terms that the two dumpers
        t, g = line.target.stats, line.golden.stats        # may add in other orders, in float32
        assert t[:2] == g[:2], f"{line.target.name}: Max, Min {t[:2]} against msprobe's {g[:2]}"
        n = max(1, _numel(line.golden.item))
        for i, scale in ((2, max(abs(g[0]), abs(g[1])) if isinstance(g[0], float) else 0.0), (3, g[3])):
            if isinstance(g[i], float) and t[i] != g[i]:
                assert abs(t[i] - g[i]) <= n * 2.0 ** -24 * abs(scale), f"{line.target.name}: {t[i]} vs {g[i]}"
    assert all(line.result == "pass" for line in lines)
    doc, _ = analyze(results)
    assert doc == {}



def _numel(item: dict) -> int:
    n = 1
    for size in item.get("shape") or ():
        n *= size
    return n
