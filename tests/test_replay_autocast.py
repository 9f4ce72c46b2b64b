"""Autocast (AMP) dumps recorded and replayed as training ran them.

Our dumper writes each call's autocast state (``dumpers.format.AUTOCAST``) and trains bit-identically; the replay
runs the device side under that autocast and the bench from the inputs after autocast's cast, so no call SKIPs
for mixed dtypes and every replayed output has the dtype training produced (Replay Fidelity exact). msprobe 26.2's
own dumps of the same kind of step (tests/data/msprobe_26_2_autocast/, made by its make_dumps.py) have no such key:
autocast is inferred from the dtypes, and the rows say so. A planted fault in the bfloat16 GEMM kernel is flagged.
"""
from __future__ import annotations

import glob
import json
import shutil

import pytest
import torch  # imported before pytester snapshots sys.modules: torch cannot be imported twice

import generators.inputs  # noqa: F401 - the same, and keeps in-process runs fast
import pytest_msprobe.precision.compare  # noqa: F401
from dumpers import format as fmt
from dumpers.torch_dump.debugger import PrecisionDebugger
from generators.loader import load_dump
from pytest_msprobe.replay import torch_adapter
from pytest_msprobe.report import acc_csv
from tests import zoo

FIDELITY = "Replay Fidelity"

PLANTED = '''
import torch
from pytest_msprobe.devices import CpuBackend

GEMMS = {"linear", "addmm", "matmul", "mm", "bmm"}


class FaultyBf16Gemm(CpuBackend):
    """A device whose bfloat16 GEMM kernel is 5% off; its float32 kernels are right."""
    name = "faulty_bf16_gemm"

    def call(self, func, args, kwargs):
        out = func(*args, **kwargs)
        if getattr(func, "__name__", "") in GEMMS and isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16:
            out = out * 1.05
        return out


def pytest_msprobe_register_devices(registry):
    registry.register(FaultyBf16Gemm())
'''


# --- the cast table against torch's own autocast ----------------------------------------------------------------
def _gemm_inputs(api: str) -> tuple:
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)
    x3 = torch.randn(2, 4, 4)
    return {
        "mm": ((a, b), {}), "matmul": ((a, b), {}), "addmm": ((c, a, b), {}), "bmm": ((x3, x3), {}),
        "baddbmm": ((x3, x3, x3), {}), "addbmm": ((c, x3, x3), {}), "linear": ((a, b, c[0]), {}),
        "conv1d": ((torch.randn(1, 2, 8), torch.randn(3, 2, 3)), {}),
        "conv2d": ((torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)), {}),
        "prelu": ((a, torch.tensor([0.25])), {}),
        "scaled_dot_product_attention": ((x3, x3, x3), {}),
    }[api]


_FUNCS = {"linear": torch.nn.functional.linear, "conv1d": torch.nn.functional.conv1d,
          "conv2d": torch.nn.functional.conv2d, "prelu": torch.nn.functional.prelu,
          "scaled_dot_product_attention": torch.nn.functional.scaled_dot_product_attention}


@pytest.mark.parametrize("api", ["mm", "matmul", "addmm", "bmm", "baddbmm", "addbmm", "linear", "conv1d", "conv2d",
                                 "prelu", "scaled_dot_product_attention"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lowered_apis_are_what_cpu_autocast_lowers(api, dtype):
    assert torch_adapter.policy(api, "cpu") == torch_adapter.LOWER
    args, kwargs = _gemm_inputs(api)
    func = _FUNCS.get(api) or getattr(torch, api)
    with torch.autocast("cpu", dtype=dtype):
        out = func(*args, **kwargs)
    assert out.dtype == dtype
    state = torch_adapter.AutocastState("cpu", str(dtype).replace("torch.", ""))
    cast_args, _ = torch_adapter.after_cast(state, api, list(args), kwargs)
    assert all(a.dtype == dtype for a in cast_args)
    assert all(a.dtype == torch.float32 for a in args)          # the caller's tensors are left as they were
    assert torch.equal(func(*cast_args), out)                   # after the cast, the call is autocast's call


@pytest.mark.parametrize("api,args,expected", [
    ("mse_loss", (torch.randn(4).bfloat16(), torch.randn(4).bfloat16()), torch.float32),
    ("add", (torch.randn(4), torch.randn(4).bfloat16()), torch.float32),       # not listed: type promotion only
    ("relu", (torch.randn(4).bfloat16(),), torch.bfloat16),
])
def test_other_apis(api, args, expected):
    func = getattr(torch.nn.functional, api, None) or getattr(torch, api)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert func(*args).dtype == expected
    assert torch_adapter.policy(api, "cpu") == (torch_adapter.FP32 if api == "mse_loss" else None)


def _entry(out_dtype: str, **extra) -> dict:
    return {fmt.OUTPUT: [{"type": "torch.Tensor", "dtype": out_dtype, "shape": [2]}], **extra}


@pytest.mark.parametrize("api,ins,out,expected", [
    ("linear", ["float32", "float32"], "torch.bfloat16", "bfloat16"),
    ("linear", ["bfloat16", "float32"], "torch.float16", "float16"),
    ("linear", ["float32", "float32"], "torch.float32", None),           # no autocast
    ("linear", ["bfloat16", "bfloat16"], "torch.bfloat16", None),       # nothing to cast: the same call
    ("softmax", ["float16"], "torch.float32", "float16"),               # CUDA's float32 list
    ("add", ["float32", "bfloat16"], "torch.float32", None),
])
def test_inferred_only_where_the_dtypes_prove_it(api, ins, out, expected):
    args = [torch.zeros(2, dtype=getattr(torch, d)) for d in ins]
    state = torch_adapter.infer(api, _entry(out), args, {})
    assert (state.dtype if state else None) == expected
    if state:
        assert state.inferred and "inferred" in state.note


def test_recorded_state_wins_and_bad_keys_are_ignored():
    args = [torch.zeros(2), torch.zeros(2)]
    recorded = {"device_type": "cpu", "dtype": "torch.bfloat16", "enabled": True}
    case = type("Case", (), {"api": "linear", "forward": _entry("torch.bfloat16", autocast=recorded)})()
    state = torch_adapter.for_case(case, args, {})
    assert state == torch_adapter.AutocastState("cpu", "bfloat16") and state.note == ""
    for bad in ({"dtype": "torch.float32", "enabled": True, "device_type": "cpu"}, {"enabled": "yes"}, [1], "x"):
        case.forward = _entry("torch.float32", autocast=bad)
        assert torch_adapter.for_case(case, args, {}) is None


# --- the dumper ---------------------------------------------------------------------------------------------------
def amp_step(name: str, dtype: torch.dtype, dump_path=None, task="tensor", scaler: bool = False) -> tuple:
    """One step of a tests/zoo.py model, forward and loss under CPU autocast, backward and AdamW outside it."""
    PrecisionDebugger.reset()
    model, batch, loss_fn = zoo.build(name)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    grad_scaler = torch.amp.GradScaler("cpu") if scaler else None
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(dump_path)) if dump_path else None
    if debugger is not None:
        debugger.start(model)
    with torch.autocast("cpu", dtype=dtype):
        loss = loss_fn(model, batch)
    if grad_scaler is not None:
        grad_scaler.scale(loss).backward()
        grad_scaler.step(opt)
        grad_scaler.update()
    else:
        loss.backward()
        opt.step()
    if debugger is not None:
        debugger.stop()
        debugger.step()
        debugger.close()
        PrecisionDebugger.reset()
    return loss.detach(), [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("name,dtype,scaler", [("llama", torch.bfloat16, False), ("gpt2", torch.float16, True)])
def test_dumper_records_autocast_and_training_is_bit_identical(tmp_path, name, dtype, scaler):
    bare = amp_step(name, dtype, scaler=scaler)
    dumped = amp_step(name, dtype, tmp_path, task="statistics", scaler=scaler)
    assert torch.equal(bare[0], dumped[0])
    assert all(torch.equal(a, b) for a, b in zip(bare[1], dumped[1]))
    doc = json.loads((tmp_path / "step0" / "rank" / fmt.DUMP_JSON).read_text())
    state = {"device_type": "cpu", "dtype": str(dtype), "enabled": True}
    gemm = "Functional.linear.0.forward" if name == "llama" else "Torch.addmm.0.forward"
    assert doc["data"][gemm][fmt.AUTOCAST] == state
    assert doc["data"][gemm][fmt.OUTPUT][0]["dtype"] == str(dtype)
    assert list(doc["data"][gemm]) == [fmt.INPUT_ARGS, fmt.INPUT_KWARGS, fmt.OUTPUT, fmt.AUTOCAST]
    # the optimizer runs outside autocast: no key; backward entries never carry it
    optimizer_calls = [k for k in doc["data"] if k.startswith(("Tensor.addcdiv_", "Tensor.lerp_"))]
    assert optimizer_calls and all(fmt.AUTOCAST not in doc["data"][k] for k in optimizer_calls)
    assert all(fmt.AUTOCAST not in v for k, v in doc["data"].items() if k.endswith(".backward"))
    cases = load_dump(str(tmp_path / "step0" / "rank" / fmt.DUMP_JSON)).cases
    assert not [c.problem for c in cases if c.problem]


# --- the replay ---------------------------------------------------------------------------------------------------
@pytest.fixture
def project(pytester):
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(PLANTED)
    return pytester


def details(path) -> dict:
    files = glob.glob(str(path / "accuracy_checking_details_*.csv"))
    assert len(files) == 1, files
    header, rows = acc_csv.read_details_csv(files[0])
    return {r[0]: dict(zip(header, r)) for r in rows}


def check_replayed_as_recorded(rows: dict, doc: dict) -> int:
    """Every forward output of a call under autocast: the device dtype the dump recorded, Replay Fidelity exact.
    Returns how many such rows there were."""
    seen = 0
    for key, entry in doc["data"].items():
        name = fmt.parse_entry_key(key)
        if name.direction != fmt.FORWARD or not isinstance(entry.get(fmt.OUTPUT), list):
            continue
        for i, item in enumerate(entry[fmt.OUTPUT]):
            row = rows.get(fmt.output_row_name(name.api_call, fmt.FORWARD, i))
            if row is None or not isinstance(item, dict) or item.get("dtype") not in ("torch.bfloat16",
                                                                                     "torch.float16"):
                continue
            seen += 1
            assert row["DEVICE Dtype"] == item["dtype"], (key, row)
            assert row[FIDELITY] == "exact", (key, row[FIDELITY])
    return seen


def test_our_llama_dump_replays_as_it_ran(project):
    amp_step("llama", torch.bfloat16, project.path / "dump")
    dump = project.path / "dump" / "step0" / "rank"
    res = project.runpytest("--msprobe-api-info", str(dump / fmt.DUMP_JSON), "-p", "no:randomly")
    outcomes = res.parseoutcomes()
    assert outcomes.get("skipped", 0) == 0 and outcomes.get("failed", 0) == 0, res.outlines[-30:]
    doc = json.loads((dump / fmt.DUMP_JSON).read_text())
    rows = details(project.path)
    assert check_replayed_as_recorded(rows, doc) >= 15      # at least its 15 linears
    assert not any("inferred" in r["Message"] for r in rows.values())
    linear = rows["Functional.linear.0.backward.output.1"]          # the weight's gradient, as the device made it
    assert (linear["Bench Dtype"], linear["DEVICE Dtype"]) == ("torch.float32", "torch.bfloat16")

    # the planted fault in the bfloat16 GEMM kernel: every linear fails, nothing else
    for csv_file in glob.glob(str(project.path / "accuracy_checking_*.csv")):
        shutil.move(csv_file, str(project.path / "first"))
    res = project.runpytest("--msprobe-api-info", str(dump / fmt.DUMP_JSON), "-p", "no:randomly",
                            "--msprobe-device-type", "faulty_bf16_gemm")
    failed = {r.nodeid.split("::")[-1] for r in res.reprec.getreports("pytest_runtest_logreport")
              if r.when == "call" and r.failed}
    linears = {k.rsplit(".", 1)[0] for k in doc["data"] if k.startswith("Functional.linear.")}
    assert failed == linears, sorted(failed ^ linears)

    # a float32 replay of the same calls (what a replay that ignores autocast runs: the dump's dtypes made float32,
    # no autocast key): the faulty kernel never runs, every linear passes; the mixed-dtype calls SKIP
    for entry in doc["data"].values():
        entry.pop(fmt.AUTOCAST, None)
    text = json.dumps(doc).replace('"torch.bfloat16"', '"torch.float32"')
    (dump / fmt.DUMP_JSON).write_text(text)
    res = project.runpytest("--msprobe-api-info", str(dump / fmt.DUMP_JSON), "-p", "no:randomly",
                            "--msprobe-device-type", "faulty_bf16_gemm")
    outcomes = res.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("skipped", 0) > 0, res.outlines[-30:]


@pytest.mark.parametrize("extra", [[], ["--msprobe-device-type", "recorded"], ["--msprobe-random"]])
def test_modes_on_an_amp_dump_without_the_key(project, extra):
    """An older dump (the key removed): inferred, said in the rows; recorded and random-data modes too."""
    amp_step("gpt2", torch.bfloat16, project.path / "dump")
    path = project.path / "dump" / "step0" / "rank" / fmt.DUMP_JSON
    doc = json.loads(path.read_text())
    for entry in doc["data"].values():
        entry.pop(fmt.AUTOCAST, None)
    path.write_text(json.dumps(doc))
    res = project.runpytest("--msprobe-api-info", str(path), "-p", "no:randomly", *extra)
    outcomes = res.parseoutcomes()
    assert outcomes.get("skipped", 0) == 0 and outcomes.get("failed", 0) == 0, res.outlines[-30:]
    rows = details(project.path)
    addmm = rows["Torch.addmm.0.forward.output.0"]
    assert "autocast bfloat16 inferred" in addmm["Message"]
    assert addmm["DEVICE Dtype"] == "torch.bfloat16"
    if not extra:
        assert check_replayed_as_recorded(rows, doc) >= 9       # at least its 8 addmm and lm_head


@pytest.mark.parametrize("model", ["llama", "gpt2"])
def test_msprobe_autocast_dumps(project, data_dir, model):
    shutil.copytree(data_dir / "msprobe_26_2_autocast" / model, project.path / "dump")
    res = project.runpytest("--msprobe-api-info", "dump/dump.json", "-p", "no:randomly")
    outcomes = res.parseoutcomes()
    assert outcomes.get("skipped", 0) == 0 and outcomes.get("failed", 0) == 0, res.outlines[-30:]
    doc = json.loads((project.path / "dump" / fmt.DUMP_JSON).read_text())
    rows = details(project.path)
    assert check_replayed_as_recorded(rows, doc) >= 5
    gemm = "Functional.linear.0.forward.output.0" if model == "llama" else "Torch.addmm.0.forward.output.0"
    assert "inferred" in rows[gemm]["Message"]


def test_float16_autocast_dump(project):
    """float16 autocast (this CPU runs it): the same, every lowered call replayed in float16."""
    amp_step("llama", torch.float16, project.path / "dump")
    path = project.path / "dump" / "step0" / "rank" / fmt.DUMP_JSON
    res = project.runpytest("--msprobe-api-info", str(path), "-p", "no:randomly")
    outcomes = res.parseoutcomes()
    assert outcomes.get("skipped", 0) == 0 and outcomes.get("failed", 0) == 0, res.outlines[-30:]
    rows = details(project.path)
    assert check_replayed_as_recorded(rows, json.loads(path.read_text())) >= 15
    assert rows["Functional.linear.0.forward.output.0"]["DEVICE Dtype"] == "torch.float16"
