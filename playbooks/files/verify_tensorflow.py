"""verify.yml's TensorFlow check: the GPUs TensorFlow lists, and a matrix product on each.

Run with TensorFlow's environment's interpreter (python_env_tensorflow_path); prints one JSON
object and exits 0 whenever it could report (the playbook decides pass/fail from the figures).
Arguments: the matrix size and the largest relative error accepted, as for verify_cupy.py.
"""

import json
import sys

size, tolerance = int(sys.argv[1]), float(sys.argv[2])
report = {"size": size, "tolerance": tolerance, "tensorflow": None, "error": None, "gpus": []}
try:
    import numpy
    import tensorflow as tf

    report["tensorflow"] = tf.__version__
    report["cuda_build"] = bool(tf.test.is_built_with_cuda())
    # float32 products in float32, as CuPy computes them, so the same tolerance applies:
    # "TensorFloat-32 is enabled by default" on Ampere and newer (tensorflow.org/api_docs/python/
    # tf/config/experimental/enable_tensor_float_32_execution, TF 2.21.0's page, 2026-11-25).
    tf.config.experimental.enable_tensor_float_32_execution(False)
    gpus = tf.config.list_physical_devices("GPU")
    rng = numpy.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=numpy.float32)
    b = rng.standard_normal((size, size), dtype=numpy.float32)
    reference = a.astype(numpy.float64) @ b.astype(numpy.float64)
    scale = float(numpy.abs(reference).max())
    for index, gpu in enumerate(gpus):
        with tf.device(f"/GPU:{index}"):
            product = tf.linalg.matmul(tf.constant(a), tf.constant(b))
        error = float(numpy.abs(product.numpy() - reference).max()) / scale
        report["gpus"].append(
            {
                "device": index,
                "name": gpu.name,
                # Where it ran: TensorFlow falls back to the CPU when it cannot place an op.
                "ran_on": product.device,
                "on_its_gpu": product.device.endswith(f"GPU:{index}"),
                "max_relative_error": error,
            }
        )
except Exception as exc:  # any failure is reported as data, with its type
    report["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(report))
