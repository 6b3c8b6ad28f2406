# Call 2: Horovod with NCCL by the horovod role (CMake 4 fix), nccl-tests by its role, where the
# nvjpeg loader's time goes, raw nvidia-smi output for fixtures, then on a quiet machine the
# default configuration at 1 GPU with DDP and Horovod, 3 launches each.
source .gpu/lib.sh
PACK=call2
install_ansible > "$L/install_ansible.log" 2>&1; stamp "ansible installed rc=$?"
(cd .gpu && exec $PY -m http.server -b 127.0.0.1 8765 > "$L/http.log" 2>&1) &
( jpeg_folder /tmp/jpeg 12800 > "$L/jpeg.log" 2>&1; stamp "jpeg folder done" ) &
( .gpu/ap.sh .gpu/roles.yml > "$L/roles.log" 2>&1; stamp "roles done rc=$?" ) &
nvidia-smi -q -d PERFORMANCE > "$L/nvidia-smi-q-d-PERFORMANCE.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi-q.txt" 2>&1
wait_for() { local n=0; while ! grep -q "$1" "$L/timeline.txt" && (( n < $2 )); do sleep 2; n=$((n+2)); done; }
wait_for "jpeg folder done" 90
step loader_probe 100 $PY .gpu/loader_probe.py /tmp/jpeg
wait_for "roles done" 200
step hvd_checkbuild 30 /opt/torch/.venv/bin/horovodrun --check-build
ls -laR /var/cache/gpurig/horovod-wheels > "$L/wheel-cache.txt" 2>&1; cp /opt/torch/.venv/gpurig-horovod.json "$L/" 2>/dev/null
( cd /var/cache/gpurig && tar cf - horovod-wheels | split -b 15M - "$OUT/hvdcache.tar.part-" ) 2>>"$L/wheel-cache.txt"
step speed 330 $PY -m bench.scaling --gpus 1 --launchers ddp,horovod --repeats 3 --timed-seconds 8 --no-progress --timeout 240 --out $R/speed
stamp "done"; pack call2
