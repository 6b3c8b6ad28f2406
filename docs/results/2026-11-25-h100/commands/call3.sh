# Call 3: the profiler's kernel table (fixed), Horovod installed by the horovod role from its wheel
# cache (built in call 2), verify.yml's verdicts, the nvjpeg loader (one-buffer batches) at the
# default knobs, the default sweep's third launches (--resume), and the harness against a plain
# loop (benchmarks/overhead.py) at the same knobs.
source .gpu/lib.sh
PACK=call3
install_ansible > "$L/install_ansible.log" 2>&1; stamp "ansible installed rc=$?"
mkdir -p /var/cache/gpurig && cat .gpu/hvdcache.tar.part-* | tar xf - -C /var/cache/gpurig
(cd .gpu && exec $PY -m http.server -b 127.0.0.1 8765 > "$L/http.log" 2>&1) &
( jpeg_folder /tmp/jpeg 12800 > "$L/jpeg.log" 2>&1; stamp "jpeg folder done" ) &
( .gpu/ap.sh .gpu/roles.yml > "$L/roles.log" 2>&1; stamp "roles done rc=$?" ) &
wait_for() { local n=0; while ! grep -q "$1" "$L/timeline.txt" && (( n < $2 )); do sleep 2; n=$((n+2)); done; }
B="$PY -m bench.scaling --gpus 1 --no-progress --timeout 240"
step profile 80 $B --launchers ddp --compile off --profile --timed-seconds 0 --warmup-steps 10 --steps 30 --repeats 1 --no-probe --out $R/profile
wait_for "roles done" 120
step hvd_checkbuild 30 /opt/torch/.venv/bin/horovodrun --check-build
step verify 90 .gpu/ap.sh playbooks/verify.yml -e @.gpu/verify-vars.yml
cp -r /tmp/gpuw/verify "$R/" 2>/dev/null
wait_for "jpeg folder done" 30
step nvjpeg 130 $B --launchers ddp --data /tmp/jpeg --loader nvjpeg --workers 8 --repeats 1 --timed-seconds 8 --no-probe --out $R/nvjpeg
mkdir -p $R/speed && cp -r .gpu/speed/* $R/speed/
step speed_resume 120 $PY -m bench.scaling --resume $R/speed/$(ls .gpu/speed) --no-progress
step overhead 130 $PY benchmarks/overhead.py --device cuda --launcher ddp --ranks 1 --rounds 1 --model resnet50 --image-size 224 --batch-size 256 --precision amp-bf16 --memory-format channels_last --compile on --steps 100 --warmup 30
stamp "done"; pack call3
