"""Plugin wiring: options and validators, config.json, cheap start-up, filter-api, formula-like names,
the GPU compare gate and Hypothesis examples in random-data mode."""
from __future__ import annotations

import argparse
import glob
import json
import shutil
import subprocess
import sys

import pytest
import torch  # noqa: F401 - before pytester snapshots sys.modules (torch cannot be imported twice)

import generators.inputs  # noqa: F401
import pytest_msprobe.precision.compare  # noqa: F401
from pytest_msprobe import settings as options
from pytest_msprobe.report import acc_csv

PLANTED = '''
from pytest_msprobe.devices import CpuBackend


class Planted(CpuBackend):
    """Wrong by 1% for gelu; with name 'threshold' only when over 40% of gelu's input is above 0.5."""
    name = "planted"

    def call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        if getattr(func, "__name__", "") == "gelu" and self.wrong(args[0]):
            out = out * 1.05
        return out

    def wrong(self, x):
        return True


class Threshold(Planted):
    name = "threshold"

    def wrong(self, x):
        return float((x > 0.5).float().mean()) > 0.4


def pytest_msprobe_register_devices(registry):
    registry.register(Planted())
    registry.register(Threshold())
'''


@pytest.fixture
def project(pytester, data_dir):
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(PLANTED)
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank", pytester.path / "dump")
    return pytester


def _rows(path) -> dict:
    files = glob.glob(str(path / "accuracy_checking_result_*.csv"))
    assert len(files) == 1, files
    return {r.name: r for r in acc_csv.read_result_csv(files[0])}


# --- validators and settings ----------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [("4GiB", 4 * 1024 ** 3), ("500MB", 500 * 10 ** 6), ("1e9", 10 ** 9),
                                            ("123", 123), ("1.5k", 1500)])
def test_size_bytes(text, expected):
    assert options.size_bytes(text) == expected


@pytest.mark.parametrize("fn, bad, hint", [
    (options.size_bytes, "lots", "like 4GiB"), (options.size_bytes, "-1GB", "positive"),
    (options.positive_float, "0", "positive number of seconds"), (options.positive_int, "x", "positive integer"),
    (options.seed_int, str(2 ** 32), "0 to 4294967295"), (options.standard_name, "2.0", "1.0.4, 26.2"),
    (options.device_ids, "a,b", "like 0,1,2"),
])
def test_validators_say_what_to_write(fn, bad, hint):
    with pytest.raises(argparse.ArgumentTypeError, match=hint):
        fn(bad)


def test_standard_name_accepts_full_version():
    assert options.standard_name("26.2.0") == "26.2" and options.api_list("linear, gelu  relu") == [
        "linear", "gelu", "relu"]


def test_config_section_both_spellings(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"task": "run_ut", "run_ut": {"white_list": ["linear"], "error_data_path": "/x"}}))
    assert options.read_config_section(str(p)) == {"white_list": ["linear"], "black_list": [],
                                                    "error_data_path": "/x"}
    p.write_text(json.dumps({"acc_check": {"black_list": "gelu"}}))
    with pytest.raises(ValueError, match="black_list must be a list of API names"):
        options.read_config_section(str(p))
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        options.read_config_section(str(p))


def test_plugin_import_is_cheap():
    code = ("import sys, pytest_msprobe.plugin; "
            "print([m for m in ('torch', 'hypothesis', 'pandas', 'mindspore', 'numpy') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


WATCH_HYPOTHESIS = '''
import sys


def pytest_unconfigure(config):
    plugin = config.pluginmanager.get_plugin("hypothesispytest")
    print("HYPOTHESIS", "hypothesis" in sys.modules, plugin is not None)
'''


def test_a_run_that_never_used_hypothesis_does_not_import_it_at_the_end(project):
    project.makeconftest(PLANTED + WATCH_HYPOTHESIS)
    res = project.runpytest_subprocess("--msprobe-api-info", "dump", "-p", "no:randomly", "-s")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*HYPOTHESIS False False*"])        # left out, never imported
    res = project.runpytest_subprocess("--msprobe-api-info", "dump", "-p", "no:randomly", "-s",
                                       "--hypothesis-show-statistics")
    res.stdout.fnmatch_lines(["*Hypothesis Statistics*", "*HYPOTHESIS True True*"])   # its summary stays


WATCH_REWRITER = '''
import json, sys
import pytest
from _pytest.assertion.rewrite import AssertionRewritingHook

HOOK = next(f for f in sys.meta_path if isinstance(f, AssertionRewritingHook))
ASKED = []
PLAIN = HOOK.find_spec


def find_spec(name, *args, **kwargs):
    ASKED.append(name)
    return PLAIN(name, *args, **kwargs)


HOOK.find_spec = find_spec
BEFORE = "torch" in sys.modules
GC_AT_TORCH = []


class WatchTorch:             # asked about torch once its import starts: is automatic collection on then?
    def find_spec(self, name, *args, **kwargs):
        if name == "torch":
            import gc
            GC_AT_TORCH.append(gc.isenabled())
        return None


sys.meta_path.insert(1, WatchTorch())


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    print("REWRITER", json.dumps({"before": BEFORE, "torch": "torch" in sys.modules, "first": sys.meta_path[0] is HOOK,
                                  "asked_torch": sum(n.partition(".")[0] == "torch" for n in ASKED),
                                  "gc_at_torch": GC_AT_TORCH, "gc_after": __import__("gc").isenabled()}))
'''


def test_the_calls_modules_are_imported_without_pytests_rewriter(project):
    """torch's thousand modules are no test files nor plugins: pytest's assertion rewriter is not asked about
    them (about 50 ms), and it is back in its place afterwards. Automatic garbage collection is paused while
    they are imported (their objects live to the end) and on again afterwards."""
    project.makeconftest(WATCH_REWRITER)
    res = project.runpytest_subprocess("--msprobe-api-info", "dump", "-p", "no:randomly", "-s")
    assert res.ret == 0, res.stdout.str()
    line = next(x for x in res.stdout.lines if x.startswith("REWRITER"))
    assert json.loads(line.split(" ", 1)[1]) == {"before": False, "torch": True, "first": True, "asked_torch": 0,
                                                 "gc_at_torch": [False], "gc_after": True}


def test_options_in_help_and_ini(pytester):
    res = pytester.runpytest("--help")
    res.stdout.fnmatch_lines(["*msprobe*", "*--msprobe-api-info=PATH*", "*--msprobe-timeout=SECONDS*",
                              "*msprobe_standard*"])


def test_ini_options_apply(project):
    project.makeini("[pytest]\nmsprobe_standard = 26.2\nmsprobe_white_list = relu\nmsprobe_seed = 7\n")
    res = project.runpytest("--msprobe-api-info", "dump/dump.json")
    res.assert_outcomes(passed=1, skipped=14)
    res.stdout.fnmatch_lines(["msprobe: device cpu*standard 26.2, seed 7*"])


# --- collection edge cases ------------------------------------------------------------------------------
def test_formula_like_names_and_filter_api(project):
    dump = project.path / "dump" / "dump.json"
    doc = json.loads(dump.read_text())
    entry = json.loads(json.dumps(doc["data"]["Torch.relu.0.forward"]))
    for arg in entry["input_args"]:
        arg.pop("data_name", None)
    doc["data"]["=HYPERLINK(evil).relu.0.forward"] = entry
    doc["data"]["Torch.relu.7.forward"] = json.loads(json.dumps(entry))
    doc["data"]["Torch.relu.8.forward"] = json.loads(json.dumps(entry))
    dump.write_text(json.dumps(doc))
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-filter-api")
    rows = _rows(project.path)
    assert len(rows) == 18
    evil = rows["=HYPERLINK(evil).relu.0"]
    assert evil.forward == "SKIP" and evil.message
    with open(glob.glob(str(project.path / "accuracy_checking_result_*.csv"))[0], encoding="utf-8-sig") as fh:
        raw = fh.read()
    assert "\n'=HYPERLINK(evil).relu.0,SKIP" in raw and "\n=HYPERLINK" not in raw   # neutralised cell
    assert rows["Torch.relu.8"].forward == "SKIP" and "same structure as Torch.relu.7" in rows["Torch.relu.8"].message
    assert rows["Torch.relu.7"].forward == "pass"          # random data for the entry without files
    res.assert_outcomes(passed=16, skipped=2)


# --- NPU-vs-GPU compare gate ----------------------------------------------------------------------------
def test_gpu_csv_compare_decides_exit_status(project):
    project.mkdir("gpu")
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-out", "gpu")
    assert res.ret == 0
    gpu_details = glob.glob(str(project.path / "gpu" / "accuracy_checking_details_*.csv"))[0]
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted",
                            "--msprobe-gpu-csv", gpu_details)
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*api_precision_compare against*1 error; this verdict decides the exit status*",
                              "*compare error: Functional.gelu.0*"])
    assert glob.glob(str(project.path / "api_precision_compare_result_*.csv"))
    # the items follow the compare: only the perturbed API fails, with the compare's reason
    res.assert_outcomes(failed=1, passed=14)
    # the reason is the item's failure text (pytest 7.4's short summary shows no reason for a text failure)
    res.stdout.fnmatch_lines(["*_ dump.json::Functional.gelu.0 _*", "NPU-vs-GPU compare: forward error*",
                              "*FAILED*Functional.gelu.0*"])


def test_gpu_csv_judges_items_by_the_compare_not_the_raw_status(project):
    """An API worse than the bench but exactly as bad as the GPU passes under --msprobe-gpu-csv."""
    project.mkdir("gpu")
    project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-out", "gpu",
                      "--msprobe-device-type", "planted")
    gpu_details = glob.glob(str(project.path / "gpu" / "accuracy_checking_details_*.csv"))[0]
    raw = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted")
    raw.assert_outcomes(failed=1, passed=14)
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "planted",
                            "--msprobe-gpu-csv", gpu_details)
    res.assert_outcomes(passed=15)
    assert res.ret == 0


# --- random data, several Hypothesis examples -------------------------------------------------------------
@pytest.mark.slow
def test_examples_find_and_shrink_input_dependent_error(pytester, data_dir):
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(PLANTED)
    shutil.copytree(data_dir / "mlp_fp32_statistics_L1" / "step0" / "rank", pytester.path / "dump")
    res = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "threshold",
                             "-k", "gelu")
    res.assert_outcomes(passed=1, deselected=14)       # one example: the input is not above the threshold
    res = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "threshold",
                             "-k", "gelu", "--msprobe-examples", "50", "--msprobe-seed", "3")
    res.assert_outcomes(failed=1, deselected=14)
    res.stdout.fnmatch_lines(["*random data, seed 3*", "*Hypothesis found a failing input*smallest failing "
                              "example: random data*args?0?: float32?8, 32?*",
                              "reproduce: pytest --msprobe-api-info *dump.json --msprobe-seed 3 -k "
                              "'Functional.gelu.0' --msprobe-device-type threshold --msprobe-examples 50"])


# --- limits -----------------------------------------------------------------------------------------------
def test_over_budget_entries_skip_with_numbers_and_junitxml(project):
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-max-bytes", "600",
                            "--junitxml", "junit.xml")
    o = res.parseoutcomes()
    assert o.get("skipped", 0) >= 1 and o.get("skipped", 0) + o.get("passed", 0) == 15
    rows = _rows(project.path)
    skipped = [r for r in rows.values() if r.forward == "SKIP"]
    assert skipped and all("over the budget of 600 bytes" in r.message for r in skipped)
    xml = (project.path / "junit.xml").read_text()
    assert xml.count("<testcase ") == 15 and 'name="Functional.linear.0"' in xml


def test_worker_limit_per_accelerator_device(project):
    project.makeconftest(PLANTED + '''

class FakeAccelerator(CpuBackend):
    name = "fakeacc"
    accelerator = True
'''.replace("def pytest_msprobe_register_devices(registry):", "def _unused(registry):") + '''

def pytest_msprobe_register_devices(registry):
    registry.register(Planted())
    registry.register(FakeAccelerator())
''')
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-device-type", "fakeacc",
                            "-n", "9")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*9 workers on 1 fakeacc device(s) is more than 8 per device*"
                              "--msprobe-max-workers-per-device*"])
