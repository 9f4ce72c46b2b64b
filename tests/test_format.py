"""dumpers.format: row names of the details CSVs are built and parsed by one pair of functions."""
from __future__ import annotations

import csv
import pathlib
import re

import pytest

from dumpers import format as fmt

DATA = pathlib.Path(__file__).parent / "data"
# the grammars the report modules matched with until they used parse_row_name (the reference)
_CALL_API = re.compile(r"^(?P<call>[^.]+\.(?P<api>.+)\.\d+)\.(?P<direction>forward|backward)\.output\.\d+$")
_ANY_CALL = re.compile(r"^(?P<call>.+)\.(forward|backward)\.output\.\d+$")

NAMES = [
    "Functional.linear.0.forward.output.0", "Torch.linalg.norm.3.backward.output.12",
    "Aten.add.Tensor.7.forward.output.1", "step0/rank0::Functional.gelu.0.forward.output.0",
    "A.x.forward.output.0.forward.output.1", "foo.forward.output.0", "X.forward.output.0", ".forward.output.0",
    ".b.1.forward.output.0", "A..1.forward.output.0", "A.b.01.forward.output.007", "A.b.\u0663.forward.output.\u0663",
    "Functional.linear.0.forward.output.x", "Functional.linear.0.sideways.output.0",
    "Functional.linear.0.forward.input.0", "Functional.linear.0.forward.output.", "forward.output.0", "A.b.c", "",
]


@pytest.mark.parametrize("name", NAMES)
def test_parse_row_name_reads_what_both_report_grammars_read(name):
    parsed = fmt.parse_row_name(name)
    full, loose = _CALL_API.match(name), _ANY_CALL.match(name)
    assert (parsed.call if parsed else None) == (loose.group("call") if loose else None)
    with_api = (parsed.call, parsed.api, parsed.direction) if parsed and parsed.api is not None else None
    assert with_api == ((full.group("call"), full.group("api"), full.group("direction")) if full else None)


@pytest.mark.parametrize(("call", "direction", "i"), [("Functional.linear.0", "forward", 0),
                                                       ("Tensor.__getitem__.12", "backward", 3),
                                                       ("Torch.linalg.vector_norm.1", "forward", 10)])
def test_row_names_round_trip(call, direction, i):
    name = fmt.output_row_name(call, direction, i)
    api = call.split(".", 1)[1].rsplit(".", 1)[0]
    assert fmt.parse_row_name(name) == fmt.RowName(call, api, direction, i)


def test_every_row_of_a_real_msprobe_details_csv_parses():
    path = DATA / "mlp_fp32_tensor_L1_acc_check" / "accuracy_checking_details_20261130135251.csv"
    with open(path, encoding="utf-8-sig", newline="") as fh:
        names = [row[0] for row in list(csv.reader(fh))[1:]]
    assert names
    for name in names:
        parsed = fmt.parse_row_name(name)
        assert parsed is not None and parsed.api and fmt.output_row_name(parsed.call, parsed.direction,
                                                                         parsed.index) == name
