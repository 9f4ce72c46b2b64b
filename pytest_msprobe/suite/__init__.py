"""Committed regression suites: the generator (``pytest-msprobe generate``) and the runtime its files import.

:mod:`.plan` checks a request and chooses the calls, :mod:`.code` makes the Python text, :mod:`.generate`
writes the suite, :mod:`.runtime` is what the generated files run (imported by them as
``pytest_msprobe.testing``).
"""
