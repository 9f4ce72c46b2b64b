"""The README demo: dump -> check (with a planted bad kernel) -> CSVs and HTML report.

    python demo/run_demo.py [--out demo_output] [--small] [--workers 2]
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(ROOT, "demo_output"), help="output directory")
    parser.add_argument("--small", action="store_true", help="one encoder layer (faster; used by the tests)")
    parser.add_argument("--workers", default="2", help="pytest-xdist workers for the check (0: none)")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    dump_path = os.path.join(out, "dump")
    csv_dir = os.path.join(out, "results")
    os.makedirs(csv_dir, exist_ok=True)
    sys.path.insert(0, ROOT)

    t0 = time.time()
    from demo.model import train_step_dumped

    print("[1/3] training one bf16 step of the demo transformer with the dumper on ...")
    loss = train_step_dumped(dump_path, layers=1 if args.small else 2)
    dump_json = os.path.join(dump_path, "step0", "rank", "dump.json")
    print(f"      loss {loss:.4f}; dump written to {dump_json} ({time.time() - t0:.1f} s)")

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    ini = os.path.join(out, "pytest.ini")          # the demo's own (empty) settings, not the repo's
    with open(ini, "w") as fh:
        fh.write("[pytest]\n")

    def check(device: str, out_dir: str, *extra: str) -> tuple:
        for old in glob.glob(os.path.join(out_dir, "*.csv")):
            os.remove(old)
        cmd = [sys.executable, "-m", "pytest", "-c", ini, "--msprobe-api-info", dump_json, "--msprobe-out", out_dir,
               "--msprobe-device-type", device, "-p", "demo.planted_backend", "-p", "no:cacheprovider",
               "-q", "--no-header", "--tb=no", "-rN", "--rootdir", out, *extra]
        if args.workers not in ("0", ""):
            cmd += ["-n", args.workers]
        proc = subprocess.run(cmd, cwd=out, env=env)
        found = sorted(glob.glob(os.path.join(out_dir, "accuracy_checking_details_*.csv")))
        return proc.returncode, (found[-1] if found else None)

    print("[2/3] checking every captured API call, device vs CPU bench in higher precision:")
    print("      (a) on the plain CPU backend, standing in for a trusted GPU run ...")
    _, gpu_details = check("cpu", os.path.join(csv_dir, "reference"))
    if gpu_details is None:
        print("the reference check wrote no CSV; see the pytest output above", file=sys.stderr)
        return 1
    print("      (b) on the 'demo-npu' backend, whose GELU kernel is planted to be inaccurate, judged "
          "against (a) by the NPU-vs-GPU compare ...")
    code, npu_details = check("demo-npu", os.path.join(csv_dir, "demo-npu"), "--msprobe-gpu-csv", gpu_details)
    if npu_details is None:
        print("the check wrote no CSV; see the pytest output above", file=sys.stderr)
        return 1
    results = [npu_details.replace("accuracy_checking_details", "accuracy_checking_result")]

    print("[3/3] writing the HTML report ...")
    from pytest_msprobe.report.html import render_report

    compare = sorted(glob.glob(os.path.join(csv_dir, "demo-npu", "api_precision_compare_result_*.csv")))
    html = render_report(results[-1], dump_dir=os.path.dirname(dump_json),
                         compare_csv=compare[-1] if compare else None,
                         out_path=os.path.join(out, "report.html"),
                         title="pytest-msprobe demo: bf16 transformer step on demo-npu")
    print()
    print(f"pytest exit status {code} (1 = an API failed the NPU-vs-GPU verdict: the planted GELU)")
    print(f"result CSV : {results[-1]}")
    print(f"details CSV: {npu_details}")
    if compare:
        print(f"NPU-vs-GPU compare: {compare[-1]}")
    print(f"HTML report: {html}")
    print(f"done in {time.time() - t0:.1f} s")
    return 0 if code in (0, 1) else code


if __name__ == "__main__":
    sys.exit(main())
