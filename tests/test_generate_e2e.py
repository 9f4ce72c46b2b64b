"""End-to-end: a checker run, a suite generated from it, and the suite run by plain pytest via pytester.

A conftest registers a ``planted`` backend (the CPU backend with gelu's output perturbed by 1 %), so a
known call is inaccurate on the "device" and accurate on ``cpu``.
"""
from __future__ import annotations

import glob
import importlib.util
import shutil

import pytest
import torch  # noqa: F401 - imported before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - the same, and keeps in-process runs fast
import pytest_msprobe.precision.compare  # noqa: F401
from pytest_msprobe.suite.generate import generate
from pytest_msprobe.report import acc_csv

PLANTED = '''
from pytest_msprobe.devices import CpuBackend


class Planted(CpuBackend):
    """The CPU, except that gelu's output is 1 % too large."""

    name = "planted"

    def call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        return out * 1.01 if getattr(func, "__name__", "") == "gelu" else out


def pytest_msprobe_register_devices(registry):
    registry.register(Planted())
'''

SAMPLE_APIS = [
    "Functional.linear.0", "Torch.relu.0", "Functional.layer_norm.0", "Functional.gelu.0", "Tensor.__mul__.0",
    "Tensor.softmax.0", "Tensor.__add__.0", "Functional.linear.1", "Functional.cross_entropy.0",
    "Tensor.add_.0", "Tensor.add_.1", "Tensor.add_.2", "Tensor.add_.3", "Tensor.add_.4", "Tensor.add_.5",
]
STATS = ("mlp_fp32_statistics_L1", "step0", "rank")


@pytest.fixture
def project(pytester, data_dir):
    """pytester dir with the fp32 tensor dump in dump/ and the planted backend in the conftest."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(PLANTED)
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank", pytester.path / "dump")
    return pytester


def outcomes(res) -> dict:
    """Generated case id -> outcome, from ``-rA`` lines like ``PASSED suite/test_x.py::test_api_call[id]``."""
    out = {}
    for line in res.outlines:
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "SKIPPED") and "[" in rest:
            out[rest.split("[", 1)[1].split("]", 1)[0]] = word
    return out


def checker_verdicts(path) -> dict:
    (result,) = glob.glob(str(path / "accuracy_checking_result_*.csv"))
    return {r.name: ("FAILED" if acc_csv.is_failing(r.forward, r.backward) else "PASSED")
            for r in acc_csv.read_result_csv(result)}


@pytest.mark.slow
def test_generated_suite_gives_the_checker_verdicts_without_the_dump(project):
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted")
    res.assert_outcomes(passed=14, failed=1)
    expected = checker_verdicts(project.path)
    assert expected["Functional.gelu.0"] == "FAILED" and list(expected) == SAMPLE_APIS

    generate("dump/dump.json", "suite", scripts=["Functional.gelu.0"])
    shutil.rmtree(project.path / "dump")                   # the suite must not need the original dump

    res = project.runpytest("suite", "--msprobe-device-type", "planted", "-rA", "-p", "no:randomly")
    res.assert_outcomes(passed=14, failed=1)
    assert outcomes(res) == expected
    res.stdout.fnmatch_lines(["*Functional.gelu.0.forward.output.0: error: Relative error*",
                              "*(device planted, standard 1.0.4)*"])
    ids = [ln.split("::")[-1] for ln in project.runpytest("suite", "--collect-only", "-q").outlines if "::" in ln]
    assert ids == [f"test_api_call[{name}]" for name in SAMPLE_APIS]

    res = project.runpytest("suite", "-n", "2", "--msprobe-device-type", "planted", "-rA")
    res.assert_outcomes(passed=14, failed=1)
    assert outcomes(res) == expected
    res = project.runpytest("suite", "--msprobe-device-type", "planted", "--lf")   # --lf: just the failure
    res.assert_outcomes(failed=1)
    res = project.runpytest("suite", "-k", "Functional.linear", "-rA")               # the plain cpu backend
    res.assert_outcomes(passed=2, deselected=13)


def test_from_result_errors_only_fails_on_the_planted_device_and_passes_on_cpu(project, capsys):
    project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted",
                      "-k", "gelu or relu")
    (result,) = glob.glob(str(project.path / "accuracy_checking_result_*.csv"))
    generate("dump/dump.json", "regress", name="gelu", from_result=result, statuses="error",
             scripts=["Functional.gelu.0"])
    text = " ".join(ln.strip().lstrip("#").strip() for ln in
                    (project.path / "regress" / "test_gelu.py").read_text().splitlines())
    assert "checker result: forward error, backward pass" in text
    assert "failed: Functional.gelu.0.forward.output.0: error: Relative error is greater than 0.001" in text
    shutil.rmtree(project.path / "dump")

    res = project.runpytest("regress", "--msprobe-device-type", "planted", "-rA")
    res.assert_outcomes(failed=1)
    assert outcomes(res) == {"Functional.gelu.0": "FAILED"}
    res = project.runpytest("regress", "--msprobe-device-type", "cpu")
    res.assert_outcomes(passed=1)
    res = project.runpytest("regress", "--msprobe-device-type", "nosuch")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*unknown device type 'nosuch'; registered: cpu, cuda, npu, ms-cpu, recorded, planted*"])

    # the standalone script: same verdict, no pytest run
    path = project.path / "regress" / "reproduce_Functional_gelu_0.py"
    spec = importlib.util.spec_from_file_location("reproduce_gelu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capsys.readouterr()
    assert module.main(["--backend", f"{project.path / 'conftest.py'}:Planted"]) == 1
    out = capsys.readouterr().out
    assert "Functional.gelu.0: gelu(float32[8,32]) -> float32[8,32]" in out
    assert "Functional.gelu.0.forward.output.0: error (benchmark)" in out and "max_abs_err=0.0382" in out
    assert "verdict: forward error, backward pass" in out
    assert module.main(["--device-type", "cpu"]) == 0
    assert module.main(["--backend", "nosuch_module:X"]) == 2


def test_random_suite_matches_the_checker_in_random_mode(pytester, data_dir):
    pytester.makeini("[pytest]\n")
    shutil.copytree(data_dir.joinpath(*STATS), pytester.path / "stats")
    res = pytester.runpytest("--msprobe-api-info", "stats/dump.json", "--msprobe-seed", "7", "-k",
                             "gelu or softmax or linear")
    expected = checker_verdicts(pytester.path)
    generate("stats/dump.json", "suite", random=True, seed=7, apis=["gelu", "softmax", "linear"])
    shutil.rmtree(pytester.path / "stats")
    res = pytester.runpytest("suite", "-rA")
    assert outcomes(res) == expected and len(expected) == 4
