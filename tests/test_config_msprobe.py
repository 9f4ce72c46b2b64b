"""msprobe's own config.json files drive the dumper and the checker; every documented key is known."""
from __future__ import annotations

import json
import os
import shutil
import warnings

import pytest
import torch

from dumpers import config_keys as keys
from dumpers.config import ConfigError, ConfigWarning, checker_section, parse_config
from pytest_msprobe import PrecisionDebugger
from pytest_msprobe import settings

PACKAGED = ("config_26.json", "config_1x.json")


@pytest.fixture(autouse=True)
def fresh_debugger():
    PrecisionDebugger.reset()
    yield
    PrecisionDebugger.reset()


def packaged(data_dir, name, tmp_path, **changes):
    raw = json.loads((data_dir / "msprobe_config" / name).read_text())
    raw.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return str(path), raw


@pytest.mark.parametrize("name", PACKAGED)
def test_packaged_config_drives_the_debugger_without_a_warning(data_dir, tmp_path, name):
    path, _ = packaged(data_dir, name, tmp_path, dump_path=str(tmp_path / "dump"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        dbg = PrecisionDebugger(config_path=path)
    dbg.start()
    torch.relu(torch.ones(3)) * 2
    dbg.stop()
    dbg.step()
    data = json.loads((tmp_path / "dump" / "step0" / "rank" / "dump.json").read_text())["data"]
    assert sorted(data) == ["Tensor.__mul__.0.forward", "Torch.relu.0.forward"]


@pytest.mark.parametrize("name", PACKAGED)
def test_packaged_config_drives_the_checker_option(data_dir, tmp_path, name):
    path, _ = packaged(data_dir, name, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        assert settings.read_config_section(path) == {"white_list": [], "black_list": [], "error_data_path": "./"}


def test_checker_reads_acc_check_before_run_ut_and_says_so(tmp_path):
    raw = {"acc_check": {"white_list": ["gelu"]}, "run_ut": {"white_list": ["relu"]}}
    with pytest.warns(ConfigWarning, match="'run_ut' section is ignored") as seen:
        assert checker_section(raw, "c.json")["white_list"] == ["gelu"]
    assert len(seen) == 1
    assert checker_section({"run_ut": {"black_list": ["relu"]}}, "c.json")["black_list"] == ["relu"]


def test_checker_online_keys_warn_and_unknown_keys_suggest():
    with pytest.warns(ConfigWarning) as seen:
        checker_section({"run_ut": {"is_online": True, "host": "10.0.0.1", "port": -1, "rank_list": [0]}}, "c.json")
    messages = [str(w.message) for w in seen]
    assert len(messages) == 2 and "'run_ut.is_online' = True is ignored" in messages[0]
    assert "'run_ut.host'" in messages[1] and "online run_ut" in messages[1]
    with pytest.raises(ValueError, match=r"'acc_check.white_lst'.*did you mean 'white_list'"):
        checker_section({"acc_check": {"white_lst": []}}, "c.json")


def _loud_value(name, key):
    """A value of ``key`` under which msprobe would do something this project does not."""
    if key.quiet:
        q = key.quiet[0]
        return {bool: not q, str: "high" if q == "low" else ("CORE" if q == "ALL" else "x/y"), int: 7,
                list: ["relu"]}.get(type(q), "x")
    return {"seed": 5, "dump_enable": True}.get(name, "x")


IGNORED_TOP = [name for name, key in keys.TOP_LEVEL.items() if key.kind == keys.IGNORED]
IGNORED_SECTION = [(task, name) for task in keys.DUMP_TASKS for name, key in keys.SECTIONS[task].items()
                   if key.kind == keys.IGNORED]


@pytest.mark.parametrize("name", IGNORED_TOP)
def test_each_ignored_top_level_key_warns_once(name):
    value = _loud_value(name, keys.TOP_LEVEL[name])
    with pytest.warns(ConfigWarning) as seen:
        parse_config({"dump_path": "d", name: value}, source="cfg.json")
    assert len(seen) == 1
    text = str(seen[0].message)
    assert f"'{name}' = {value!r} is ignored" in text and "msprobe" in text and "cfg.json" in text
    with warnings.catch_warnings():                       # the value msprobe itself treats as "off" is quiet
        warnings.simplefilter("error", ConfigWarning)
        for quiet in keys.TOP_LEVEL[name].quiet:
            parse_config({"dump_path": "d", name: quiet})


@pytest.mark.parametrize("task, name", IGNORED_SECTION)
def test_each_ignored_section_key_warns_once(task, name):
    value = _loud_value(name, keys.SECTIONS[task][name])
    with pytest.warns(ConfigWarning) as seen:
        parse_config({"dump_path": "d", "task": task, task: {name: value}}, source="cfg.json")
    assert len(seen) == 1 and f"'{task}.{name}' = {value!r} is ignored" in str(seen[0].message)


def test_sections_of_other_tasks_are_not_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        parse_config({"dump_path": "d", "task": "statistics", "tensor": {"bench_path": "./b", "nfs_path": "/n"}})


@pytest.mark.parametrize("task", list(keys.INERT_TASKS))
def test_documented_tasks_not_run_here_warn_once_and_dump_nothing(task, tmp_path):
    with pytest.warns(ConfigWarning, match=f"task '{task}' is ignored: msprobe ") as seen:
        dbg = PrecisionDebugger(dump_path=str(tmp_path / "d"), task=task, level="L2")
    assert len(seen) == 1
    dbg.start()
    torch.relu(torch.ones(2))
    dbg.stop()
    dbg.step()
    assert not os.path.exists(tmp_path / "d")


@pytest.mark.parametrize("raw, key, suggestion", [
    ({"async_dmp": True}, "async_dmp", "async_dump"),
    ({"extra_inf": True}, "extra_inf", "extra_info"),
    ({"statistics": {"sumary_mode": "md5"}}, "statistics.sumary_mode", "summary_mode"),
    ({"tensor": {"file_fromat": "npy"}}, "tensor.file_fromat", "file_format"),
    ({"acc_chek": {}}, "acc_chek", "acc_check"),
    ({"task": "statistic"}, "task", "statistics"),
])
def test_unknown_keys_are_errors_with_the_nearest_key(raw, key, suggestion):
    with pytest.raises(ConfigError) as info:
        parse_config({"dump_path": "d", **raw}, source="cfg.json")
    assert f"'{key}'" in str(info.value) and f"did you mean '{suggestion}'" in str(info.value)


def _offered(message):
    return json.loads(message.split("use one of ", 1)[1].split("]", 1)[0].replace("'", '"') + "]")


@pytest.mark.parametrize("framework", ["pytorch", "mindspore"])
def test_level_error_offers_only_levels_that_are_accepted(framework, tmp_path):
    with pytest.raises(ConfigError) as info:
        parse_config({"dump_path": str(tmp_path), "level": "L9"}, framework=framework)
    offered = _offered(str(info.value))
    assert offered == list(keys.LEVELS[framework]) and ("L2" in offered) == (framework == "mindspore")
    for level in offered:
        assert parse_config({"dump_path": str(tmp_path), "level": level}, framework=framework).level == level
    with pytest.raises(ConfigError, match=r"'L2' is msprobe's kernel dump.*not available for pytorch"):
        parse_config({"dump_path": "d", "level": "L2"})
    with pytest.raises(ConfigError, match="'debug' is msprobe 26.x's single-point saving"):
        parse_config({"dump_path": "d", "level": "debug"}, framework=framework)


def test_pytorch_debugger_accepts_every_level_it_offers(tmp_path):
    with pytest.raises(ConfigError) as info:
        PrecisionDebugger(dump_path=str(tmp_path), level="L9")
    for level in _offered(str(info.value)):
        PrecisionDebugger.reset()
        PrecisionDebugger(dump_path=str(tmp_path / level), level=level)


def test_task_error_offers_only_tasks_that_run(tmp_path):
    with pytest.raises(ConfigError) as info:
        parse_config({"dump_path": "d", "task": "dump"})
    offered = _offered(str(info.value))
    assert offered == ["statistics", "tensor", "grad_probe"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        for task in offered:
            assert parse_config({"dump_path": "d", "task": task}).task == task


def test_summary_mode_xor_falls_back_to_statistics_with_a_warning():
    with pytest.warns(ConfigWarning, match="'statistics.summary_mode' = 'xor' is ignored"):
        cfg = parse_config({"dump_path": "d", "statistics": {"summary_mode": "xor"}})
    assert cfg.summary_mode == "statistics"


def test_seed_key_warns_and_leaves_the_random_state_alone(tmp_path):
    path = tmp_path / "seed.json"
    path.write_text(json.dumps({"dump_path": str(tmp_path / "d"), "seed": 77}))
    torch.manual_seed(99)
    expected = torch.rand(4)
    torch.manual_seed(99)
    with pytest.warns(ConfigWarning, match="'seed' = 77 is ignored.*seed_all"):
        PrecisionDebugger(config_path=str(path))
    assert torch.equal(torch.rand(4), expected)


def test_the_debugger_warns_once_per_key_at_construction(data_dir, tmp_path):
    path, _ = packaged(data_dir, "config_26.json", tmp_path, dump_path=str(tmp_path / "d"), async_dump=True,
                       precision="high")
    with pytest.warns(ConfigWarning) as seen:
        PrecisionDebugger(config_path=path)
    assert sorted(str(w.message).split("'")[1] for w in seen) == ["async_dump", "precision"]


def test_migration_guide_lists_every_documented_key():
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "docs" / "migration.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    missing = [name for name in keys.TOP_LEVEL if not any(f"`{name}`" in row.split("|")[1] for row in rows)]
    for task, section in keys.SECTIONS.items():
        task_rows = [row.split("|")[1] for row in rows if row.startswith(f"| `{task}.")]
        missing += [f"{task}.{name}" for name in section if not any(f".{name}`" in row for row in task_rows)]
    missing += [task for task in keys.ALL_TASKS if f"`{task}`" not in text]
    assert not missing, f"docs/migration.md does not say what happens to: {missing}"


def test_packaged_config_drives_a_real_checker_run(data_dir, pytester):
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank", pytester.path / "dump")
    shutil.copy(data_dir / "msprobe_config" / "config_26.json", pytester.path / "config.json")
    pytester.makeini("[pytest]\n")
    res = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "--msprobe-config", "config.json",
                             "-p", "no:randomly", "-W", "error::dumpers.config.ConfigWarning")
    res.assert_outcomes(passed=15)
