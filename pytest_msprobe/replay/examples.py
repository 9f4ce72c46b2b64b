"""``--msprobe-examples N``: N generated inputs of one API through Hypothesis; a failure is shrunk and reported."""
from __future__ import annotations

from typing import Any, Callable

from .result import RANDOM_DATA, CaseResult, RunOptions, case_name, exc_text, skip_result


class _ExampleFailed(AssertionError):
    pass


def run_examples(case: Any, backend: Any, device_index: int, options: RunOptions, seed: int, *,
                 run: Callable[..., CaseResult]) -> CaseResult:
    """The first failing example, shrunk (with a reproduce command), or the first example if all pass.

    ``run``: the pipeline's ``run_with_inputs``, called for every generated input."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    name = case_name(case)
    try:
        from generators.inputs import inputs_strategy
        strategy = inputs_strategy(case, edge_values=options.edge_values, max_bytes=options.max_bytes)
    except Exception as exc:  # noqa: BLE001 - spec 3.4: the API becomes SKIP with the error text
        return skip_result(name, exc_text(exc), data_mode=RANDOM_DATA, seed=seed)
    results: list = []

    @hseed(seed)
    @settings(max_examples=options.examples, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(strategy)
    def check(inputs: Any) -> None:
        r = run(case, inputs, backend, device_index, options, mode=RANDOM_DATA, seed=seed)
        results.append(r)
        if r.failing(options.fail_on):
            raise _ExampleFailed(r.name)

    try:
        check()
    except _ExampleFailed:
        final = results[-1]
        cmd = options.reproduce.format(name=name) if options.reproduce else ""
        final.note += (f"\nHypothesis found a failing input after {len(results)} runs; smallest failing "
                       f"example: {final.summary or '(no summary)'}" + (f"\nreproduce: {cmd}" if cmd else ""))
        return final
    except Exception as exc:  # noqa: BLE001 - spec 3.4: the API becomes SKIP with the error text
        return skip_result(name, exc_text(exc), data_mode=RANDOM_DATA, seed=seed)
    if not results:
        return skip_result(name, "Hypothesis produced no example", data_mode=RANDOM_DATA, seed=seed)
    first = results[0]
    first.note += f"\n{len(results)} generated examples passed"
    return first
