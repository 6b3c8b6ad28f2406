"""What the TensorFlow rank (bench.rank.keras_worker) can run and how it is started, without
importing TensorFlow: the controller may ask before launch, and a launcher builds TF_CONFIG here.

One process per node drives that node's devices with tf.distribute.MirroredStrategy; with more
than one node, TF_CONFIG names every node's worker and MultiWorkerMirroredStrategy spans them.
A placement slot is one replica (a GPU; on CPU a logical CPU device of a one-node run), so the
per-GPU batch is the per-replica batch and the global batch is per-replica x replicas, as for
DDP.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

import numpy as np

from bench.shared.loaders import TF_DATA
from bench.spec import NO_LOADER, SYNTHETIC, RunSpec

TF_CONFIG_VAR = "TF_CONFIG"
# The spec's precisions as Keras dtype policies (keras.mixed_precision.set_global_policy; the
# Keras mixed precision API pages, checked 2026-11-25). tf32 and fp32 both keep float32; they
# differ in TensorFloat-32 matmuls/convolutions on Ampere and later, which TensorFlow enables by
# default (tf.config.experimental.enable_tensor_float_32_execution, v2.21.0 API page, checked
# 2026-11-25).
POLICIES = {
    "fp32": "float32",
    "tf32": "float32",
    "amp-bf16": "mixed_bfloat16",
    "amp-fp16": "mixed_float16",
}
MODEL = "resnet50"  # keras.applications.ResNet50(weights=None): the one model this rank trains
# keras/src/applications/resnet.py (3.15.1) checks input_shape with min_size=32 (read 2026-11-25)
MIN_IMAGE_SIZE = 32
# The input pipeline of --data DIR under tf: tf.data reads, decodes (decode_jpeg) and augments.
TF_DATA_LOADER = TF_DATA.name


def why_not_runnable(spec: RunSpec) -> str | None:
    """Why the TensorFlow rank cannot run `spec` as asked, or None when it can."""
    variant, load = spec.variant, spec.workload
    if variant.precision not in POLICIES:
        return f"precision {variant.precision!r} has no Keras dtype policy here"
    if load.model != MODEL:
        return f"the tf launcher trains keras.applications.ResNet50 only (asked: {load.model})"
    if load.image_size < MIN_IMAGE_SIZE:
        return f"keras.applications.ResNet50 takes images of {MIN_IMAGE_SIZE} px or more"
    if variant.grad_accum > 1:
        return "gradient accumulation is not implemented for tf (one allreduce per micro-batch)"
    if variant.activation_checkpointing:
        return "activation checkpointing uses torch.utils.checkpoint; Keras has no counterpart here"
    if load.fp16_allreduce:
        return "tf.distribute's collectives have no fp16 gradient compression"
    if spec.trace_path:
        return "--profile traces with torch.profiler; a tf run records no trace"
    if variant.cpu_affinity:
        return "--cpu-affinity pins a process per GPU; the tf rank drives all of a node's GPUs"
    if load.data == SYNTHETIC and variant.loader != NO_LOADER:
        return f"synthetic data takes no loader (asked: {variant.loader})"
    if load.data != SYNTHETIC and variant.loader != TF_DATA_LOADER:
        return f"tf reads --data through tf.data only (--loader {TF_DATA_LOADER})"
    slots = {h.slots for h in spec.placement}
    if len(slots) > 1:
        # tensorflow/python/distribute/collective_all_reduce_strategy.py (2.21.0, read
        # 2026-11-25): "It assumes all workers have the same number of GPUs."
        return "MultiWorkerMirroredStrategy needs the same number of devices on every node"
    if spec.nodes > 1 and load.device == "cpu" and max(slots) > 1:
        # Same file: without GPUs a worker has exactly one local device (CPU:0).
        return "MultiWorkerMirroredStrategy drives one CPU device per worker: 1 slot per node"
    return None


def backend(gpu: bool, nodes: int, replicas_per_node: int) -> str:
    """How the replicas' gradients are reduced: across nodes MultiWorkerMirroredStrategy's
    collectives (NCCL on GPUs, gRPC ring on CPU: bench.rank.keras_worker picks them); on one
    node MirroredStrategy's default (NcclAllReduce on GPUs, ReductionToOneDevice when any
    device is not a GPU: select_cross_device_ops in tensorflow/python/distribute/
    cross_device_ops.py of the 2.21.0 wheel, read 2026-11-25); "none" for one replica."""
    if nodes > 1:
        return "nccl" if gpu else "ring"
    if replicas_per_node == 1:
        return "none"
    return "nccl" if gpu else "one-device"


def tf_config(hosts: Sequence[str], port: int, index: int) -> str:
    """TF_CONFIG for worker `index` of one worker per host, each listening on `port`: the
    layout tf.distribute.cluster_resolver.TFConfigClusterResolver reads (its API page for
    v2.21.0, checked 2026-11-25). Several workers on one host need their own ports: give the
    host as "host:port" and `port` is not appended."""
    workers = [h if ":" in h else f"{h}:{port}" for h in hosts]
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def worker_of(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """(this process's worker index, workers) from TF_CONFIG; (0, 1) without it."""
    text = environ.get(TF_CONFIG_VAR, "")
    if not text:
        return 0, 1
    config = json.loads(text)
    workers = config.get("cluster", {}).get("worker", [])
    task = config.get("task", {})
    if task.get("type") != "worker" or not workers:
        raise ValueError(f"{TF_CONFIG_VAR}: expected a worker task of a 'worker' cluster: {text}")
    return int(task["index"]), len(workers)


def synthetic_batches(
    seed: int, worker: int, replicas: int, batch: int, image_size: int, num_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """One worker's synthetic input: images [replicas, batch, H, W, 3] (channels last) and
    labels [replicas, batch], made once from the run's seed and the worker's index and reused
    every step. Replica r of the worker trains on item r."""
    generator = np.random.default_rng(seed + worker)
    images = generator.standard_normal((replicas, batch, image_size, image_size, 3), np.float32)
    labels = generator.integers(0, num_classes, (replicas, batch), dtype=np.int32)
    return images, labels
