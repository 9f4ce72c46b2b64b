"""Repo-wide test configuration (nothing the product needs)."""
import os

pytest_plugins = ["pytester"]

# Under CI a MindSpore test that is skipped is a failure: see tests/conftest.py.
os.environ.setdefault("MSPROBE_TEST_ROOT", os.path.dirname(os.path.abspath(__file__)))
