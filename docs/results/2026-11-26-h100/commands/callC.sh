# Call C (2026-11-26): the nvjpeg loader with its producer thread at the default knobs; whether a
# GPU JPEG decode waits for the training stream (decode_sync_probe.py); the compiled step's
# profile; which DDP knob gives DDP's gain and the moonshot's last candidates (step_variants.py);
# the harness against a plain loop under Horovod (overhead.py).
source .gpu/lib.sh
PACK=callC
DEADLINE=555
wait_for() { local n=0; while ! grep -q "$1" "$L/timeline.txt" && (( n < $2 )); do sleep 2; n=$((n+2)); done; }
stamp "versions"; versions > "$L/versions.txt" 2>&1
( $PY -m pip install -q --no-index --no-deps --no-compile .gpu/nvimg/*.whl > "$L/nvimg-install.log" 2>&1
  mkdir -p /var/cache/gpurig && cat .gpu/hvd/hvdcache.tar.part-* | tar xf - -C /var/cache/gpurig
  $PY -m pip install -q --no-index --find-links .gpu/hvd /var/cache/gpurig/horovod-wheels/*/horovod-*.whl > "$L/hvd-install.log" 2>&1
  stamp "installs done rc=$?" ) &
( nice -n 10 bash -c "source .gpu/lib.sh; jpeg_folder /tmp/jpeg 12800" > "$L/jpeg.log" 2>&1; stamp "jpeg folder done" ) &
wait_for "jpeg folder done" 60
B="$PY -m bench.scaling --gpus 1 --no-progress --no-probe"
step nvjpeg 130 $B --launchers ddp --data /tmp/jpeg --loader nvjpeg --workers 8 --repeats 1 --timed-seconds 8 --timeout 125 --out $R/nvjpeg
step decode_probe 60 $PY .gpu/decode_sync_probe.py /tmp/jpeg
step profile 70 $B --launchers ddp --profile --timed-seconds 0 --warmup-steps 20 --steps 30 --repeats 1 --timeout 65 --out $R/profile
step variants 190 $PY benchmarks/step_variants.py --limit 60 --windows 2 --variants base,ddp-view,ddp-nobcast,graphs-b384
wait_for "installs done" 10
step overhead_horovod 110 $PY benchmarks/overhead.py --device cuda --launcher horovod --ranks 1 --rounds 1 --model resnet50 --image-size 224 --batch-size 256 --precision amp-bf16 --memory-format channels_last --compile on --steps 100 --warmup 30
stamp "done"; pack callC
