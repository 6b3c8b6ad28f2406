# Call 1 (2026-11-27), from the repository root on the lent GPU machine, with .gpu/ (lib.sh, ap.sh,
# hosts.yml: 2026-11-25-h100's, unchanged; roles.yml; the nvImageCodec wheels; nccl-tests' tarball)
# and .whl/ (ansible-core and the Horovod sdist with its build's Python dependencies) carried.
# 1. the hardware microbenchmarks verify.yml runs (playbooks/files/verify_hardware.py);
# 2. the GPU loaders' parts alone (decode_probe.py);
# 3. the default sweep at 1 GPU with DDP, --cpu-affinity off and on, 3 launches each;
# 4. real JPEGs with the nvimgcodec and nvjpeg loaders, 8 workers, the default knobs;
# 5. nccl-tests' all_reduce_perf on the one GPU (built by the nccl_tests role);
# 6. the same sweep with Horovod (built by the horovod role in the background meanwhile).
source .gpu/lib.sh
PACK=call1
DEADLINE=${DEADLINE:-545}
HERE=docs/results/2026-11-27-h200/commands
wait_for() { local n=0; while ! grep -q "$1" "$L/timeline.txt" && (( n < $2 )); do sleep 2; n=$((n+2)); done; }
stamp "versions"
{ versions; nvidia-smi topo -m; lscpu | head -30; numactl -H 2>/dev/null; } > "$L/versions.txt" 2>&1
(cd .gpu && exec $PY -m http.server -b 127.0.0.1 8765 > "$L/http.log" 2>&1) &
( install_ansible > "$L/install_ansible.log" 2>&1; stamp "ansible installed rc=$?"
  nice -n 10 .gpu/ap.sh .gpu/roles.yml > "$L/roles.log" 2>&1; stamp "roles done rc=$?"
  /opt/torch/.venv/bin/horovodrun --check-build > "$L/horovodrun-check-build.txt" 2>&1
  cp /opt/torch/.venv/gpurig-horovod.json "$L/" 2>/dev/null; true ) &
( nice -n 5 bash -c "source .gpu/lib.sh; jpeg_folder /tmp/jpeg 12800" > "$L/jpeg.log" 2>&1; stamp "jpeg folder done" ) &
$PY -m pip install -q --no-index --no-deps .gpu/wheels/*.whl > "$L/nvimgcodec-install.log" 2>&1
stamp "nvimgcodec installed rc=$? $($PY -c 'from nvidia import nvimgcodec; print(nvimgcodec.__version__)' 2>/dev/null)"
step hardware 60 bash -c "$PY playbooks/files/verify_hardware.py > $R/verify_hardware.json"
wait_for "jpeg folder done" 60
step decode_probe 60 $PY $HERE/decode_probe.py /tmp/jpeg
B="$PY -m bench.scaling --gpus 1 --no-progress --no-probe"
step sweep_ddp 170 $B --launchers ddp --cpu-affinity off,on --repeats 3 --timed-seconds 8 --timeout 120 --out $R/sweep-ddp
wait_for "roles done" 60
step allreduce 20 /opt/nccl-tests/2.19.6/bin/all_reduce_perf -b 8M -e 1G -f 4 -g 1
step real_data 150 $B --launchers ddp --data /tmp/jpeg --loader nvimgcodec,nvjpeg --workers 8 --repeats 1 --timed-seconds 8 --timeout 120 --out $R/real-data
step sweep_horovod 160 $B --launchers horovod --cpu-affinity off,on --repeats 3 --timed-seconds 8 --timeout 120 --out $R/sweep-horovod
stamp "done"; pack call1
