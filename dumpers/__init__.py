"""Capture side of pytest-msprobe: debuggers for PyTorch and MindSpore, grad probe, online dispatch.

Nothing here imports pytest. The on-disk dump format is defined once, in :mod:`dumpers.format`.
"""
