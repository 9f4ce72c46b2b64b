"""grad_probe config validation, L2 column names and the CSV header per level."""
from __future__ import annotations

import json

import pytest

from dumpers.grad_probe.config import (
    GradProbeConfigError,
    csv_header,
    interval_names,
    parse_config,
    validate_bounds,
)


def cfg(**section):
    return {"task": "grad_probe", "dump_path": "./out", "rank": [], "step": [], "grad_probe": section}


def test_defaults():
    c = parse_config({"task": "grad_probe", "dump_path": "./out"})
    assert (c.grad_level, c.param_list, c.bounds, c.ranks, c.steps) == ("L1", (), (-1, 0, 1), (), ())
    assert c.wants_step(12345) and c.wants_rank(7) and c.has_direction


def test_full_config_and_ranges(tmp_path):
    raw = cfg(grad_level="L2", param_list=["0.weight"], bounds=[-0.5, 0, 1e-05])
    raw["step"] = [0, "3-5", 4]
    raw["rank"] = ["1-2"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    c = parse_config(str(path))
    assert c.steps == (0, 3, 4, 5)
    assert c.ranks == (1, 2)
    assert c.wants_step(4) and not c.wants_step(2)
    assert c.wants_rank(2) and not c.wants_rank(0)
    assert c.bounds == (-0.5, 0, 1e-05)


@pytest.mark.parametrize("bounds, message", [
    ([0, "1"], "not int or float"),
    ([True, 2], "not int or float"),
    ([-1, 2 ** 63], "out of int64 range"),
    ([float("nan")], "out of int64 range"),
    ([1, 0], "not ascending"),
    ([0, 0, 1], "not ascending"),
    ("0,1", "must be a list"),
    ([], "needs at least one bound"),
])
def test_bad_bounds(bounds, message):
    with pytest.raises(GradProbeConfigError, match=message):
        parse_config(cfg(grad_level="L2", bounds=bounds))


def test_empty_bounds_fine_below_l2():
    assert validate_bounds([], level="L1") == ()
    assert validate_bounds([-(2 ** 63), 0, 2 ** 63 - 1]) == (-(2 ** 63), 0, 2 ** 63 - 1)


@pytest.mark.parametrize("raw, message", [
    ({"task": "grad_probe"}, "'dump_path' is required"),
    ({"task": "grad_probe", "dump_path": "a b"}, "characters outside"),
    ({"task": "statistics", "dump_path": "./x"}, "needs \"task\": \"grad_probe\""),
    (cfg(grad_level="L3"), r"grad_level must be one of \['L0', 'L1', 'L2'\]"),
    (cfg(param_list="0.weight"), "param_list must be a list"),
    (cfg(levle="L1"), r"unknown key\(s\) \['levle'\]"),
    ({**cfg(), "step": [-1]}, "'step': element -1"),
    ({**cfg(), "rank": 0}, "'rank' must be a list"),
    ({**cfg(), "step": ["5-3"]}, "range"),
])
def test_bad_config(raw, message):
    with pytest.raises(GradProbeConfigError, match=message):
        parse_config(raw)


def test_interval_names_use_str_of_the_json_numbers():
    assert interval_names((-1, 0, 1)) == ["(-inf, -1]", "(-1, 0]", "(0, 1]", "(1, inf)"]
    assert interval_names((1.0, 0.01 * 2, 1e-05)) == ["(-inf, 1.0]", "(1.0, 0.02]", "(0.02, 1e-05]", "(1e-05, inf)"]
    assert interval_names((3,)) == ["(-inf, 3]", "(3, inf)"]


def test_headers_per_level():
    assert csv_header("L0") == ["param_name", "MD5", "max", "min", "norm", "shape"]
    assert csv_header("L1") == ["param_name", "max", "min", "norm", "shape"]
    assert csv_header("L2", (-1, 0, 1)) == ["param_name", "(-inf, -1]", "(-1, 0]", "(0, 1]", "(1, inf)", "=0",
                                            "max", "min", "norm", "shape"]
