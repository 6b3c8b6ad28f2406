"""GPU telemetry of one rank: SM clock, power, temperature and clock-event (throttle) reasons.

`GpuSampler` is a background thread that samples one GPU with pynvml during a run's timed
window; `summarise_samples` reduces a rank's samples and `merge_telemetry` combines the ranks'
summaries into a run's row (the controller calls it). Pure data apart from the sampler.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# NVML clock-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
# Reasons that mean the GPU ran below the clocks it could otherwise sustain.
SLOWDOWN_REASONS = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    }
)


def decode_throttle_reasons(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS if mask & bit]


@dataclass(frozen=True)
class Sample:
    sm_clock_mhz: float
    power_w: float
    temperature_c: float
    reasons_mask: int


# Each summary field: the Sample attribute it summarises and how values combine (a rank's
# samples, then the ranks' summaries).
_SUMMARY: dict[str, tuple[str, Callable[[list[float]], float]]] = {
    "sm_clock_mhz_mean": ("sm_clock_mhz", lambda v: sum(v) / len(v)),
    "sm_clock_mhz_min": ("sm_clock_mhz", min),
    "power_w_mean": ("power_w", lambda v: sum(v) / len(v)),
    "power_w_max": ("power_w", max),
    "temperature_c_max": ("temperature_c", max),
}


def summarise_samples(samples: Iterable[Sample]) -> dict[str, Any]:
    """Mean/min clock, mean/max power, max temperature and every clock-event reason seen."""
    items = list(samples)
    if not items:
        return {}
    mask = functools.reduce(operator.or_, (s.reasons_mask for s in items))
    summary = {k: combine([getattr(s, a) for s in items]) for k, (a, combine) in _SUMMARY.items()}
    return {**summary, "throttle_reasons": decode_throttle_reasons(mask)}


def merge_telemetry(per_rank: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Combine ranks' summaries: mean of means, min of minimums, max of maximums, all reasons."""
    ranks = [t for t in per_rank if t]
    if not ranks:
        return {}
    merged = {k: combine([t[k] for t in ranks]) for k, (_, combine) in _SUMMARY.items()}
    return {**merged, "throttle_reasons": sorted({r for t in ranks for r in t["throttle_reasons"]})}


def nvml_handle(pynvml: Any, cuda_device: int) -> Any:
    """NVML's handle for a CUDA device: by PCI bus id, else by UUID (both survive
    CUDA_VISIBLE_DEVICES renumbering, unlike NVML's own index)."""
    import torch

    props = torch.cuda.get_device_properties(cuda_device)
    if hasattr(props, "pci_domain_id"):
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus)
    return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{props.uuid}")


def visible_nvml_handle(pynvml: Any, cuda_device: int) -> Any:
    """NVML's handle for a CUDA device of a process that enumerates CUDA devices in PCI bus
    order (CUDA_DEVICE_ORDER=PCI_BUS_ID, as NVML does; CUDA's default is fastest first: CUDA C
    Programming Guide, "CUDA Environment Variables", checked 2026-11-25), for frameworks that
    do not give a device's bus id (TensorFlow): the index through CUDA_VISIBLE_DEVICES (indices
    or GPU UUIDs), else NVML's own."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
    if not visible:
        return pynvml.nvmlDeviceGetHandleByIndex(cuda_device)
    chosen = visible[cuda_device]
    if chosen.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(chosen))
    return pynvml.nvmlDeviceGetHandleByUUID(chosen)


class GpuSampler:
    """Samples one CUDA device with pynvml every `interval_s` in a daemon thread.

    NVML numbers GPUs by PCI order and ignores CUDA_VISIBLE_DEVICES, so the device is found by
    its PCI bus id. NVML calls release the GIL (ctypes), so sampling does not slow training. On a
    machine without NVML the sampler records nothing.
    """

    def __init__(
        self,
        cuda_device: int | None,
        interval_s: float = 0.5,
        find: Callable[[Any, int], Any] = nvml_handle,
    ) -> None:
        self._device = cuda_device
        self._find = find  # NVML's handle of a CUDA device (torch's bus id by default)
        self._interval_s = interval_s
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GpuSampler:
        if self._device is None:
            return self
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = self._find(pynvml, self._device)
        except Exception as exc:  # no NVML or no matching device: sample nothing, say so
            print(f"bench: GPU telemetry disabled: {exc}", file=sys.stderr)
            return self
        reasons = getattr(
            pynvml,
            "nvmlDeviceGetCurrentClocksEventReasons",
            getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
        )

        def sample_forever() -> None:
            while not self._stop.is_set():
                with contextlib.suppress(pynvml.NVMLError):
                    clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
                    power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
                    heat = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
                    mask = int(reasons(handle)) if reasons else 0
                    self._samples.append(Sample(clock, power, heat, mask))
                self._stop.wait(self._interval_s)

        self._thread = threading.Thread(target=sample_forever, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        return summarise_samples(self._samples)
