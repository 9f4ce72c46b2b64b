"""The documented problem-step rule applied to similarity series.

For any parameter, the first compared step's similarity below 0.97, or a drop of more than 0.03 from one
compared step to the next, marks that step as suspicious. The rule is empirical; it points where to look.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FIRST_STEP_MIN = 0.97      # first compared step: similarity below this is suspicious
MAX_DROP = 0.03            # any later step: a drop larger than this is suspicious
_EPS = 1e-12               # 1.0 -> 0.97 is a drop of exactly 0.03, not more (float noise aside)

RULE_FIRST = "first step similarity < 0.97"
RULE_DROP = "drop > 0.03"
ANOMALY_COLUMNS = ("step", "param_name", "similarity", "previous_similarity", "drop", "rule")


@dataclass(frozen=True)
class Anomaly:
    """One (parameter, step) that breaks the rule. ``drop`` is previous - similarity (1 - similarity at the
    first step), so anomalies sort by how much agreement was lost."""

    step: int
    param: str
    similarity: float
    previous: float | None
    drop: float
    rule: str

    def row(self) -> list:
        prev = "" if self.previous is None else repr(float(self.previous))
        return [self.step, self.param, repr(float(self.similarity)), prev, repr(round(float(self.drop), 12)),
                self.rule]


def find_anomalies(steps: Sequence[int], series: Mapping[str, Sequence[float]]) -> list[Anomaly]:
    """Every (key, step) of ``series`` (parameter -> similarity per step, NaN = not compared) that breaks the
    rule, ordered by step, then by drop (largest first)."""
    found: list[Anomaly] = []
    for key, values in series.items():
        prev: float | None = None
        for j, (step, v) in enumerate(zip(steps, values)):
            if v is None or math.isnan(v):
                continue
            if prev is None:
                if j == 0 and v < FIRST_STEP_MIN - _EPS:
                    found.append(Anomaly(step, key, v, None, 1.0 - v, RULE_FIRST))
            elif prev - v > MAX_DROP + _EPS:
                found.append(Anomaly(step, key, v, prev, prev - v, RULE_DROP))
            prev = v
    found.sort(key=lambda a: (a.step, -a.drop, a.param))
    return found


def first_suspicious_step(anomalies: Sequence[Anomaly]) -> int | None:
    """The earliest flagged step, or None."""
    return min((a.step for a in anomalies), default=None)


def by_key(anomalies: Sequence[Anomaly]) -> dict[str, list[Anomaly]]:
    out: dict[str, list[Anomaly]] = {}
    for a in anomalies:
        out.setdefault(a.param, []).append(a)
    return out


def describe(anomalies: Sequence[Anomaly], summary_key: str = "summary", top: int = 5) -> str:
    """One line for the terminal: the first suspicious step and the parameters that drop most there."""
    step = first_suspicious_step(anomalies)
    if step is None:
        return "no suspicious step (first-step similarity >= 0.97 and no drop > 0.03)"
    at = [a for a in anomalies if a.step == step and a.param != summary_key]
    if not at:
        at = [a for a in anomalies if a.step == step]
    names = ", ".join(f"{a.param} ({a.similarity:.4f}, -{a.drop:.4f})" for a in at[:top])
    more = f" and {len(at) - top} more" if len(at) > top else ""
    return f"first suspicious step {step} ({at[0].rule}): {names}{more}"
