# Call B (2026-11-26): the harness against a plain DDP loop at the new DDP defaults
# (benchmarks/overhead.py), the default sweep at 1 GPU with DDP and Horovod (3 launches each), the
# nvjpeg loader at the default knobs on ImageNet-like JPEGs. Horovod is built with NCCL by the
# horovod role in the background (niced) while overhead.py runs, and its wheel cache goes back.
source .gpu/lib.sh
PACK=callB
wait_for() { local n=0; while ! grep -q "$1" "$L/timeline.txt" && (( n < $2 )); do sleep 2; n=$((n+2)); done; }
stamp "versions"; versions > "$L/versions.txt" 2>&1
( install_ansible > "$L/install_ansible.log" 2>&1; stamp "ansible installed rc=$?"
  nice -n 10 .gpu/ap.sh .gpu/roles.yml > "$L/roles.log" 2>&1; stamp "roles done rc=$?"
  ( cd /var/cache/gpurig && tar cf - horovod-wheels | split -b 15M - "$OUT/hvdcache.tar.part-" )
  cp /opt/torch/.venv/gpurig-horovod.json "$L/" 2>/dev/null
  stamp "wheel cache packed" ) &
( nice -n 10 bash -c "source .gpu/lib.sh; jpeg_folder /tmp/jpeg 12800" > "$L/jpeg.log" 2>&1; stamp "jpeg folder done" ) &
step overhead_ddp 190 $PY benchmarks/overhead.py --device cuda --launcher ddp --ranks 1 --rounds 2 --model resnet50 --image-size 224 --batch-size 256 --precision amp-bf16 --memory-format channels_last --compile on --steps 100 --warmup 30
wait_for "wheel cache packed" 120
step hvd_checkbuild 30 /opt/torch/.venv/bin/horovodrun --check-build
step default 260 $PY -m bench.scaling --gpus 1 --launchers ddp,horovod --repeats 3 --timed-seconds 8 --no-progress --timeout 200 --out $R/default
wait_for "jpeg folder done" 30
step nvjpeg 90 $PY -m bench.scaling --gpus 1 --launchers ddp --data /tmp/jpeg --loader nvjpeg --workers 8 --repeats 1 --timed-seconds 8 --no-probe --no-progress --timeout 85 --out $R/nvjpeg
stamp "done"; pack callB
