"""verify.yml's CuPy check: a matrix product on every GPU, compared with NumPy's.

Run with the training environment's interpreter; prints one JSON object and exits 0 whenever it
could report (the playbook decides pass/fail from the figures). Arguments: the matrix size and the
largest relative error accepted.
"""

import json
import sys
import time

size, tolerance = int(sys.argv[1]), float(sys.argv[2])
report = {"size": size, "tolerance": tolerance, "cupy": None, "error": None, "gpus": []}
try:
    import cupy
    import numpy

    report["cupy"] = cupy.__version__
    report["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    report["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    rng = numpy.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=numpy.float32)
    b = rng.standard_normal((size, size), dtype=numpy.float32)
    # The reference in float64 on the CPU; the GPU computes in float32 (CuPy uses no TF32 unless
    # CUPY_TF32=1), so the error is the float32 rounding of a length-`size` dot product.
    reference = a.astype(numpy.float64) @ b.astype(numpy.float64)
    scale = float(numpy.abs(reference).max())
    for device in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(device):
            name = cupy.cuda.runtime.getDeviceProperties(device)["name"].decode()
            a_gpu, b_gpu = cupy.asarray(a), cupy.asarray(b)
            product = a_gpu @ b_gpu
            cupy.cuda.Device(device).synchronize()
            error = float(numpy.abs(cupy.asnumpy(product) - reference).max()) / scale
            # Throughput of the same product, for the record only (not a pass criterion).
            repeats = 10
            start = time.perf_counter()
            for _ in range(repeats):
                a_gpu @ b_gpu
            cupy.cuda.Device(device).synchronize()
            seconds = (time.perf_counter() - start) / repeats
            report["gpus"].append(
                {
                    "device": device,
                    "name": name,
                    "max_relative_error": error,
                    "tflops_fp32": round(2 * size**3 / seconds / 1e12, 2),
                }
            )
except Exception as exc:  # any failure is reported as data, with its type
    report["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(report))
