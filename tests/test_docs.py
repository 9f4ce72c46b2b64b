"""The docs stay true: the option reference matches the code, links resolve, the index lists every page."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_options_reference_is_generated_from_the_code():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_options_doc.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_every_msprobe_option_is_documented_in_accuracy_check():
    text = (DOCS / "options.md").read_text()
    options = set(re.findall(r"`(--msprobe-[a-z-]+)`", text))
    assert len(options) > 15
    guide = (DOCS / "accuracy-check.md").read_text() + (DOCS / "random-data.md").read_text() \
        + (DOCS / "api-precision-compare.md").read_text()
    missing = sorted(o for o in options if o not in guide)
    assert not missing, f"options without a word in the guides: {missing}"


def test_relative_links_resolve():
    broken = []
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_index_lists_every_page():
    index = (DOCS / "index.md").read_text()
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    missing = sorted(p for p in pages if f"({p})" not in index)
    assert not missing, f"pages not in docs/index.md: {missing}"


def test_every_environment_variable_the_code_reads_is_in_the_reference():
    """An ``MSPROBE_*`` variable read through os.environ anywhere in the packages has its row in docs/options.md."""
    read = set()
    for package in ("pytest_msprobe", "dumpers", "generators"):
        for path in (ROOT / package).rglob("*.py"):
            read |= set(re.findall(r"environ(?:\.get)?\(\s*[\"'](MSPROBE_[A-Z0-9_]+)", path.read_text()))
            read |= set(re.findall(r"environ\[\s*[\"'](MSPROBE_[A-Z0-9_]+)", path.read_text()))
    assert read, "no variable found: the pattern no longer matches how the code reads them"
    reference = (ROOT / "docs" / "options.md").read_text()
    missing = sorted(name for name in read if f"| `{name}` |" not in reference)
    assert not missing, f"add them to ENVIRONMENT in scripts/gen_options_doc.py: {missing}"
