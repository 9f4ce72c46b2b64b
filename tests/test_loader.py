"""generators.loader: dump.json -> ApiCase, on msprobe's own dumps and on hand-made edge cases."""
from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dumpers import format as fmt
from generators.inputs import UnknownApiError, resolve_api
from generators.loader import DumpError, find_dump_files, load_dump


def write_dump(path, data, **top):
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, **top,
           "data": data}
    path.mkdir(parents=True, exist_ok=True)
    (path / "dump.json").write_text(json.dumps(doc))
    return path / "dump.json"


def t(dtype="torch.float32", shape=(2, 3), lo=-1.0, hi=1.0, **extra):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": hi, "Min": lo,
            "Mean": None, "Norm": None, "requires_grad": False, **extra}


def test_statistics_sample_cases_in_dump_order(data_dir):
    ds = load_dump(data_dir / "mlp_fp32_statistics_L1" / "step0" / "rank" / "dump.json")
    names = [c.name for c in ds.cases]
    assert names[:4] == ["Functional.linear.0", "Torch.relu.0", "Functional.layer_norm.0", "Functional.gelu.0"]
    assert names[-1] == "Tensor.add_.5" and len(names) == 15
    case = ds.by_name()["Functional.linear.0"]
    assert (case.prefix, case.api, case.index, case.framework) == ("Functional", "linear", 0, "pytorch")
    assert case.problem is None and not case.has_tensor_files and case.tensor_dir is None
    # backward paired by name: Functional.linear.0.backward.output has three items (bias grad, None, weight grad)
    assert len(case.backward["output"]) == 3 and case.backward["output"][1] is None
    assert ds.by_name()["Tensor.add_.0"].backward is None


def test_tensor_sample_uses_the_tensor_dir_beside_dump_json(data_dir):
    ds = load_dump(data_dir / "mlp_fp32_tensor_L1" / "step0")
    assert len(ds) == 15 and all(c.has_tensor_files and c.problem is None for c in ds)
    expected = (data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank" / "dump_tensor_data").resolve()
    assert {c.tensor_dir for c in ds} == {str(expected)}


def test_mix_level_excludes_module_entries_and_accounts_for_every_key(data_dir):
    path = data_dir / "mlp_fp32_statistics_mix" / "step0" / "rank" / "dump.json"
    keys = list(json.loads(path.read_text())["data"])
    ds = load_dump(path)
    assert len(ds.excluded) == sum(k.startswith("Module.") for k in keys) == 9
    covered = set(ds.excluded)
    for case in ds:
        covered |= {f"{case.name}.forward", f"{case.name}.backward"}
    assert set(keys) <= covered


def test_several_dumps_get_source_labels_only_on_clash(data_dir, tmp_path):
    ds = load_dump(data_dir / "mlp_fp32_statistics_L1")
    assert len(ds) == 30 and len(ds.sources) == 2
    assert ds.cases[0].name == "step0/rank::Functional.linear.0"
    assert ds.cases[15].name == "step1/rank::Functional.linear.0"
    assert ds.cases[0].call_name == "Functional.linear.0"
    assert len({c.name for c in ds}) == 30
    a = write_dump(tmp_path / "a", {"Torch.relu.0.forward": {"input_args": [t()], "input_kwargs": {}}})
    b = write_dump(tmp_path / "b", {"Torch.relu.1.forward": {"input_args": [t()], "input_kwargs": {}}})
    assert [c.name for c in load_dump([a, b])] == ["Torch.relu.0", "Torch.relu.1"]


def test_directory_search_uses_natural_order(tmp_path):
    for step in (10, 2, 1):
        write_dump(tmp_path / f"step{step}" / "rank0", {})
    files = find_dump_files(tmp_path)
    assert [p.split("/")[-3] for p in files] == ["step1", "step2", "step10"]


def test_msprobe_repo_fixtures_load_with_reasons(data_dir):
    ds = load_dump(data_dir / "msprobe_repo_fixtures")
    by = ds.by_name()
    assert by["npu_megatron_mindspore::Mint.cos.0"].problem is None       # MindSpore calls are replayed
    assert "Primitive" in by["npu_megatron_mindspore::Primitive.norm.RmsNorm.0"].problem
    assert "communication" in by["npu_megatron_pytorch::Distributed.all_reduce.0"].problem
    assert "torch_npu" in by["npu_megatron_pytorch::NPU.npu_fusion_attention.0"].problem
    assert by["npu_megatron_pytorch::Torch.cos.0"].problem is None
    # the run_ut dump has no "framework" key: inferred from its tensor items
    assert by["run_ut_statistics_mix::Torch.cat.8"].framework == "pytorch"
    assert by["run_ut_statistics_mix::Torch.cat.8"].problem is None
    assert all(c.problem for c in ds if c.framework == "mindspore" and c.prefix in ("Primitive", "Distributed"))


def test_direction_is_split_on_the_last_dot(tmp_path):
    # msprobe's substring parser aborts on this name (spec defect 9 #1)
    data = {"Functional.multi_head_attention_forward.0.forward": {"input_args": [t()], "input_kwargs": {}},
            "Functional.multi_head_attention_forward.0.backward": {"input": [t()], "output": [t()]},
            "Torch.linalg.vector_norm.0.forward": {"input_args": [t()], "input_kwargs": {}},
            "Aten.add.Tensor.0.forward": {"input_args": [t(), t()], "input_kwargs": {}}}
    ds = load_dump(write_dump(tmp_path, data))
    by = ds.by_name()
    mha = by["Functional.multi_head_attention_forward.0"]
    assert mha.forward is not None and mha.backward is not None
    assert by["Torch.linalg.vector_norm.0"].api == "linalg.vector_norm"
    assert by["Torch.linalg.vector_norm.0"].problem is None
    assert by["Aten.add.Tensor.0"].api == "add.Tensor" and by["Aten.add.Tensor.0"].problem is None


def test_non_tensor_arguments_are_validated(tmp_path):
    data = {
        "Torch.sum.0.forward": {"input_args": [t(), {"type": "int", "value": 1.5}], "input_kwargs": {}},
        "Torch.sum.1.forward": {"input_args": [t()], "input_kwargs": {"dtype": {"type": "torch.dtype",
                                                                                 "value": "torch.float99"}}},
        "Tensor.__getitem__.0.forward": {"input_args": [t(), [{"type": "slice", "value": [0, None, 1]},
                                                              {"type": "ellipsis", "value": "..."}]],
                                         "input_kwargs": {}},
        "Torch.sum.2.forward": {"input_args": [t(), {}], "input_kwargs": {}},
    }
    by = load_dump(write_dump(tmp_path, data)).by_name()
    assert "input_args[1].value must be an integer" in by["Torch.sum.0"].problem
    assert "torch.float99" in by["Torch.sum.1"].problem
    assert by["Tensor.__getitem__.0"].problem is None
    assert "empty object" in by["Torch.sum.2"].problem


@pytest.mark.parametrize(("prefix", "api", "expected"), [
    ("Functional", "linear", "torch.nn.functional.linear"),
    ("Torch", "linalg.vector_norm", "torch.linalg.vector_norm"),
    ("Tensor", "__add__", "torch.Tensor.__add__"),
    ("Aten", "add.Tensor", "aten.add.Tensor"),
    ("Aten", "add", "aten.add"),
    ("Aten", "_softmax.default", "aten._softmax.default"),
    ("Tensor", "set_", "torch.Tensor.set_"),
])
def test_resolve_api(prefix, api, expected):
    import torch

    func = resolve_api(prefix, api)
    x = torch.ones(3)
    if api in ("add.Tensor", "add", "__add__"):
        assert torch.equal(func(x, x), x + x)
    assert expected.split(".")[-1] in str(getattr(func, "__name__", func))


@pytest.mark.parametrize(("prefix", "api"), [
    ("Torch", "load"), ("Torch", "save"), ("Torch", "hub.load"), ("Torch", "_C._set_grad_enabled"),
    ("Tensor", "__reduce_ex__"), ("Torch", "set_default_dtype"), ("Torch", "no_such_op"),
    ("Torch", "utils.data"), ("VF", "lstm"), ("Functional", "linear;import os"), ("Aten", "a.b.c"),
    ("Torch", "nn"), ("Aten", "__reduce__"), ("Torch", "set_grad_enabled"),
])
def test_resolve_api_refuses(prefix, api):
    with pytest.raises(UnknownApiError):
        resolve_api(prefix, api)


def test_unknown_api_is_a_case_problem(tmp_path):
    data = {"Torch.load.0.forward": {"input_args": [{"type": "str", "value": "x.pt"}], "input_kwargs": {}},
            "Torch.no_such_op.0.forward": {"input_args": [t()], "input_kwargs": {}},
            "VF.lstm.0.forward": {"input_args": [t()], "input_kwargs": {}}}
    by = load_dump(write_dump(tmp_path, data)).by_name()
    assert "refused" in by["Torch.load.0"].problem
    assert "does not exist" in by["Torch.no_such_op.0"].problem
    assert "not replayable" in by["VF.lstm.0"].problem


@pytest.mark.parametrize(("text", "match"), [
    ('{"task": "statistics", "data": {"Torch.relu.0.forward": {', "not valid JSON"),
    ("[1, 2, 3]", "top level must be an object"),
    ('{"data": [1]}', "'data' must hold an object"),
    ('{"data": {}, "data": {}}', "more than once"),
    ("[" * 100000 + "]" * 100000, "too deeply"),
])
def test_unreadable_dumps_raise_dump_error(tmp_path, text, match):
    (tmp_path / "dump.json").write_text(text)
    with pytest.raises(DumpError, match=match):
        load_dump(tmp_path / "dump.json")


def test_dump_error_for_paths_and_sizes(tmp_path):
    with pytest.raises(DumpError, match="does not exist"):
        load_dump(tmp_path / "missing")
    with pytest.raises(DumpError, match="no dump.json found"):
        load_dump(tmp_path)
    path = write_dump(tmp_path / "x", {})
    with pytest.raises(DumpError, match="above the limit"):
        load_dump(path, max_json_bytes=10)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "dump.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(DumpError, match="not UTF-8"):
        load_dump(tmp_path / "bin" / "dump.json")


def test_copy_of_sample_loads_unchanged(data_dir, tmp_path):
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step1", tmp_path / "step1")
    ds = load_dump(tmp_path)
    assert len(ds) == 15 and all(c.has_tensor_files for c in ds)
    assert all(c.tensor_dir.startswith(str(tmp_path.resolve())) for c in ds)
    assert fmt.TENSOR_DIR in ds.cases[0].tensor_dir


def test_importing_the_loader_imports_no_heavy_framework():
    import subprocess
    import sys

    code = ("import sys, generators, generators.loader, generators.inputs; "
            "print(sorted(m for m in ('torch', 'hypothesis', 'pandas', 'mindspore') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_names_with_control_characters_are_escaped(tmp_path):
    data = {"Torch.re lu\n.0.forward": {"input_args": [t()], "input_kwargs": {}},
            "bad\tkey": {}}
    ds = load_dump(write_dump(tmp_path, data))
    names = [c.name for c in ds]
    assert names == ["Torch.re\\x20lu\\n.0", "bad\\tkey"]
    assert all(c.problem for c in ds)


def test_calls_whose_names_print_alike_are_not_merged_silently(tmp_path):
    from generators.loader import load_dump

    entry = {"input_args": [], "input_kwargs": {}, "output": []}
    doc = {"task": "statistics", "level": "L1", "dump_data_dir": None,
           "data": {"Torch.a b.0.forward": entry, "Torch.a\\x20b.0.forward": entry}}
    (tmp_path / "dump.json").write_text(json.dumps(doc))
    cases = load_dump(str(tmp_path / "dump.json")).cases
    assert len(cases) == 1 and "both print as" in (cases[0].problem or "")


def _fields(case) -> tuple:
    return (case.name, case.prefix, case.api, case.index, case.forward, case.backward, case.framework,
            case.dump_json, case.tensor_dir, case.problem, case.has_tensor_files, case.tensor_dir_problem,
            case.source, type(case.forward), getattr(case.forward, "duplicates", None))


@pytest.mark.parametrize("sample", ["mlp_fp32_statistics_L1", "mlp_fp32_statistics_mix", "mlp_fp32_tensor_L1",
                                    "msprobe_repo_fixtures"])
def test_entries_parsed_on_first_use_give_what_a_whole_parse_gives(data_dir, monkeypatch, sample):
    from generators import dumpjson
    files = find_dump_files(data_dir / sample)
    lean = load_dump(files)
    assert all(c._parts is None for c in lean if hasattr(c, "_parts")) and any(hasattr(c, "_parts") for c in lean)
    monkeypatch.setattr(dumpjson, "scan_object", lambda *a, **k: None)      # the whole-parse way
    whole = load_dump(files)
    assert not any(hasattr(c, "_parts") for c in whole)
    assert [_fields(c) for c in lean] == [_fields(c) for c in whole] and lean.excluded == whole.excluded


def test_a_bad_entry_is_found_when_its_case_is_asked(tmp_path):
    data = {"Torch.relu.0.forward": {"input_args": [t(dtype="torch.float33")], "input_kwargs": {}},
            "Torch.relu.1.forward": {"input_args": [t()], "input_kwargs": {}},
            "Torch.relu.1.backward": {"input": [t()], "output": [{"type": "torch.Tensor", "dtype": "x"}]}}
    first, second = load_dump(write_dump(tmp_path, data)).cases
    assert first._parts is None and second._parts is None           # nothing parsed or checked yet
    assert first.problem.startswith("Torch.relu.0.forward.input_args[0].dtype 'torch.float33' is not a known")
    assert second._parts is None
    assert second.forward == {"input_args": [t()], "input_kwargs": {}}
    assert second._checks is None                                  # parsed, not checked yet
    assert second.problem.startswith("Torch.relu.1.backward.output[0].dtype 'x' is not a known dtype")


@pytest.mark.parametrize("text", [
    '{"data": {"Torch.relu.0.forward": {"input_args": [], "input_kwargs": {}}}} x',
    '{"data": {"Torch.relu.0.forward": {"input_args": [1,], "input_kwargs": {}}}}',
    '{"data": {"Torch.relu.0.forward": {"input_args": [], "input_kwargs": {}},}}',
    '{"data": {"Torch.relu.0.forward": {"input_args": [], "input_kwargs": {"a": tru}}}}',
    '\ufeff{"data": {}}',
])
def test_text_a_lean_load_refuses_gets_the_whole_parse_error(tmp_path, text):
    from generators import dumpjson
    (tmp_path / "dump.json").write_text(text, encoding="utf-8")
    with pytest.raises(dumpjson.JSONFileError) as whole:
        dumpjson.load_file(str(tmp_path / "dump.json"))
    with pytest.raises(DumpError) as lean:
        load_dump(tmp_path / "dump.json")
    assert str(lean.value) == str(whole.value)


_ODD_KEYS = (
    '{"task": "statistics",\t"level" :"L1" ,\r\n "dump_data_dir": null, "data" : {\n'
    ' "Module.fc.Linear.forward.0": {"input_args": [], "input_kwargs": {}},\n'
    ' "Torch.relu.0.forward": {"input_args": [], "input_kwargs": {}, "output": []},\n'
    ' "Torch.a b.1.forward"  :  {"input_args": [], "input_kwargs": {}},\n'
    ' "Torch.a\\u0020b.1.backward": {"input": [], "output": []},\n'
    ' "Torch.a\\\\x20b.1.forward": {"input_args": [], "input_kwargs": {}},\n'
    ' "Torch.a\\\\x20b.1.backward": {"input": [], "output": []},\n'
    ' "Jit.f.0.forward": {"input_args": [], "input_kwargs": {}},\n'
    ' "Torch.add.01.forward": {"input_args": [], "input_kwargs": {}},\n'
    ' "Torch.add.01.backward": {"input": [], "output": []},\n'
    ' "Tensor.\\u0061dd.2.forward": {"input_args": [%s], "input_kwargs": {}},\n'
    ' "Tensor.add.2.backward":{"input": [], "output": []},\n'
    ' "Torch.relu.0.backward": {"input": [], "output": []},\n'
    ' "odd key": {}, "": {}\n'
    '}}\n')


@pytest.mark.parametrize("tensor_type", ["torch.Tensor", fmt.MINDSPORE_TENSOR_TYPE])
def test_odd_keys_spacing_and_names_load_as_a_whole_parse_loads_them(tmp_path, monkeypatch, tensor_type):
    from generators import dumpjson
    item = json.dumps(t(type=tensor_type))
    (tmp_path / "dump.json").write_text(_ODD_KEYS % item, encoding="utf-8")
    lean = load_dump(tmp_path / "dump.json")
    assert any(hasattr(c, "_parts") for c in lean)                           # the lean way was taken
    assert lean.cases[0].framework == ("mindspore" if tensor_type == fmt.MINDSPORE_TENSOR_TYPE else "pytorch")
    monkeypatch.setattr(dumpjson, "scan_object", lambda *a, **k: None)      # the whole-parse way
    whole = load_dump(tmp_path / "dump.json")
    assert [_fields(c) for c in lean] == [_fields(c) for c in whole] and lean.excluded == whole.excluded
    assert [c.name for c in lean][:3] == ["Torch.relu.0", "Torch.a\\x20b.1", "Jit.f.0"]


_PIECES = ["Torch", "Tensor", "Module", "Cell", "Jit", "add", "a b", "", "0", "1", "01", "10", "-1", "\u00b2",
           "\u0663", "forward", "backward", "forwards", "forward\n", "parameters_grad"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6))
def test_the_common_key_form_is_read_as_the_format_reads_it(pieces):
    from generators.loader import _group_calls
    key = ".".join(pieces)
    calls, excluded = _group_calls("dump.json", [(key, {})], set())
    try:
        parsed = fmt.parse_entry_key(key)
    except ValueError:
        parsed = None
    if parsed is None:
        assert not excluded and len(calls) == 1 and calls[0].problems        # an entry no grammar form fits
    elif parsed.kind in fmt.MODULE_KINDS:
        assert excluded == [key] and not calls
    else:
        (call,) = calls
        index = parsed.index if parsed.index is not None else -1
        assert (call.prefix, call.api, call.index) == (parsed.prefix, parsed.api, index)
        assert call.has_forward == (parsed.direction == fmt.FORWARD)
        assert call.has_backward == (parsed.direction == fmt.BACKWARD)
        assert bool(call.problems) == (parsed.kind == fmt.KIND_JIT)


def test_a_peek_parses_a_copy_of_a_case_and_leaves_the_case_unparsed(tmp_path):
    from generators.loader import load_dump_file
    path = write_dump(tmp_path, {
        "Torch.relu.0.forward": {"input_args": [t(shape=(4, 5))], "output": [t(shape=(4, 5))]},
        "Torch.relu.0.backward": {"input": [t(shape=(4, 5))], "output": [t(shape=(4, 5))]},
        "Torch.relu.1.forward": {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32"}],
                                 "output": []}})
    cases, _ = load_dump_file(str(path))
    views = [case.peek() for case in cases]
    assert all(case._parts is None for case in cases)          # nothing parsed is kept on the cases
    assert views[0].forward["input_args"][0]["shape"] == [4, 5] and views[0].backward["input"]
    for view, case in zip(views, cases):
        assert view is not case
        assert (view.forward, view.backward, view.problem) == (case.forward, case.backward, case.problem)
    assert cases[0].peek() is cases[0]                         # parsed by now: the case itself
