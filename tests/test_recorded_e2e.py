"""End-to-end: ``--msprobe-device-type recorded`` and the Replay Fidelity column, through real pytest sessions.

msprobe's own fp32 MLP tensor dump (and its acc_check CSVs, made with the CPU as the device) and an fp16 dump
of the same MLP made with our dumper; a planted difference is a recorded gelu forward output made 0.5% too
large.
"""
from __future__ import annotations

import csv
import glob
import json
import shutil
import sys

import pytest
import torch  # noqa: F401 - imported before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - the same, and keeps in-process runs fast
import pytest_msprobe.precision.compare  # noqa: F401
import pytest_msprobe.replay.expected  # noqa: F401 - one NotRecorded class across the in-process runs
from dumpers import format as fmt

FIDELITY = "Replay Fidelity"
GELU_OUT = "Functional.gelu.0.forward.output.0"


def _csv(path_glob: str) -> tuple:
    (path,) = glob.glob(path_glob)
    with open(path, encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def _details(path) -> dict:
    header, rows = _csv(str(path / "accuracy_checking_details_*.csv"))
    return {r[0]: dict(zip(header, r)) for r in rows}


def _results(path) -> dict:
    header, rows = _csv(str(path / "accuracy_checking_result_*.csv"))
    return {r[0]: r for r in rows}


def _msprobe_statuses(data_dir) -> dict:
    _, rows = _csv(str(data_dir / "mlp_fp32_tensor_L1_acc_check" / "accuracy_checking_details_*.csv"))
    return {r[0]: r[-2] for r in rows}


def _norm(status: str) -> str:
    return status.strip().lower()


def _plant_gelu(dump_dir) -> None:
    path = dump_dir / fmt.TENSOR_DIR / "Functional.gelu.0.forward.output.0.pt"
    torch.save(torch.load(path, weights_only=True) * 1.005, path)


def _run(pytester, dump, *args):
    out = pytester.mkdir(f"out{len(list(pytester.path.glob('out*')))}")
    run = pytester.runpytest_subprocess if "-n" in args else pytester.runpytest_inprocess
    result = run(f"--msprobe-api-info={dump}", f"--msprobe-out={out}", "-p", "no:cacheprovider",
                 "-p", "no:randomly", *args)
    return result, out


@pytest.fixture
def sample(pytester, data_dir):
    """msprobe's fp32 MLP tensor dump (step 0), writable, in the pytester directory."""
    pytester.makeini("[pytest]\n")
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank", pytester.path / "dump")
    return pytester.path / "dump"


@pytest.fixture(scope="module")
def fp16_dump(tmp_path_factory):
    """(dump dir, CPU threads of the training) of one fp16 training step of the same MLP, made with our dumper."""
    base = tmp_path_factory.mktemp("fp16")
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent.parent / "examples"))
    try:
        from mlp_train import train
    finally:
        sys.path.pop(0)
    train(str(base / "dump"), task="tensor", level="L1", steps=1, dtype=torch.float16)
    return base / "dump" / "step0" / "rank", torch.get_num_threads()


# --- recorded: no device needed ------------------------------------------------------------------------------
def test_recorded_gives_msprobe_statuses(pytester, sample, data_dir):
    result, out = _run(pytester, sample, "--msprobe-device-type", "recorded")
    assert "INTERNALERROR" not in result.stdout.str()
    ours = _details(out)
    theirs = _msprobe_statuses(data_dir)
    same = [name for name, status in theirs.items() if name in ours and _norm(ours[name]["Status"]) == _norm(status)]
    assert len(same) >= 0.95 * len(theirs), sorted(set(theirs) - set(same))
    # the device side is the recording: its dtype, and no fidelity (there is no replay)
    assert ours[GELU_OUT]["DEVICE Dtype"] == "torch.float32" and ours[GELU_OUT][FIDELITY] == ""
    # linear records (bias, input, weight.T): the weight's gradient row is judged on the transposed recording
    assert _norm(ours["Functional.linear.0.backward.output.1"]["Status"]) == "pass"
    assert ours["Functional.linear.0.backward.output.1"]["Shape"] == "(32, 16)"
    # cross_entropy records the gradient of its inner log_softmax step: that row SKIPs and says why
    ce = ours["Functional.cross_entropy.0.backward.output.0"]
    assert ce["Status"] == "SKIP" and "last autograd step" in ce["Message"]


def test_planted_recorded_output_flags_gelu_only(pytester, sample):
    _, clean = _run(pytester, sample, "--msprobe-device-type", "recorded")
    _plant_gelu(sample)
    result, planted = _run(pytester, sample, "--msprobe-device-type", "recorded")
    before, after = _details(clean), _details(planted)
    assert _norm(after[GELU_OUT]["Status"]) in ("warning", "error")
    changed = sorted(n for n in before if before[n]["Status"] != after[n]["Status"])
    assert changed == [GELU_OUT]
    results = _results(planted)
    assert _norm(results["Functional.gelu.0"][1]) in ("warning", "error")
    result.assert_outcomes(failed=1 if _norm(results["Functional.gelu.0"][1]) == "error" else 0,
                           passed=len(results) - (1 if _norm(results["Functional.gelu.0"][1]) == "error" else 0))


def test_replay_fidelity_on_the_planted_dump(pytester, sample):
    _plant_gelu(sample)
    result, out = _run(pytester, sample, "--msprobe-device-type", "cpu")
    details = _details(out)
    header, _ = _csv(str(out / "accuracy_checking_details_*.csv"))
    assert header[-3:] == ["Data Mode", FIDELITY, "Error / Expected"]
    differs = {n: r[FIDELITY] for n, r in details.items() if r[FIDELITY].startswith("differs")}
    assert list(differs) == [GELU_OUT], differs        # a GEMM summed in another order is within rounding
    for text in differs.values():
        assert " x expected): max abs diff" in text and " ulp, " in text and "% of elements" in text
    filled = [r[FIDELITY] for r in details.values() if r[FIDELITY]]
    assert len(filled) >= 20 and all(t.split(":")[0].split(" ")[0] in ("exact", "within", "differs") for t in filled)
    text = result.stdout.str()
    assert "replay fidelity:" in text and "unfaithful" in text and GELU_OUT in text
    # report mode: the planted recording does not change the item outcome
    result.assert_outcomes(passed=len(_results(out)))


def test_fidelity_strict_fails_the_unfaithful_item(pytester, sample):
    _plant_gelu(sample)
    result, out = _run(pytester, sample, "--msprobe-device-type", "cpu", "--msprobe-fidelity", "strict")
    outcomes = result.parseoutcomes()
    assert 1 <= outcomes.get("failed", 0) <= 3, outcomes     # gelu, and at most the GEMMs of another machine
    result.stdout.fnmatch_lines(["FAILED *::Functional.gelu.0*"])       # pytest 8 adds " - " and the reason
    assert "Functional.gelu.0: the replay did not reproduce the recorded output (--msprobe-fidelity strict):" \
        in result.stdout.str()
    assert _details(out)[GELU_OUT]["Status"] == "pass"         # the CSV keeps the precision verdict


def test_fidelity_with_xdist(pytester, sample):
    _plant_gelu(sample)
    _, serial = _run(pytester, sample, "--msprobe-device-type", "cpu")
    result, parallel = _run(pytester, sample, "--msprobe-device-type", "cpu", "-n", "2")
    assert "INTERNALERROR" not in result.stdout.str()
    a, b = _details(serial), _details(parallel)
    assert {n: r[FIDELITY] for n, r in a.items()} == {n: r[FIDELITY] for n, r in b.items()}
    result, rec = _run(pytester, sample, "--msprobe-device-type", "recorded", "-n", "2")
    assert _norm(_details(rec)[GELU_OUT]["Status"]) in ("warning", "error")


# --- usage errors and missing recordings ---------------------------------------------------------------------
def test_statistics_dump_with_recorded_is_a_usage_error(pytester, data_dir):
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest_subprocess(f"--msprobe-api-info={data_dir / 'mlp_fp32_statistics_L1' / 'step0'}",
                                           "--msprobe-device-type", "recorded", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*statistics only*task*tensor*"])


def test_random_with_recorded_is_a_usage_error(pytester, sample):
    result = pytester.runpytest_subprocess(f"--msprobe-api-info={sample}", "--msprobe-device-type", "recorded",
                                           "--msprobe-random", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--msprobe-random*recorded*"])


def test_ini_device_type_recorded_and_missing_files_skip(pytester, sample):
    pytester.makeini("[pytest]\nmsprobe_device_type = recorded\n")
    (sample / fmt.TENSOR_DIR / "Torch.relu.0.forward.output.0.pt").unlink()
    torch.save({"x": 1}, sample / fmt.TENSOR_DIR / "Functional.gelu.0.forward.output.0.pt")
    result, out = _run(pytester, sample)
    details, results = _details(out), _results(out)
    relu = details["Torch.relu.0.forward.output.0"]
    assert relu["Status"] == "SKIP" and "Torch.relu.0.forward.output.0.pt is missing" in relu["Message"]
    gelu = details[GELU_OUT]
    assert gelu["Status"] == "SKIP" and "holds a dict, not a tensor" in gelu["Message"]
    assert results["Torch.relu.0"][1] == "SKIP" and results["Functional.gelu.0"][1] == "SKIP"
    assert _norm(details["Torch.relu.0.backward.output.0"]["Status"]) == "pass"   # the gradient is still judged
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped") == 2 and "failed" not in outcomes


def test_damaged_recorded_file_says_so(pytester, sample):
    """A recorded output that cannot be read is not a blank cell (blank: nothing recorded) but says why."""
    (sample / fmt.TENSOR_DIR / "Functional.gelu.0.forward.output.0.pt").write_bytes(b"not a tensor file")
    result, out = _run(pytester, sample, "--msprobe-device-type", "cpu", "--msprobe-fidelity", "strict")
    cell = _details(out)[GELU_OUT][FIDELITY]
    assert cell.startswith("not compared: ") and "Functional.gelu.0" in cell, cell
    result.assert_outcomes(passed=15)          # strict fails only a replay that differs


# --- our own fp16 dump ---------------------------------------------------------------------------------------
def test_fp16_dump_recorded_matches_the_cpu_replay(pytester, fp16_dump):
    """Replayed with the training's CPU thread count (the same reduction order) every replay is faithful."""
    pytester.makeini("[pytest]\n")
    shutil.copytree(fp16_dump[0], pytester.path / "dump")
    dump = pytester.path / "dump"
    threads = (f"--msprobe-threads={fp16_dump[1]}",)
    _, replay = _run(pytester, dump, "--msprobe-device-type", "cpu", *threads)
    _, recorded = _run(pytester, dump, "--msprobe-device-type", "recorded")
    a, b = _details(replay), _details(recorded)
    assert a[GELU_OUT]["DEVICE Dtype"] == "torch.float16" == b[GELU_OUT]["DEVICE Dtype"]
    same = [n for n in a if n in b and a[n]["Status"] == b[n]["Status"]]
    assert len(same) >= 0.95 * len(a), sorted(set(a) - set(same))
    assert all(r[FIDELITY].startswith(("exact", "within rounding")) for r in a.values() if r[FIDELITY]), \
        {n: r[FIDELITY] for n, r in a.items()}
    _plant_gelu(dump)
    _, planted = _run(pytester, dump, "--msprobe-device-type", "recorded")
    c = _details(planted)
    assert _norm(c[GELU_OUT]["Status"]) in ("warning", "error")
    assert sorted(n for n in b if b[n]["Status"] != c[n]["Status"]) == [GELU_OUT]
    _, replayed = _run(pytester, dump, "--msprobe-device-type", "cpu", *threads)
    d = _details(replayed)
    assert d[GELU_OUT][FIDELITY].startswith("differs (")
    assert [n for n, r in d.items() if r[FIDELITY].startswith("differs")] == [GELU_OUT]


# --- generated suites ----------------------------------------------------------------------------------------
def test_generated_suite_carries_the_recorded_outputs(pytester, sample):
    _plant_gelu(sample)
    suite = pytester.path / "suite"
    gen = pytester.run(sys.executable, "-m", "pytest_msprobe.cli", "generate", str(sample), "-o", str(suite),
                       "--api", "Functional.gelu.0", "--api", "Torch.relu.0")
    assert gen.ret == 0, gen.stderr.str()
    shutil.rmtree(sample)
    out = pytester.mkdir("suite_out")
    result = pytester.runpytest_subprocess(str(suite), "--msprobe-device-type", "recorded", f"--msprobe-out={out}",
                                           "-p", "no:cacheprovider")
    text = result.stdout.str()
    assert "INTERNALERROR" not in text
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) == 0, text
    result = pytester.runpytest_subprocess(str(suite), "--msprobe-device-type", "cpu", "--msprobe-fidelity",
                                           "strict", "-p", "no:cacheprovider")
    assert result.parseoutcomes().get("failed") == 1
    assert "did not reproduce the recorded output" in result.stdout.str()


# --- MindSpore -----------------------------------------------------------------------------------------------
@pytest.mark.mindspore
def test_mindspore_dump_recorded_and_fidelity(pytester, tmp_path):
    ms = pytest.importorskip("mindspore")
    import numpy as np

    from pytest_msprobe.mindspore import PrecisionDebugger
    ms.set_context(mode=ms.PYNATIVE_MODE)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "tensor", "level": "L1", "dump_path": str(tmp_path / "ms"), "tensor": {}}))
    dbg = PrecisionDebugger(str(cfg))
    x = ms.Tensor(np.random.RandomState(0).randn(4, 6).astype(np.float32))
    net = ms.nn.Dense(6, 3)
    grad_fn = ms.value_and_grad(lambda t: ms.ops.sum(ms.ops.softmax(ms.ops.tanh(net(t)), axis=-1) * 2.0), None,
                                net.trainable_params())
    try:
        dbg.start(net)
        grad_fn(x)
        dbg.stop()
        dbg.step()
    finally:
        dbg.close()
    pytester.makeini("[pytest]\n")
    dump = tmp_path / "ms" / "step0" / "rank"
    _, replay = _run(pytester, dump)
    a = _details(replay)
    softmax = "Functional.softmax.0.forward.output.0"
    assert a[softmax][FIDELITY].startswith(("exact", "within rounding")), a[softmax]
    _, rec = _run(pytester, dump, "--msprobe-device-type", "recorded")
    b = _details(rec)
    assert _norm(b[softmax]["Status"]) == "pass" and b[softmax][FIDELITY] == ""
    assert _norm(b["Functional.tanh.0.backward.output.0"]["Status"]) == "pass"
    path = dump / fmt.TENSOR_DIR / "Functional.softmax.0.forward.output.0.npy"
    np.save(path, np.load(path) * np.float32(1.005))
    _, replanted = _run(pytester, dump, "-n", "2")
    assert _details(replanted)[softmax][FIDELITY].startswith("differs (")
    _, rec2 = _run(pytester, dump, "--msprobe-device-type", "recorded", "-n", "2")
    assert _norm(_details(rec2)[softmax]["Status"]) in ("warning", "error")
