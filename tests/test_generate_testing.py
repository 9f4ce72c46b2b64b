"""``pytest_msprobe.testing``: the helpers generated suites and reproduction scripts call, used directly."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

from pytest_msprobe import testing
from pytest_msprobe.suite.generate import generate

DATA = pathlib.Path(__file__).parent / "data"
BACKENDS = '''
from pytest_msprobe.devices import CpuBackend


class Doubling(CpuBackend):
    name = "doubling"

    def call(self, func, args, kwargs):
        return func(*args, **kwargs) * 2


instance = Doubling()
'''


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """A generated real-data suite of gelu and relu; the source dump removed."""
    root = tmp_path_factory.mktemp("suite")
    shutil.copytree(DATA / "mlp_fp32_tensor_L1" / "step0" / "rank", root / "dump")
    generate(str(root / "dump" / "dump.json"), str(root / "out"), apis=["gelu", "relu"])
    shutil.rmtree(root / "dump")
    (root / "backends.py").write_text(BACKENDS)
    return root


def test_load_case_reads_the_mini_dump_and_names_what_is_wrong(suite):
    case = testing.load_case(suite / "out" / "msprobe_data", "Functional.gelu.0")
    assert case.api == "gelu" and case.has_tensor_files and case.problem is None
    assert testing.describe_case(case) == "Functional.gelu.0: gelu(float32[8,32]) -> float32[8,32]"
    with pytest.raises(LookupError, match=r"has no call 'Functional.gelu.1'.*regenerate the suite"):
        testing.load_case(suite / "out" / "msprobe_data", "Functional.gelu.1")
    with pytest.raises(LookupError, match=r"is missing: the generated test module needs its data directory"):
        testing.load_case(suite / "nowhere", "Functional.gelu.0")


def test_run_call_on_cpu_passes_and_on_a_broken_backend_fails(suite):
    case = testing.load_case(suite / "out" / "msprobe_data", "Functional.gelu.0")
    good = testing.run_call(case, testing.get_backend("cpu"), 0)
    assert (good.forward, good.backward) == ("pass", "pass") and testing.exit_status(good) == 0
    text = testing.format_result(good)
    assert "Functional.gelu.0.forward.output.0: pass (benchmark)  cosine=1" in text
    assert text.endswith("verdict: forward pass, backward pass")

    broken = testing.get_backend(None, f"{suite / 'backends.py'}:Doubling")        # a class: instantiated
    assert broken.name == "doubling"
    bad = testing.run_call(case, broken, 0)
    assert bad.forward == "error" and testing.exit_status(bad) == 1
    assert "verdict: forward error" in testing.format_result(bad)


def test_get_backend_errors_say_what_to_pass(suite):
    with pytest.raises(ValueError, match=r"unknown device type 'tpu'; registered: cpu, cuda, npu"):
        testing.get_backend("tpu")
    with pytest.raises(ValueError, match=r"--backend 'no_such_module:X'.*module:attribute or file.py:attribute"):
        testing.get_backend(None, "no_such_module:X")
    with pytest.raises(ValueError, match=r"has no attribute 'nothing'"):
        testing.get_backend(None, f"{suite / 'backends.py'}:nothing")
    assert testing.get_backend(None, f"{suite / 'backends.py'}:instance").name == "doubling"


def test_random_case_is_reproducible_from_the_seed(data_dir, tmp_path):
    generate(str(data_dir / "mlp_fp32_statistics_L1" / "step0" / "rank" / "dump.json"), str(tmp_path / "out"),
             random=True, seed=11, apis=["softmax"])
    case = testing.load_case(tmp_path / "out" / "msprobe_data", "Tensor.softmax.0")
    cpu = testing.get_backend("cpu")
    runs = [testing.run_call(case, cpu, 0, random=True, seed=11) for _ in range(2)]
    assert runs[0].data_mode == "random_data" and runs[0].seed == 11
    first, second = ([(r.name, r.status, dict(r.metrics)) for r in run.details] for run in runs)
    assert first == second and first


def test_reproduction_script_runs_without_pytest(suite, tmp_path):
    generate(str(suite / "out" / "msprobe_data" / "dump.json"), str(tmp_path / "s"), apis=["relu"],
             scripts=["Torch.relu.0"])
    script = tmp_path / "s" / "reproduce_Torch_relu_0.py"
    probe = ("import runpy, sys; sys.argv = [sys.argv[0], '--device-type', 'cpu']\n"
             "try:\n    runpy.run_path(%r, run_name='__main__')\n"
             "except SystemExit as e:\n    print('exit', e.code)\n"
             "print('pytest imported:', 'pytest' in sys.modules or '_pytest' in sys.modules)\n") % str(script)
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert "verdict: forward pass, backward pass" in res.stdout, res.stdout + res.stderr
    assert "exit 0" in res.stdout and "pytest imported: False" in res.stdout


def test_generated_files_import_the_stable_testing_path(suite, tmp_path):
    """Every suite ever generated imports ``pytest_msprobe.testing``: that path stays the runtime's face."""
    from pytest_msprobe.suite import runtime

    module = (suite / "out" / "test_msprobe.py").read_text(encoding="utf-8")
    assert "from pytest_msprobe.testing import check_call" in module
    for name in testing.__all__:
        assert getattr(testing, name) is getattr(runtime, name), name
    old = tmp_path / "old"                    # a suite file as earlier versions wrote it, run by plain pytest
    shutil.copytree(suite / "out", old)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          str(old)], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0 and "2 passed" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
