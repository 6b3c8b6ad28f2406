"""The TensorFlow rank: `python -m bench.rank.keras_worker --spec <encoded RunSpec>`.

One process per node trains Keras 3's ResNet-50 over that node's devices with
tf.distribute.MirroredStrategy; when TF_CONFIG names several workers (bench.shared.tf_rules
builds it), MultiWorkerMirroredStrategy spans the nodes and this process is the rank TF_CONFIG's
task index says. What the run may ask is checked first (tf_rules.why_not_runnable).

The loop is bench.rank.worker's: the same SGD (lr 0.01, momentum 0.9) on the mean cross-entropy
of the global batch (per-replica batch x replicas), warm-up untimed (bench.rank.timing), the
data wait timed apart from the step, every rank timing its window, and rank 0 printing every
rank's report through bench.shared.wire, so the controller reads a tf run as any other. A "rank"
here is a worker process: its report counts the images of all its replicas.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import resource
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from bench.rank import faults, timing
from bench.shared import wire
from bench.shared.folder import list_images
from bench.shared.lifeline import exit_rank
from bench.shared.loaders import MEAN, RATIO, SCALE, STD
from bench.shared.telemetry import GpuSampler, merge_telemetry, visible_nvml_handle
from bench.shared.tf_rules import (
    POLICIES,
    backend,
    synthetic_batches,
    why_not_runnable,
    worker_of,
)
from bench.spec import SYNTHETIC, RunSpec


@dataclasses.dataclass(frozen=True)
class Place:
    """Where this process runs: its worker index (its rank), the workers, its replicas."""

    index: int
    workers: int
    replicas: int
    gpu: bool
    backend: str  # how replicas reduce: nccl, ring (gRPC), one-device (in-process), none


def make_strategy(
    device: str, slots: int, index: int, workers: int, threads: int
) -> tuple[tf.distribute.Strategy, Place]:
    """The strategy over this node's `slots` devices: GPUs, or on CPU `slots` logical CPU
    devices of one process (a multi-worker CPU run has one CPU device per worker). Must run
    before TensorFlow initialises its devices."""
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    gpus = tf.config.list_physical_devices("GPU")
    gpu = device == "cuda" or (device == "auto" and bool(gpus))
    if gpu and len(gpus) < slots:
        raise RuntimeError(f"{slots} GPUs asked on {socket.gethostname()}, TensorFlow sees {gpus}")
    tf.config.set_visible_devices(gpus[:slots] if gpu else [], "GPU")
    if not gpu and workers == 1 and slots > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(slots)]
        )
    if workers > 1:
        implementation = tf.distribute.experimental.CommunicationImplementation
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=implementation.NCCL if gpu else implementation.RING
        )
        strategy: tf.distribute.Strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=options
        )
    else:
        devices = [d.name for d in tf.config.list_logical_devices("GPU" if gpu else "CPU")]
        strategy = tf.distribute.MirroredStrategy(devices)
    local = strategy.num_replicas_in_sync // workers
    return strategy, Place(index, workers, local, gpu, backend(gpu, workers, local))


def build_model(spec: RunSpec) -> keras.Model:
    """Keras' ResNet-50 from the run's seed, returning logits (torchvision's models do too)."""
    load = spec.workload
    keras.utils.set_random_seed(load.seed)
    size = load.image_size
    shape = (size, size, 3) if spec.variant.channels_last else (3, size, size)
    return keras.applications.ResNet50(
        weights=None, input_shape=shape, classes=load.num_classes, classifier_activation=None
    )


def make_optimizer(precision: str) -> keras.optimizers.Optimizer:
    """bench.rank.worker's torch SGD(lr=0.01, momentum=0.9): the same update for a constant
    rate (Keras keeps the velocity scaled by -lr); fp16 with Keras' dynamic loss scaling."""
    optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    if POLICIES[precision] == "mixed_float16":
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def make_train_step(
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    strategy: tf.distribute.Strategy,
    jit_compile: bool,
) -> Callable[[Any, Any], Any]:
    """One optimizer step over a distributed batch. Each replica's loss is its batch's mean
    divided by the replicas (Keras' losses do that under a strategy: keras/src/losses/loss.py,
    reduce_values, 3.15.1) and the optimizer sums the replicas' gradients (Keras' TensorFlow
    optimizer all-reduces in replica context): the gradient of the global batch's mean loss.
    XLA (`jit_compile`) compiles each replica's forward and backward; the all-reduce and the
    update run outside it (one XLA cluster cannot span a MirroredStrategy's devices)."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with strategy.scope():
        optimizer.build(model.trainable_variables)  # variables made before any tf.function
    variables = model.trainable_variables

    @tf.function(jit_compile=jit_compile)
    def gradients(images: tf.Tensor, labels: tf.Tensor) -> tuple[list[tf.Tensor], tf.Tensor]:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)  # loss in fp32, as AMP
            loss = loss_fn(labels, logits)
            scaled = optimizer.scale_loss(loss)
        return tape.gradient(scaled, variables), loss

    def replica_step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        grads, loss = gradients(images, labels)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    @tf.function
    def train_step(images: Any, labels: Any) -> Any:
        return strategy.run(replica_step, args=(images, labels))

    return train_step


def synthetic_input(strategy: tf.distribute.Strategy, spec: RunSpec, place: Place) -> Iterator:
    """The worker's synthetic batches (tf_rules.synthetic_batches), one per local replica,
    repeated every step."""
    load = spec.workload
    images, labels = synthetic_batches(
        load.seed,
        place.index,
        place.replicas,
        spec.batch_per_gpu,
        load.image_size,
        load.num_classes,
    )
    if not spec.variant.channels_last:
        images = images.transpose(0, 1, 4, 2, 3)

    def dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices((images, labels)).repeat()

    return iter(strategy.distribute_datasets_from_function(dataset))


def folder_input(strategy: tf.distribute.Strategy, spec: RunSpec) -> Iterator:
    """An ImageFolder (bench.shared.folder's file list and labels) through tf.data:
    each worker its shard, reshuffled every epoch; read, decode_jpeg, random resized crop
    (area 0.08-1, aspect 3/4-4/3), flip and ImageNet normalisation in parallel, prefetched."""
    load = spec.workload
    _, samples = list_images(load.data)
    paths = [path for path, _ in samples]
    labels = np.asarray([label for _, label in samples], np.int32)
    size, channels_last = load.image_size, spec.variant.channels_last

    def decode(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        begin, extent, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(image),
            bounding_boxes=tf.zeros([1, 0, 4]),
            area_range=SCALE,
            aspect_ratio_range=RATIO,
            use_image_if_no_bounding_boxes=True,
        )
        image = tf.image.resize(tf.slice(image, begin, extent), (size, size)) / 255.0
        image = (tf.image.random_flip_left_right(image) - MEAN) / STD
        return (image if channels_last else tf.transpose(image, (2, 0, 1))), label

    def dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
        data = tf.data.Dataset.from_tensor_slices((paths, labels))
        data = data.shard(context.num_input_pipelines, context.input_pipeline_id)
        data = data.shuffle(len(paths), seed=load.seed, reshuffle_each_iteration=True).repeat()
        data = data.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        return data.batch(spec.batch_per_gpu, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    return iter(strategy.distribute_datasets_from_function(dataset))


def finish(strategy: tf.distribute.Strategy, output: Any) -> None:
    """Wait until the step that produced `output` has run on every local device."""
    for value in strategy.experimental_local_results(output):
        value.numpy()


class Ranks:
    """gather and barrier over the worker processes, through the strategy's own collectives:
    each worker's JSON bytes in its row of a float32 matrix that one all-reduce sums."""

    def __init__(self, strategy: tf.distribute.Strategy, place: Place) -> None:
        self._strategy, self._place = strategy, place

    def _sum(self, array: np.ndarray) -> np.ndarray:
        first = [True]  # one local replica contributes the worker's array, the others zeros

        def value(context: tf.distribute.ValueContext) -> tf.Tensor:
            mine = array if first[0] else np.zeros_like(array)
            first[0] = False
            return tf.constant(mine)

        per_replica = self._strategy.experimental_distribute_values_from_function(value)
        total = self._strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        return np.asarray(total.numpy())

    def gather(self, obj: Any) -> list[Any]:
        """Every worker's `obj` (JSON-able), in worker order, on every worker."""
        data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
        if self._place.workers == 1:
            return [json.loads(data.tobytes())]
        index, workers = self._place.index, self._place.workers
        lengths = self._sum(np.eye(workers, dtype=np.float32)[index] * len(data)).astype(int)
        rows = np.zeros((workers, lengths.max()), np.float32)
        rows[index, : len(data)] = data
        total = self._sum(rows).astype(np.uint8)
        return [json.loads(row[:n].tobytes()) for row, n in zip(total, lengths, strict=True)]

    def barrier(self) -> None:
        self.gather(None)


def device_name(place: Place) -> str:
    if not place.gpu:
        return "cpu"
    details = tf.config.experimental.get_device_details(tf.config.get_visible_devices("GPU")[0])
    return str(details.get("device_name", "GPU"))


def peak_memory_bytes(place: Place) -> int:
    """The largest GPU's peak allocation on GPUs; the process's peak RSS on CPU."""
    if place.gpu:
        return max(
            int(tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"])
            for i in range(place.replicas)
        )
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclasses.dataclass
class Training:
    """What a worker trains with: its strategy and place, the step, its input, and the bytes of
    the gradients its step reduces."""

    strategy: tf.distribute.Strategy
    place: Place
    train_step: Callable[[Any, Any], Any]
    batches: Iterator
    gradient_bytes: int

    def one_step(self) -> None:
        finish(self.strategy, self.train_step(*next(self.batches)))

    def window(self, steps: int) -> tuple[float, list[float], float]:
        """(window seconds, per-step seconds, seconds waiting for data) of `steps` steps. Step
        boundaries are host times (on GPUs the host may run ahead by the steps TensorFlow
        queues); the window ends when the last step has finished on every device."""
        marks, data_wait, output = [time.perf_counter()], 0.0, None
        for _ in range(steps):
            before = time.perf_counter()
            images, labels = next(self.batches)
            data_wait += time.perf_counter() - before
            output = self.train_step(images, labels)
            marks.append(time.perf_counter())
        finish(self.strategy, output)
        marks[-1] = time.perf_counter()
        return marks[-1] - marks[0], [b - a for a, b in itertools.pairwise(marks)], data_wait


def set_up(spec: RunSpec, index: int, workers: int) -> Training:
    """The strategy over this node's devices, the precision and layout, the model, its
    optimizer and step, and the input."""
    load, variant = spec.workload, spec.variant
    slots = spec.placement[index].slots
    # threads_per_rank: this process's share of the node's cores (one process per node)
    strategy, place = make_strategy(load.device, slots, index, workers, spec.threads_per_rank)
    keras.mixed_precision.set_global_policy(POLICIES[variant.precision])
    tf.config.experimental.enable_tensor_float_32_execution(variant.precision == "tf32")
    layout = "channels_last" if variant.channels_last else "channels_first"
    keras.config.set_image_data_format(layout)
    with strategy.scope():
        model = build_model(spec)
        optimizer = make_optimizer(variant.precision)
    train_step = make_train_step(model, optimizer, strategy, variant.compile)
    if load.data == SYNTHETIC:
        batches = synthetic_input(strategy, spec, place)
    else:
        batches = folder_input(strategy, spec)
    variables = model.trainable_variables
    gradient_bytes = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)
    return Training(strategy, place, train_step, batches, gradient_bytes)


def measured_window(
    training: Training, ranks: Ranks, steps: int
) -> tuple[float, list[float], float, dict[str, Any]]:
    """The timed window, every worker starting together, with its GPUs' memory peaks reset and
    their telemetry sampled: (window s, step s, data wait s, telemetry summary)."""
    place = training.place
    if place.gpu:
        for i in range(place.replicas):
            tf.config.experimental.reset_memory_stats(f"GPU:{i}")
    ranks.barrier()
    samplers = [
        GpuSampler(i if place.gpu else None, find=visible_nvml_handle).start()
        for i in range(place.replicas)
    ]
    window, step_s, data_wait = training.window(steps)
    return window, step_s, data_wait, merge_telemetry([s.stop() for s in samplers])


def refusal(spec: RunSpec, workers: int) -> str | None:
    """Why this process cannot run `spec`, or None."""
    reason = why_not_runnable(spec)
    if reason is None and workers != spec.nodes:
        reason = f"TF_CONFIG names {workers} workers for a placement of {spec.nodes} nodes"
    if reason is None and keras.backend.backend() != "tensorflow":
        reason = f"Keras runs on {keras.backend.backend()} (KERAS_BACKEND), not tensorflow"
    return reason


def main(argv: list[str] | None = None) -> int:
    spec = RunSpec.from_argv(argv, __doc__)
    index, workers = worker_of()
    reason = refusal(spec, workers)
    if reason:
        raise SystemExit(f"bench.rank.keras_worker: cannot run {spec.run_id}: {reason}")
    training = set_up(spec, index, workers)
    place = training.place
    ranks = Ranks(training.strategy, place)
    compile_s, warmup_steps, timed_steps = timing.settle(  # as the torch rank's
        training.one_step,  # waits for every replica
        lambda steps: training.window(steps)[1],
        ranks.gather,
        spec.workload,
        spec.variant.compile,  # XLA compiles on the first step
    )
    faults.trigger(faults.fault_for(index))
    window, step_s, data_wait, telemetry = measured_window(training, ranks, timed_steps)
    images_per_step = spec.batch_per_gpu * place.replicas
    loader_images_per_s = None

    def next_batch() -> int:  # the images of one step's input, pulled without a step
        next(training.batches)
        return images_per_step

    if spec.workload.data != SYNTHETIC:  # the pipeline alone (no model): its ceiling
        ranks.barrier()
        loader_images_per_s = timing.loader_rate(next_batch, timed_steps)
    report = wire.RankReport(
        rank=index,
        local_rank=0,
        host=socket.gethostname(),
        device_name=device_name(place),
        window_s=window,
        step_s=step_s,
        data_wait_s=data_wait,
        peak_memory_bytes=peak_memory_bytes(place),
        telemetry=telemetry,
        compile_s=compile_s,
        warmup_steps=warmup_steps,
        loader_images_per_s=loader_images_per_s,
        runtime=wire.runtime(
            tensorflow=tf.__version__,
            keras=keras.__version__,
            tensorflow_path=os.path.dirname(tf.__file__),
        ),
        cpu_cores=len(os.sched_getaffinity(0)),
    )
    run = wire.RunReport(
        run_id=spec.run_id,
        backend=place.backend,
        world_size=workers,  # processes: images_per_rank x world_size = all images
        gradient_bytes=training.gradient_bytes,
        images_per_rank=images_per_step * timed_steps,
        timed_steps=timed_steps,
    )
    wire.send(ranks.gather, report, run, first=index == 0)
    return 0


if __name__ == "__main__":
    exit_rank(main())
