"""dumpers.config: config.json loading, validation and precedence."""
from __future__ import annotations

import json

import pytest

from dumpers.config import ConfigError, load_config, parse_config, parse_int_list


def write(tmp_path, obj, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return str(path)


def test_default_config_is_statistics_l1():
    cfg = load_config()
    assert (cfg.task, cfg.level, cfg.dump_path) == ("statistics", "L1", "./dump_path")
    assert cfg.data_mode == ["all"] and cfg.summary_mode == "statistics" and cfg.rank == [] and cfg.step == []


def test_file_values_and_section(tmp_path):
    path = write(tmp_path, {"task": "tensor", "dump_path": "./out", "level": "mix", "rank": [1, "3-4"],
                            "step": ["0-2", 2], "tensor": {"scope": [], "list": ["relu"], "data_mode": ["forward"],
                                                           "file_format": "npy"}})
    cfg = load_config(path)
    assert (cfg.task, cfg.level, cfg.dump_path) == ("tensor", "mix", "./out")
    assert cfg.rank == [1, 3, 4] and cfg.step == [0, 1, 2]
    assert cfg.api_list == ["relu"] and cfg.data_mode == ["forward"]
    assert cfg.section()["list"] == ["relu"]


def test_arguments_override_file(tmp_path):
    path = write(tmp_path, {"task": "statistics", "dump_path": "./a", "level": "L1", "step": [5],
                            "tensor": {"summary_mode": "md5"}})
    cfg = load_config(path, task="tensor", dump_path="./b", level="L0", step=[1])
    assert (cfg.task, cfg.dump_path, cfg.level, cfg.step) == ("tensor", "./b", "L0", [1])
    assert cfg.summary_mode == "md5"          # the section of the effective task is the one read


@pytest.mark.parametrize("raw, key", [
    ({"task": "dump", "dump_path": "x"}, "task"),
    ({"level": "L3", "dump_path": "x"}, "level"),
    ({"dump_path": 3}, "dump_path"),
    ({"dump_path": "has space"}, "dump_path"),
    ({"dump_path": "x", "rank": 0}, "rank"),
    ({"dump_path": "x", "step": [-1]}, "step"),
    ({"dump_path": "x", "step": [True]}, "step"),
    ({"dump_path": "x", "step": ["5-2"]}, "step"),
    ({"dump_path": "x", "step": ["7"]}, "step"),
    ({"dump_path": "x", "step": [2_000_000]}, "step"),
    ({"dump_path": "x", "statistics": {"summary_mode": "sha"}}, "summary_mode"),
    ({"dump_path": "x", "statistics": {"data_mode": ["fwd"]}}, "data_mode"),
    ({"dump_path": "x", "statistics": {"scope": ["a", "b", "c"]}}, "scope"),
    ({"dump_path": "x", "statistics": {"scope": ["Module.a.A.forward.0", "Functional.relu.0.forward"]}}, "scope"),
    ({"dump_path": "x", "statistics": {"list": [1]}}, "list"),
    ({"dump_path": "x", "statistics": {"lst": []}}, "statistics.lst"),
    ({"dump_path": "x", "dump_pth": "y"}, "dump_pth"),
    ({"dump_path": "x", "task": "tensor", "tensor": {"file_format": "pt"}}, "file_format"),
    ({"dump_path": "x", "seed": -3}, "seed"),
    ({"level": "L1"}, "dump_path"),
])
def test_invalid_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as info:
        parse_config(raw, source="cfg.json")
    assert key in str(info.value) and "cfg.json" in str(info.value)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match=".json"):
        load_config(write(tmp_path, {}, "config.yaml"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(str(bad))


def test_mindspore_rules():
    cfg = parse_config({"dump_path": "rel/dir"}, framework="mindspore")
    assert cfg.dump_path.startswith("/") and cfg.data_mode == ["all"]
    with pytest.raises(ConfigError, match="one element"):
        parse_config({"dump_path": "x", "statistics": {"data_mode": ["input", "output"]}}, framework="mindspore")
    with pytest.raises(ConfigError, match="data_mode"):
        parse_config({"dump_path": "x", "statistics": {"data_mode": ["forward"]}}, framework="mindspore")
    cfg = parse_config({"dump_path": "x", "statistics": {"scope": ["Cell.a.A.forward.0"]}}, framework="mindspore")
    assert cfg.scope == ["Cell.a.A.forward.0"]
    with pytest.raises(ConfigError, match="framework"):
        parse_config({"dump_path": "x"}, framework="jax")


def test_parse_int_list_sorts_and_dedups():
    assert parse_int_list([3, "1-2", 2, 0]) == [0, 1, 2, 3]
    assert parse_int_list(None) == [] and parse_int_list([]) == []


def test_grad_probe_section_is_not_validated_here():
    cfg = parse_config({"task": "grad_probe", "dump_path": "x", "grad_probe": {"grad_level": "L9"}})
    assert cfg.task == "grad_probe" and cfg.section() == {"grad_level": "L9"}
    assert cfg.to_dict()["grad_probe"] == {"grad_level": "L9"}
