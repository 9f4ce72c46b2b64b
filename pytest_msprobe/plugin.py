"""pytest hooks of pytest-msprobe (placeholder until the checker lands)."""
