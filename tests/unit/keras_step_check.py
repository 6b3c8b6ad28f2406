"""bench.rank.keras_worker's training step must train as one plain Keras process would.

    python keras_step_check.py mirrored REPLICAS   one process, REPLICAS logical CPU devices
    python keras_step_check.py multiworker         one worker of TF_CONFIG's (1 CPU replica)
    python keras_step_check.py resnet              ResNet-50 as the worker builds it, 1 replica

The worker's strategy, synthetic input and step train for a few steps; the weights must then
equal those of a plain Keras model (same seed) that train_on_batch trained on the global batch:
every replica's synthetic batch, in worker and replica order. The distributed cases use a small
network without BatchNorm (per-replica statistics would make the results differ, as in
tests/integration/engine_check.py); ResNet-50 is checked with one replica. Prints
KERAS_STEP_CHECK_OK on success; a mismatch raises. tests/unit/test_keras_worker.py runs it.
"""

from __future__ import annotations

import hashlib
import sys
from typing import TYPE_CHECKING, Any

from bench.shared.tf_rules import synthetic_batches, worker_of
from bench.spec import NO_LOADER, HostSlots, RunSpec, Variant, Workload

if TYPE_CHECKING:
    import keras

STEPS = 3
BATCH = 2  # per replica
SEED = 5
CLASSES = 5


def spec_for(nodes: int, slots: int, image_size: int, model: str) -> RunSpec:
    workload = Workload(
        model=model,
        image_size=image_size,
        num_classes=CLASSES,
        data="synthetic",
        loader_workers=0,
        warmup_steps=0,
        timed_steps=STEPS,
        bucket_cap_mb=25.0,
        static_graph=False,
        gradient_as_bucket_view=False,
        broadcast_buffers=True,
        fp16_allreduce=False,
        device="cpu",
        seed=SEED,
        timed_seconds=0.0,
        compile_ddp_split=False,
        profile=False,
    )
    return RunSpec(
        sweep_id="check",
        run_id="check",
        launcher="tf",
        repeat=0,
        placement=tuple(HostSlots(f"node{i}", slots) for i in range(nodes)),
        variant=Variant("fp32", True, False, NO_LOADER),
        workload=workload,
        batch_per_gpu=BATCH,
        scaling="weak",
        threads_per_rank=1,
        trace_path="",
    )


def small_net(image_size: int) -> keras.Model:
    import keras

    keras.utils.set_random_seed(SEED)
    return keras.Sequential(
        [
            keras.Input((image_size, image_size, 3)),
            keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(CLASSES),
        ]
    )


def flat(model: keras.Model) -> Any:
    import numpy as np

    return np.concatenate([np.ravel(w) for w in model.get_weights()])


def main(mode: str, replicas: int = 1) -> None:
    # TensorFlow only here: the tests import spec_for where TensorFlow may be absent
    import keras
    import numpy as np

    from bench.rank import keras_worker

    index, workers = worker_of()
    resnet = mode == "resnet"
    size = 32 if resnet else 16
    spec = spec_for(workers, replicas, size, "resnet50" if resnet else "small")
    strategy, place = keras_worker.make_strategy("cpu", replicas, index, workers, 1)
    assert strategy.num_replicas_in_sync == replicas * workers, strategy.num_replicas_in_sync
    with strategy.scope():
        model = keras_worker.build_model(spec) if resnet else small_net(size)
        optimizer = keras_worker.make_optimizer("fp32")
    start = flat(model)
    step = keras_worker.make_train_step(model, optimizer, strategy, jit_compile=False)
    batches = keras_worker.synthetic_input(strategy, spec, place)
    for _ in range(STEPS):
        keras_worker.finish(strategy, step(*next(batches)))
    trained = flat(model)
    # Every worker's weights, as the sha256 of their bytes: equal digests, the same weights.
    # (ResNet-50's 25M weights as a JSON list took 15 of the check's 40 s.)
    digest = hashlib.sha256(trained.tobytes()).hexdigest()
    for worker, value in enumerate(keras_worker.Ranks(strategy, place).gather(digest)):
        assert value == digest, f"worker {worker} differs"
    if index != 0:
        return
    parts = [synthetic_batches(SEED, w, replicas, BATCH, size, CLASSES) for w in range(workers)]
    images = np.concatenate([p[0].reshape(-1, size, size, 3) for p in parts])
    labels = np.concatenate([p[1].reshape(-1) for p in parts])
    reference = keras_worker.build_model(spec) if resnet else small_net(size)
    assert np.array_equal(flat(reference), start), "the seed did not give the same weights"
    reference.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    for _ in range(STEPS):
        reference.train_on_batch(images, labels)
    expected = flat(reference)
    moved = np.abs(expected - start).max()
    difference = np.abs(trained - expected).max()
    assert moved > 1e-4, f"the reference did not train ({moved})"
    assert np.allclose(trained, expected, rtol=1e-4, atol=1e-5), difference
    print(f"KERAS_STEP_CHECK_OK replicas={strategy.num_replicas_in_sync} diff={difference:.1e}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
