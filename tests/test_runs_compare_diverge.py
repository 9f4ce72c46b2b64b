"""The first divergence (-da) on msprobe 26.2's own dumps of a bf16 Llama step with planted aten-level faults,
with and without other-device GEMM noise (tests/data/msprobe_26_2_compare; noise alone from two seeds): the
planted API is named in statistics, tensor and md5 mode, nothing on noise alone, never another API; across two
ranks."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from pytest_msprobe.cli import main as cli_main
from pytest_msprobe.runs_compare.diverge import analyze, stat_rounding, stat_rounding_columns, stats_observed
from pytest_msprobe.runs_compare.runner import compare_runs

LLAMA = os.path.join(os.path.dirname(__file__), "data", "msprobe_26_2_compare", "llama")
PLANTED = {"silu": "Functional.silu.0.forward", "_softmax": "Functional.softmax.0.forward",
           "silu_backward": "Functional.silu.0.backward", "rsqrt": "Torch.rsqrt.0.forward",
           # the op's n-th call (make_fixtures.py): the API that ran it, as its own record of the fault shows
           "rsqrt-2": "Torch.rsqrt.1.forward", "mean.dim-2": "Tensor.mean.1.forward",
           "add.Tensor-5": "Tensor.__add__.4.forward", "bmm-2": "Torch.matmul.1.forward",
           "_log_softmax": "Functional.cross_entropy.0.forward",
           "_softmax_backward_data": "Functional.softmax.0.backward"}


def _variants(task: str) -> list:
    root = os.path.join(LLAMA, task)
    return sorted(v for v in os.listdir(root) if v != "golden") if os.path.isdir(root) else []


def _first(task: str, variant: str, tmp_path) -> dict:
    root = os.path.join(LLAMA, task)
    results = compare_runs(os.path.join(root, variant, "step0"), os.path.join(root, "golden", "step0"),
                           str(tmp_path), report=lambda line: None)
    doc, _ = analyze(results)
    return doc


def _planted(variant: str) -> str | None:
    return PLANTED[variant.split("fault_", 1)[1]] if "fault_" in variant else None


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_planted_api_named_and_nothing_on_noise(task, tmp_path):
    variants = _variants(task)
    assert variants, f"fixtures of {task} mode missing"
    for variant in variants:
        doc = _first(task, variant, tmp_path / variant)
        named = [node["op_name"] for nodes in doc.values() for node in nodes]
        planted = _planted(variant)
        if planted is None:
            assert named == [], f"{task} {variant}: noise alone named {named}"
        else:
            assert named == [planted], f"{task} {variant}: named {named}, planted {planted}"
            node = doc["rank_0"][0]
            assert node["source"] == ("tensors" if task == "tensor" else "statistics")
            assert node["multiple"] > 2 and node["module_path"][-1] == planted


def test_md5_names_the_planted_api_where_runs_are_otherwise_bit_exact(tmp_path):
    variants = [v for v in _variants("md5") if not v.startswith("noise")]
    assert variants
    for variant in variants:
        doc = _first("md5", variant, tmp_path / variant)
        assert [n["op_name"] for n in doc["rank_0"]] == [_planted(variant)]
        assert doc["rank_0"][0]["source"] == "md5" and "NPU MD5" in json.dumps(doc)


def test_two_ranks_first_divergence_across_ranks(tmp_path, capsys):
    root = os.path.join(LLAMA, "statistics")
    for side, rank1 in (("target", "fault_rsqrt"), ("golden", "golden")):
        shutil.copytree(os.path.join(root, "fault__softmax" if side == "target" else "golden", "step0", "rank"),
                        tmp_path / side / "step0" / "rank0")
        shutil.copytree(os.path.join(root, rank1, "step0", "rank"), tmp_path / side / "step0" / "rank1")
    out = tmp_path / "out"
    assert cli_main(["compare", "-tp", str(tmp_path / "target" / "step0"), "-gp",
                     str(tmp_path / "golden" / "step0"), "-o", str(out), "-da"]) == 0
    printed = capsys.readouterr().out
    written = sorted(os.listdir(out))
    assert [n for n in written if n.startswith("compare_result_rank")] != [] and len(written) == 3
    with open(out / next(n for n in written if n.startswith("diff_analyze_"))) as fh:
        doc = json.load(fh)
    # the first RMSNorm's rsqrt (rank 1) runs before the attention's softmax (rank 0): rank 1 first, both listed
    assert list(doc) == ["rank_1", "rank_0"]
    assert doc["rank_1"][0]["op_name"] == "Torch.rsqrt.0.forward" and doc["rank_1"][0]["first_across_ranks"]
    assert doc["rank_0"][0]["op_name"] == "Functional.softmax.0.forward"
    assert not doc["rank_0"][0]["first_across_ranks"]
    assert "first divergence: rank_1 Torch.rsqrt.0.forward" in printed


def test_printed_statistics_count_beyond_their_rounding_to_the_dtype():
    u_bf16, u_fp16 = 2.0 ** -8, 2.0 ** -11
    # 0.024169921875 = 198 * 2^-13, a bf16 value in [2^-6, 2^-5): one ulp is 2^-13, half of it 2^-14
    assert stat_rounding(0.024169921875, u_bf16) == 2.0 ** -14
    assert stat_rounding(-0.024169921875, u_bf16) == 2.0 ** -14
    # no bf16 value: printed from a wider computation, float32's half ulp
    assert stat_rounding(0.0241699, u_bf16) == 2.0 ** -24 * 2.0 ** -6
    assert stat_rounding(0.0, u_bf16) == 0.0 and stat_rounding(float("inf"), u_bf16) == 0.0
    # float16 below its normal range: spacing 2^-24, not relative
    assert stat_rounding(3 * 2.0 ** -24, u_fp16) == 2.0 ** -25
    values = np.array([0.024169921875, 0.0241699, -3.0, 0.0, np.inf, np.nan, 1e-30, 3 * 2.0 ** -24])
    for u in (u_bf16, u_fp16, 2.0 ** -24):
        assert np.array_equal(stat_rounding_columns(values, np.full(values.size, u)),
                              [stat_rounding(float(v), u) for v in values])
    # one printed bf16 ulp of a Norm is no difference at all; seven are six beyond the two half ulps
    target, golden = [0.0, 0.0, 0.0, 0.0240478515625], [0.0, 0.0, 0.0, 0.024169921875]
    assert stats_observed(target, golden, 1, u_bf16) == (0.0, 0.0)
    assert stats_observed(target, golden, 1) == (2.0 ** -13, 0.0)
    target[3] = 0.024169921875 + 7 * 2.0 ** -13
    assert stats_observed(target, golden, 1, u_bf16)[0] == 6 * 2.0 ** -13


def test_the_json_says_which_rule_named_the_call(tmp_path):
    node = _first("statistics", "noise_fault__softmax_backward_data", tmp_path / "mean")["rank_0"][0]
    assert node["basis"].startswith("conserved: the Mean is 0") and node["confidence"].startswith("bound")
    node = _first("statistics", "noise_seed1_fault_silu_backward", tmp_path / "norm")["rank_0"][0]
    assert node["basis"].startswith("the Norm moved") and node["confidence"].startswith("estimate")
    node = _first("statistics", "noise_fault_bmm-2", tmp_path / "max")["rank_0"][0]
    assert node["basis"].startswith("analytic: gemm") and node["confidence"].startswith("lower bound")
