"""A floors table whose floor for each figure is the mean this GPU just measured.

    python at_floor.py verify_hardware.json > at-floor.json

Judged against its own mean, every figure's interval holds its floor at first, so
verify_hardware.py keeps sampling up to --max-repeats: this shows the repeat-until-clear rule on
real, noisy samples (how many repeats a figure takes, and whether it ends inconclusive).
"""

import json
import statistics
import sys

KEYS = {"hbm_copy_gbs": "hbm_copy_gbs", "h2d_gbs": "h2d_gbs", "d2h_gbs": "d2h_gbs"}
with open(sys.argv[1]) as file:
    report = json.load(file)
gpu = report["gpus"][0]
floors = {
    f"gemm_{precision}_tflops": statistics.fmean(figure["samples"])
    for precision, figure in gpu["gemm_tflops"].items()
}
floors |= {key: statistics.fmean(gpu[key]["samples"]) for key in KEYS if key in gpu}
table = [
    {
        "model": "this GPU, floors at its own mean",
        "tokens": [],
        "floors": {
            key: {"value": value, "kind": "measured", "source": f"its own mean {value:.1f}"}
            for key, value in floors.items()
        },
    }
]
print(json.dumps(table))
