"""verify.yml's remapped_rows check: each GPU's memory-error remapping state, read through NVML.

Run with the training environment's interpreter (python_env installs nvidia-ml-py); prints one
JSON object {"gpus": [...]} with, per GPU, its index, PCI bus id and either
- "remapped_rows": {"correctable", "uncorrectable", "pending", "failure"}, from
  nvmlDeviceGetRemappedRows (Ampere and newer: rows remapped for correctable and uncorrectable
  errors, whether a remap waits for a GPU reset, whether a remap ever failed), or
- "retired_pages": {"single_bit", "double_bit", "pending"}, from nvmlDeviceGetRetiredPages and
  nvmlDeviceGetRetiredPagesPendingStatus, on the GPUs without row remapping (where NVML answers
  NOT_SUPPORTED to the first), or
- "error": what NVML said when neither is available.
The playbook decides pass/fail from it (filter_plugins/gpurig_health.py remapped_rows). The NVML
calls and their return values are nvidia-ml-py's (pynvml 13.615.71 as installed) and NVML's API
reference (nvmlDeviceGetRemappedRows: "For Ampere or newer fully supported devices ... A reset will
be required to actually remap the row"; docs.nvidia.com/deploy/nvml-api and the cuda-python
bindings' device_get_remapped_rows page, checked 2026-11-25).
"""

import json

import pynvml


def gpu_state(index: int) -> dict:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    bus_id = pynvml.nvmlDeviceGetPciInfo(handle).busId
    state = {"index": index, "bus_id": bus_id.decode() if isinstance(bus_id, bytes) else bus_id}
    try:
        corr, unc, pending, failure = pynvml.nvmlDeviceGetRemappedRows(handle)
        state["remapped_rows"] = {
            "correctable": corr,
            "uncorrectable": unc,
            "pending": bool(pending),
            "failure": bool(failure),
        }
        return state
    except pynvml.NVMLError as error:
        if error.value != pynvml.NVML_ERROR_NOT_SUPPORTED:
            state["error"] = f"nvmlDeviceGetRemappedRows: {error}"
            return state
    try:
        causes = (
            ("single_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
            ("double_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
        )
        pages = {
            name: len(pynvml.nvmlDeviceGetRetiredPages(handle, cause)) for name, cause in causes
        }
        pending = pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
        state["retired_pages"] = {**pages, "pending": pending == pynvml.NVML_FEATURE_ENABLED}
    except pynvml.NVMLError as error:
        state["error"] = f"neither row remapping nor page retirement is readable: {error}"
    return state


pynvml.nvmlInit()
try:
    print(json.dumps({"gpus": [gpu_state(i) for i in range(pynvml.nvmlDeviceGetCount())]}))
finally:
    pynvml.nvmlShutdown()
