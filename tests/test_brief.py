"""The two messages of a distributed run, each one definition: the worker's brief (controller -> worker, in
``workerinput``) and the item's payload (worker -> controller, in ``user_properties``), both round trips."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from pytest_msprobe.brief import KEY, WorkerBrief
from pytest_msprobe.precision.compare import DetailRow
from pytest_msprobe.replay import CaseResult, error_result
from pytest_msprobe.settings import Settings
from pytest_msprobe.api_items import PROPERTY, ItemPayload, attach


def test_the_settings_travel_resolved_with_the_hosts_paths(tmp_path):
    s = Settings(api_info=["dumps/step0"], out_dir="out", gpu_csv="/shared/gpu.csv", result_csv="/r.csv",
                 host_paths=[("h", "/shared", "/mnt")], seed=7, white_list=["gelu"], max_bytes=123,
                 max_bytes_given=False)
    data = s.brief(lambda path: path.replace("/shared", "/mnt"))
    json.dumps(data)                                          # plain data: it crosses execnet as it is
    back = Settings.from_brief(data)
    assert back.api_info == [os.path.abspath("dumps/step0")] and back.out_dir == os.path.abspath("out")
    assert back.gpu_csv == "/mnt/gpu.csv" and back.seed == 7 and back.white_list == ["gelu"]
    assert back.result_csv is None and back.host_paths == []     # the controller's alone
    assert back.max_bytes > 123 and not back.max_bytes_given     # the worker's own share of its memory
    given = Settings.from_brief(Settings(max_bytes=5, max_bytes_given=True).brief())
    assert given.max_bytes == 5
    assert Settings.from_brief(s.brief()).api_info == ["dumps/step0"]     # a local worker: as given


def test_a_brief_round_trip_and_a_missing_dump_on_another_host(tmp_path):
    dump = tmp_path / "dump.json"
    dump.write_text("{}")
    brief = WorkerBrief(settings={"seed": 1}, done=["a"], timestamp="20250101000000", lastfailed={"x::a": True},
                        costs={"d": [3, 1]}, host="h:1", slot=1, host_workers=2, files=[[str(dump), "d/dump.json"]])
    workerinput: dict = {"workerid": "gw0"}
    brief.send(workerinput)
    assert set(workerinput) == {"workerid", KEY}
    read = WorkerBrief.read(SimpleNamespace(workerinput=json.loads(json.dumps(workerinput))))
    assert read == brief
    assert read.sent_files() == [(str(dump), "d/dump.json")]
    assert WorkerBrief.read(SimpleNamespace()) is None
    read.files = [[str(tmp_path / "gone.json"), "d/gone.json"]]
    with pytest.raises(ValueError, match="on host h:1: dump file .*gone.json does not exist.*--msprobe-host-path"):
        read.sent_files()


def _result() -> CaseResult:
    rows = [DetailRow("Functional.gelu.0.forward.output.0", "torch.float32", "torch.float32", "(2, 3)",
                      status="error", message="Relative error is greater than 0.001", standard="benchmark"),
            DetailRow("Functional.gelu.0.backward.output.0", "torch.float32", "torch.float32", "(2, 3)",
                      status="pass", standard="benchmark")]
    result = CaseResult("Functional.gelu.0", "error", "pass", None, rows, seed=3)
    result.fidelity = {rows[0].name: "exact"}
    return result


def test_an_items_payload_round_trip_through_its_report():
    payload = ItemPayload.of(_result(), fail_on="error")
    assert payload.failing and payload.worst[0] == "Functional.gelu.0.forward.output.0"
    assert payload.names == [r.name for r in _result().details] and len(payload.rows) == 2
    assert payload.fidelity == ["exact", ""] and payload.standards == [["benchmark", "error"], ["benchmark", "pass"]]
    report = SimpleNamespace(user_properties=[("other", 1)])
    attach(report, payload)
    (_, wire), = [p for p in report.user_properties if p[0] == PROPERTY]
    json.dumps(wire)
    assert "cells" not in wire                               # the cells stay where they were computed
    back = ItemPayload.from_report(SimpleNamespace(user_properties=json.loads(json.dumps(report.user_properties))))
    assert back == ItemPayload(**{**vars(payload), "cells": []})
    assert ItemPayload.from_report(SimpleNamespace(user_properties=[])) is None
    assert dict(payload.properties())["msprobe_worst"].startswith("Functional.gelu.0.forward.output.0: Relative")


def test_a_crashed_items_payload_is_one_error_row_with_the_reason():
    crash = ItemPayload.crash("Torch.relu.0", "worker 'gw1' crashed")
    expected = ItemPayload.of(error_result("Torch.relu.0", "worker 'gw1' crashed"), fail_on="error")
    assert crash.rows == expected.rows and crash.result == expected.result and crash.forward == "error"
    assert crash.failing and crash.worst == ["Torch.relu.0", "worker 'gw1' crashed"]
    assert crash.mode == "" and crash.kind == "" and crash.standards == [] and crash.seed is None
