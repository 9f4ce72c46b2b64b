"""pytest hooks of pytest-msprobe: options, configuration, collection of dump files; nothing else.

Nothing heavy is imported here: torch, hypothesis and the generators load only when ``--msprobe-api-info``
is given. ``pytest_configure`` builds the run's objects (:mod:`.run`); the controller's hooks are those of
the :class:`~.controller.Controller` it registers.
"""
from __future__ import annotations

from typing import Any

import pytest

from . import hookspec
from .api_items import SESSION_KEY, is_api_item, freeze_if_many
from .settings import add_options


def pytest_addhooks(pluginmanager: Any) -> None:
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: Any) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list) -> None:
    """Before any conftest: a path option written as two arguments may have rooted the run in a dump."""
    from .isolation import check_option_form
    check_option_form(early_config)


def pytest_configure(config: Any) -> None:
    if getattr(config.option, "msprobe_compare", None):
        from .runs_compare.pytest_items import configure as configure_compare
        configure_compare(config)
    if getattr(config.option, "msprobe_api_info", None):
        from .run import configure
        configure(config)


def pytest_unconfigure(config: Any) -> None:
    if config.stash.get(SESSION_KEY, None) is not None:
        from .run import unconfigure
        unconfigure(config)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: Any) -> None:
    if session.config.stash.get(SESSION_KEY, None) is not None:
        from .run import leave_out_idle_hypothesis
        leave_out_idle_hypothesis(session.config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    """An API item's payload goes to the controller on its call report (:func:`.api_items.attach`)."""
    outcome = yield
    if call.when == "call" and is_api_item(item) and item.payload is not None:
        from .api_items import attach
        attach(outcome.get_result(), item.payload)




@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: Any) -> None:
    if session.config.stash.get(SESSION_KEY, None) is not None:
        freeze_if_many(len(session.items), session.config)   # before the terminal lists them: its collections walk them
