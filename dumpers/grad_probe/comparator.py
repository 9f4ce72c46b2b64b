"""GradComparator: step-by-step gradient-direction similarity between two grad_probe exports."""
from __future__ import annotations

import csv
import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dumpers.format import DIR_MODE

from .anomaly import ANOMALY_COLUMNS, Anomaly, by_key, describe, find_anomalies, first_suspicious_step
from .summary import SUMMARY_PREFIX, summary_file, write_csv

log = logging.getLogger("pytest_msprobe.grad_probe")

SIMILARITIES_CSV = "similarities.csv"
ANOMALIES_CSV = "anomalies.csv"
PICTURE_DIR = "similarities_picture"
SUMMARY_KEY = "summary"
DIRECTION_SUFFIXES = (".npy", ".pt")
_RANK_DIR = re.compile(r"^rank(\d+)\Z")
_STEP_DIR = re.compile(r"^step(\d+)\Z")
_HINT = "please dump data in same configuration (grad_level L1 or L2, same rank and step lists)"


@dataclass
class RankComparison:
    """The result of comparing one rank: similarity per parameter per step, and what the rule flags."""

    rank: int | None
    output_dir: str
    steps: list[int]
    params: list[str]
    similarities: dict[str, list[float]]          # parameter -> per step (NaN where not compared)
    summary: list[float]
    only_in_1: list[int] = field(default_factory=list)
    only_in_2: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    anomalies: list[Anomaly] = field(default_factory=list)

    @property
    def first_suspicious_step(self) -> int | None:
        return first_suspicious_step(self.anomalies)


def _numbered(path: str, pattern: re.Pattern) -> dict[int, str]:
    if not os.path.isdir(path):
        return {}
    out = {}
    for name in os.listdir(path):
        m = pattern.match(name)
        if m and os.path.isdir(os.path.join(path, name)):
            out[int(m.group(1))] = os.path.join(path, name)
    return out


def _param_order(dir1: str, dir2: str, steps: Sequence[int]) -> list[str]:
    """Parameter names from the lowest-step grad_summary CSV present in both rank directories."""
    candidates = sorted(int(n[len(SUMMARY_PREFIX):-4]) for n in os.listdir(dir1)
                        if n.startswith(SUMMARY_PREFIX) and n.endswith(".csv") and n[len(SUMMARY_PREFIX):-4].isdigit())
    preferred = [s for s in candidates if s in set(steps)] + candidates
    for step in preferred:
        f1 = os.path.join(dir1, summary_file(step))
        if os.path.isfile(os.path.join(dir2, summary_file(step))):
            with open(f1, encoding="utf-8-sig", newline="") as fh:
                rows = list(csv.reader(fh))
            if rows and rows[0] and rows[0][0].lower() == "param_name":
                return [r[0] for r in rows[1:] if r]
    raise RuntimeError(f"no matched grad_summary.csv for comparison in {dir1} and {dir2}, {_HINT}")


def _direction_files(step_dir: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in sorted(os.listdir(step_dir)):
        stem, ext = os.path.splitext(name)
        if ext in DIRECTION_SUFFIXES:
            out.setdefault(stem, os.path.join(step_dir, name))
    return out


def load_direction(path: str) -> np.ndarray:
    """A direction array from ``.npy`` (NumPy bool) or ``.pt`` (a saved torch bool tensor)."""
    if path.endswith(".pt"):
        import torch
        value = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"direction file {path} does not hold a tensor (got {type(value).__name__})")
        return value.numpy()
    return np.load(path, allow_pickle=False)


def similarity(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(elements that agree, total elements) of two bool arrays of the same shape."""
    return int(np.count_nonzero(a == b)), int(a.size)


def _ratio(same: int, total: int) -> float:
    return same / total if total else 0


def _cell(v: float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return ""
    return str(v)


class GradComparator:
    """Compares two grad_probe exports (the config's ``dump_path`` of each run)."""

    @staticmethod
    def compare_distributed(dump_path1: str, dump_path2: str, output_path: str, *, plot: bool = True,
                            verbose: bool = True) -> list[RankComparison]:
        """Compare every rank present in both exports.

        Outputs per rank: ``similarities.csv``, ``anomalies.csv`` and ``similarities_picture/{param}.png`` +
        ``summary_similarities.png``, under ``output_path/rank{N}/``; when both exports hold a single rank
        (a single-card run) there is no rank level. Ranks or steps present on one side only are reported.

        Raises:
            RuntimeError: no common rank, step or grad_summary CSV (e.g. an L0 export, which has no directions).
        """
        ranks1 = _numbered(dump_path1, _RANK_DIR)
        ranks2 = _numbered(dump_path2, _RANK_DIR)
        common = sorted(set(ranks1) & set(ranks2))
        if not common:
            raise RuntimeError(f"no matched ranks for comparison between {dump_path1} (ranks {sorted(ranks1)}) "
                               f"and {dump_path2} (ranks {sorted(ranks2)}), {_HINT}")
        one_sided = sorted(set(ranks1) ^ set(ranks2))
        if one_sided:
            msg = f"ranks present in only one export are not compared: {one_sided}"
            log.warning("grad_probe: %s", msg)
            if verbose:
                print(f"grad-compare: {msg}")
        single = len(ranks1) == 1 and len(ranks2) == 1
        results = []
        for rank in common:
            out = output_path if single else os.path.join(output_path, f"rank{rank}")
            results.append(GradComparator.compare(ranks1[rank], ranks2[rank], out, rank=rank, plot=plot,
                                                  verbose=verbose))
        return results

    @staticmethod
    def compare(dir1: str, dir2: str, output_path: str, *, rank: int | None = None, plot: bool = True,
                verbose: bool = True) -> RankComparison:
        """Compare two rank directories (``.../rank{N}``) and write the results into ``output_path``."""
        steps1 = _numbered(dir1, _STEP_DIR)
        steps2 = _numbered(dir2, _STEP_DIR)
        steps = sorted(set(steps1) & set(steps2))
        if not steps:
            raise RuntimeError(f"no matched steps for comparison between {dir1} and {dir2} (no step{{N}} "
                               f"directory with direction files in both), {_HINT}")
        params = _param_order(dir1, dir2, steps)
        sims: dict[str, list[float]] = {p: [] for p in params}
        summary: list[float] = []
        problems: list[str] = []
        for step in steps:
            files1 = _direction_files(steps1[step])
            files2 = _direction_files(steps2[step])
            same_sum = total_sum = 0
            for p in params:
                f1, f2 = files1.get(p), files2.get(p)
                if f1 is None or f2 is None:
                    sims[p].append(float("nan"))
                    if (f1 is None) != (f2 is None):
                        problems.append(f"step {step}: direction file of {p!r} only in "
                                        f"{steps1[step] if f1 else steps2[step]}")
                    continue
                a, b = load_direction(f1), load_direction(f2)
                if a.shape != b.shape:
                    raise RuntimeError(f"tensor shape is not equal: {f1} {a.shape}, {f2} {b.shape}")
                for f, arr in ((f1, a), (f2, b)):
                    if arr.dtype != np.bool_:
                        raise TypeError(f"tensor type is not bool: {f} ({arr.dtype})")
                same, total = similarity(a, b)
                sims[p].append(_ratio(same, total))
                same_sum += same
                total_sum += total
            summary.append(_ratio(same_sum, total_sum))
        only1 = sorted(set(steps1) - set(steps2))
        only2 = sorted(set(steps2) - set(steps1))
        result = RankComparison(rank, output_path, steps, params, sims, summary, only1, only2, problems)
        series = dict(sims)
        series[SUMMARY_KEY] = summary
        result.anomalies = find_anomalies(steps, series)
        _write_outputs(result, series, plot)
        _report(result, verbose)
        return result


def _write_outputs(result: RankComparison, series: dict[str, list[float]], plot: bool) -> None:
    out = result.output_dir
    os.makedirs(out, mode=DIR_MODE, exist_ok=True)
    csv_path = os.path.join(out, SIMILARITIES_CSV)
    if os.path.exists(csv_path):
        log.warning("grad_probe: the file in %s will be recovered", csv_path)
        os.remove(csv_path)
    write_csv(csv_path, ["step", *result.steps], [[k, *(_cell(v) for v in vals)] for k, vals in series.items()])
    write_csv(os.path.join(out, ANOMALIES_CSV), ANOMALY_COLUMNS, [a.row() for a in result.anomalies])
    if not plot:
        return
    from .plots import plot_similarity
    pic = os.path.join(out, PICTURE_DIR)
    os.makedirs(pic, mode=DIR_MODE, exist_ok=True)
    flagged = by_key(result.anomalies)
    first = result.first_suspicious_step
    for key, vals in series.items():
        name = f"{SUMMARY_KEY}_similarities.png" if key == SUMMARY_KEY else f"{key}.png"
        plot_similarity(os.path.join(pic, name), key, result.steps, vals, flagged.get(key, ()), first)


def _report(result: RankComparison, verbose: bool) -> None:
    where = "" if result.rank is None else f"rank{result.rank}: "
    lines = []
    if result.only_in_1 or result.only_in_2:
        lines.append(f"{where}steps in only one export, not compared: first {result.only_in_1}, "
                     f"second {result.only_in_2}")
    for p in result.problems:
        lines.append(f"{where}{p}")
    lines.append(f"{where}{describe(result.anomalies, SUMMARY_KEY)}")
    for line in lines[:-1]:
        log.warning("grad_probe: %s", line)
    log.info("grad_probe: %s", lines[-1])
    if verbose:
        for line in lines:
            print(f"grad-compare: {line}")
