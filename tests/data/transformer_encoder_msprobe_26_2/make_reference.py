"""Write reference*.json: the entry keys msprobe writes for step.py (run by hand where msprobe is installed).

reference.json is the dump without a risk_level key (msprobe's default), reference_ALL.json and
reference_CORE.json those with "risk_level" "ALL" and "CORE".

    python make_reference.py        # needs mindstudio-probe 26.2.0 and torch importable
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

from importlib.metadata import version

here = os.path.dirname(os.path.abspath(__file__))
for level in (None, "ALL", "CORE"):
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "dump")
        subprocess.run([sys.executable, os.path.join(here, "step.py"), "msprobe", dump, *([level] if level else [])],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(glob.glob(os.path.join(dump, "step0", "*", "dump.json"))[0], encoding="utf-8") as fh:
            keys = list(json.load(fh)["data"])
    with open(os.path.join(here, f"reference{'_' + level if level else ''}.json"), "w", encoding="utf-8") as fh:
        json.dump({"msprobe": version("mindstudio-probe"), "risk_level": level, "keys": keys}, fh, indent=1)
        fh.write("\n")
