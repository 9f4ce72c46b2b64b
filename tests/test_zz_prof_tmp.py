import shutil, time, pytest, torch
import generators.inputs, pytest_msprobe.precision.compare
def test_x(pytester, data_dir):
    pytester.makeini("[pytest]\n")
    shutil.copytree(data_dir / "mlp_fp32_tensor_L1" / "step0" / "rank", pytester.path / "dump")
    for i in range(3):
        t=time.time(); r = pytester.runpytest("--msprobe-api-info", "dump/dump.json", "-q", "--durations=3"); print("RUN", time.time()-t)
        print("\n".join(r.outlines[-8:]))
