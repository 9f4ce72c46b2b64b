"""``pytest-msprobe generate``: selection, the written files, determinism, lint and the error messages.

No pytest run of the generated suite here (see test_generate_e2e.py): these tests only generate and read.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from pytest_msprobe import cli
from pytest_msprobe.suite.generate import generate
from pytest_msprobe.suite.plan import GenerateError, script_name
from pytest_msprobe.suite.code import literal
from pytest_msprobe.report.columns import DETAILS_HEADER

TENSOR = ("mlp_fp32_tensor_L1", "step0", "rank", "dump.json")
STATS = ("mlp_fp32_statistics_L1", "step0", "rank", "dump.json")
ACC = "mlp_fp32_tensor_L1_acc_check"
RUFF = shutil.which("ruff") or os.path.join(os.path.dirname(sys.executable), "ruff")
# ruff's defaults plus the common extras (imports, pyupgrade, pytest style, quotes, commas) at 88 columns
RUFF_ARGS = ["check", "--no-cache", "--isolated", "--line-length", "88",
             "--select", "E,W,F,B,I,UP,PT,Q,COM,SIM,RUF,N,C4,PIE,RET,ARG"]


@pytest.fixture
def dump(data_dir, tmp_path):
    """A private copy of the fp32 tensor dump (step0/rank/dump.json)."""
    src = data_dir.joinpath(*TENSOR).parent
    dst = tmp_path / "src" / "step0" / "rank"
    shutil.copytree(src, dst)
    return dst / "dump.json"


def comments(text: str) -> str:
    """The module's comment lines, stripped, with wrapped continuations (``#     ``) joined."""
    out: list = []
    for line in text.splitlines():
        if line.strip().startswith("#     ") and out:
            out[-1] += " " + line.strip()[6:]
        elif line.strip().startswith("#"):
            out.append(line.strip())
    return "\n".join(out)


def read_tree(root) -> dict:
    out = {}
    for base, _, files in os.walk(root):
        for f in files:
            path = os.path.join(base, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = fh.read()
    return out


def test_selected_calls_get_only_their_entries_and_input_files(dump, tmp_path):
    written = generate(str(dump), str(tmp_path / "out"), apis=["gelu", "Functional.linear.1"])
    data = tmp_path / "out" / "msprobe_data"
    doc = json.loads((data / "dump.json").read_text())
    assert list(doc["data"]) == ["Functional.gelu.0.forward", "Functional.linear.1.forward",
                                 "Functional.linear.1.backward", "Functional.gelu.0.backward"]   # dump order
    assert doc["dump_data_dir"] == "dump_tensor_data" and doc["task"] == "tensor"
    files = sorted(os.listdir(data / "dump_tensor_data"))
    assert files == ["Functional.gelu.0.backward.input.0.pt", "Functional.gelu.0.backward.output.0.pt",
                     "Functional.gelu.0.forward.input.0.pt", "Functional.gelu.0.forward.output.0.pt",
                     "Functional.linear.1.backward.input.0.pt", "Functional.linear.1.backward.output.0.pt",
                     "Functional.linear.1.backward.output.1.pt", "Functional.linear.1.backward.output.2.pt",
                     "Functional.linear.1.forward.input.0.pt", "Functional.linear.1.forward.input.1.pt",
                     "Functional.linear.1.forward.input.2.pt", "Functional.linear.1.forward.output.0.pt"]
    assert "test_msprobe.py" in written and all(not os.path.isabs(w) for w in written)
    manifest = json.loads((data / "generated.json").read_text())
    assert manifest["calls"] == ["Functional.gelu.0", "Functional.linear.1"]
    assert sorted(manifest["tensor_files"]) == files
    src = (dump.parent / "dump_tensor_data" / files[0]).read_bytes()
    assert (data / "dump_tensor_data" / files[0]).read_bytes() == src


def test_generated_module_reads_well_and_passes_ruff(dump, tmp_path):
    out = tmp_path / "out"
    generate(str(dump), str(out), scripts=["Functional.layer_norm.0"])
    text = (out / "test_msprobe.py").read_text()
    notes = comments(text)
    # one case per call, id = dump name, comment with API, dtypes, shapes and the standard
    assert text.count('        "Functional.') + text.count('        "Tensor.') + text.count('        "Torch.') == 15
    assert "# Functional.linear.0: linear(float32[8,16], float32[32,16], float32[32]) -> float32[8,32]\n" \
        "#   backward with grad float32[8,32]; standard 1.0.4: ulp" in notes
    assert "# Tensor.add_.0: add_(float32[32,16], float32[32,16], alpha=-0.1) -> float32[32,16]" in notes
    assert "# Functional.layer_norm.0: layer_norm(float32[8,32], [32], float32[32], float32[32], 1e-05)" in notes
    doc = " ".join(text.split('"""')[1].split())
    assert "Made with: pytest-msprobe generate .../step0/rank/dump.json -o DIR --name msprobe --script " \
        "Functional.layer_norm.0 Regenerate" in doc      # the dump's last path parts, never absolute
    assert str(tmp_path) not in text
    script = out / script_name("Functional.layer_norm.0")
    assert script.name == "reproduce_Functional_layer_norm_0.py" and "CALL = \"Functional.layer_norm.0\"" in \
        script.read_text()
    res = subprocess.run([RUFF, *RUFF_ARGS, str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_same_input_gives_byte_identical_files(dump, tmp_path, data_dir):
    csv = str(next((data_dir / ACC).glob("accuracy_checking_result_*.csv")))
    kwargs = dict(from_result=csv, statuses=["pass"], apis=["*linear*", "gelu"], scripts=["Functional.gelu.0"])
    generate(str(dump), str(tmp_path / "a"), **kwargs)
    other = tmp_path / "elsewhere" / "step0" / "rank"
    shutil.copytree(dump.parent, other)
    generate(str(other / "dump.json"), str(tmp_path / "b"), **kwargs)
    a, b = read_tree(tmp_path / "a"), read_tree(tmp_path / "b")
    # module, script, dump.json, generated.json, 10 input tensor files, 9 recorded output files
    assert a == b and len(a) == 4 + 10 + 9
    generate(str(dump), str(tmp_path / "a"), **kwargs)         # regenerate in place: no --force needed
    assert read_tree(tmp_path / "a") == a


def test_from_result_selects_by_status_and_comments_the_recorded_failure(dump, tmp_path):
    result = tmp_path / "accuracy_checking_result_20260101000000.csv"
    details = tmp_path / "accuracy_checking_details_20260101000000.csv"
    result.write_text("\ufeffAPI name,Forward Test Success,Backward Test Success,Message\r\n"
                      "Functional.linear.0,pass,pass\r\nFunctional.gelu.0,error,pass\r\n"
                      "Tensor.softmax.0,pass,Warning\r\n", encoding="utf-8")
    row = ["Functional.gelu.0.forward.output.0", "torch.float64", "torch.float32", '"(8, 32)"',
           "0.99990000000000", "0.03821882553051"] + [" "] * 15
    row += ["error", '"\nRelative error is greater than 0.001, consider as error\n"']
    header = ",".join(DETAILS_HEADER)
    details.write_text("\ufeff" + header + "\r\n" + ",".join(row) + "\r\n", encoding="utf-8")
    generate(str(dump), str(tmp_path / "out"), from_result=str(result))
    text = (tmp_path / "out" / "test_msprobe.py").read_text()
    notes = comments(text)
    assert '"Functional.gelu.0",' in text and '"Functional.linear.0",' not in text
    assert "#   checker result: forward error, backward pass" in notes
    assert "#   failed: Functional.gelu.0.forward.output.0: error: Relative error is greater than 0.001, " \
        "consider as error [cosine=0.9999, max_abs_err=0.0382188]" in notes
    generate(str(dump), str(tmp_path / "out2"), from_result=str(result), statuses="error,warning")
    text = (tmp_path / "out2" / "test_msprobe.py").read_text()
    assert '"Functional.gelu.0",' in text and '"Tensor.softmax.0",' in text and "linear" not in text


def test_random_mode_keeps_statistics_and_seed_without_tensor_files(data_dir, tmp_path):
    generate(str(data_dir.joinpath(*STATS)), str(tmp_path / "out"), random=True, seed=7, apis=["gelu"])
    data = tmp_path / "out" / "msprobe_data"
    doc = json.loads((data / "dump.json").read_text())
    assert doc["task"] == "statistics" and doc["dump_data_dir"] is None
    assert "data_name" not in (data / "dump.json").read_text()
    assert doc["data"]["Functional.gelu.0.forward"]["input_args"][0]["Max"] is not None
    assert not (data / "dump_tensor_data").exists()
    text = (tmp_path / "out" / "test_msprobe.py").read_text()
    assert "RANDOM = True" in text and "SEED = 7" in text and "(random data, seed 7)" in text


# --- errors ---------------------------------------------------------------------------------------------
def test_unknown_api_pattern_lists_close_matches(dump, tmp_path):
    with pytest.raises(GenerateError, match=r"--api 'gelux' matches no call.*close matches: gelu"):
        generate(str(dump), str(tmp_path / "out"), apis=["gelux"])
    with pytest.raises(GenerateError, match=r"close matches: Functional.linear.1, Functional.linear.0"):
        generate(str(dump), str(tmp_path / "out"), apis=["Functional.linear.7"])
    assert not (tmp_path / "out").exists()


def test_statistics_dump_needs_random(data_dir, tmp_path):
    with pytest.raises(GenerateError, match=r"has no tensor files.*use --random"):
        generate(str(data_dir.joinpath(*STATS)), str(tmp_path / "out"))


def test_missing_tensor_file_names_it_and_suggests_random(dump, tmp_path):
    os.remove(dump.parent / "dump_tensor_data" / "Functional.gelu.0.forward.input.0.pt")
    with pytest.raises(GenerateError, match=r"Functional.gelu.0.forward.input.0.pt is missing.*--random"):
        generate(str(dump), str(tmp_path / "out"), apis=["gelu"])
    generate(str(dump), str(tmp_path / "out"), apis=["relu"])       # other calls are fine


def test_output_dir_with_other_files_is_refused_unless_force(dump, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(GenerateError, match=r"holds other files \(notes.txt\).*--force"):
        generate(str(dump), str(out), apis=["gelu"])
    assert sorted(os.listdir(out)) == ["notes.txt"]
    generate(str(dump), str(out), apis=["gelu"], force=True)
    assert (out / "notes.txt").read_text() == "mine" and (out / "test_msprobe.py").exists()
    (out / "msprobe_data" / "generated.json").unlink()          # a data dir we cannot vouch for
    with pytest.raises(GenerateError, match=r"msprobe_data"):
        generate(str(dump), str(out), apis=["gelu"])


def test_bad_requests_say_what_to_pass(dump, tmp_path, data_dir):
    out = str(tmp_path / "out")
    with pytest.raises(GenerateError, match=r"--name 'my-suite' must be a Python identifier"):
        generate(str(dump), out, name="my-suite")
    with pytest.raises(GenerateError, match=r"--script 'Functional.gelu.1' is not among.*Functional.gelu.0"):
        generate(str(dump), out, apis=["gelu"], scripts=["Functional.gelu.1"])
    with pytest.raises(GenerateError, match=r"--status 'errors' is not a result status"):
        generate(str(dump), out, from_result=str(next((data_dir / ACC).glob("*result*.csv"))), statuses="errors")
    with pytest.raises(GenerateError, match=r"no API has status error.*widen --status"):
        generate(str(dump), out, from_result=str(next((data_dir / ACC).glob("*result*.csv"))))
    other = tmp_path / "accuracy_checking_result_20260101000000.csv"
    other.write_text("API name,Forward Test Success,Backward Test Success,Message\nFunctional.gelu.9,error,\n")
    with pytest.raises(GenerateError, match=r"does not hold, e.g. 'Functional.gelu.9'.*Functional.gelu.0"):
        generate(str(dump), out, from_result=str(other))
    with pytest.raises(GenerateError, match=r"does not exist"):
        generate(str(tmp_path / "nope.json"), out)


def test_hostile_names_stay_literals_and_comments(tmp_path):
    name = 'Functional.gelu"\nimport os  # \\.0'
    entry = {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0,
                             "Min": 0.0, "Mean": 0.5, "Norm": 1.0}], "input_kwargs": {}, "output": []}
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
           "data": {f"{name}.forward": entry, "Functional.gelu.0.forward": entry}}
    (tmp_path / "dump.json").write_text(json.dumps(doc))
    generate(str(tmp_path / "dump.json"), str(tmp_path / "out"), random=True)
    text = (tmp_path / "out" / "test_msprobe.py").read_text()
    compile(text, "test_msprobe.py", "exec")
    from generators.loader import load_dump
    shown = load_dump(str(tmp_path / "dump.json")).cases[0].name     # the loader's printable form of the name
    assert "\nimport os" not in text and literal(shown) in text
    res = subprocess.run([RUFF, *RUFF_ARGS, str(tmp_path / "out")], capture_output=True, text=True,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stdout


def test_cli_reports_errors_and_success(dump, tmp_path, capsys):
    assert cli.main(["generate", str(dump), "-o", str(tmp_path / "out"), "--api", "gelux"]) == 2
    assert "pytest-msprobe generate: error: --api 'gelux'" in capsys.readouterr().err
    assert cli.main(["generate", str(dump), "-o", str(tmp_path / "out"), "--api", "gelu", "--name", "gelu",
                     "--script", "Functional.gelu.0"]) == 0
    out = capsys.readouterr().out
    assert "test_gelu.py (1 call) and gelu_data/ (4 tensor files)" in out and "reproduce_Functional_gelu_0.py" in out
    assert cli.main(["generate", str(dump), "-o", str(tmp_path / "x"), "--random", "--seed", "-1"]) == 2
