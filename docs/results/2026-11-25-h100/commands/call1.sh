# Call 1: smoke every GPU path once (short windows), build Horovod and nccl-tests with the roles,
# run verify.yml. Finds what breaks; the measurements proper come in later calls.
source .gpu/lib.sh
PACK=call1
B="$PY -m bench.scaling --gpus 1 --no-progress --timeout 240"
stamp "versions"; versions > "$L/versions.txt" 2>&1
install_ansible > "$L/install_ansible.log" 2>&1; stamp "ansible installed rc=$?"
(cd .gpu && exec $PY -m http.server -b 127.0.0.1 8765 > "$L/http.log" 2>&1) &
( jpeg_folder /tmp/jpeg 12800 > "$L/jpeg.log" 2>&1; stamp "jpeg folder done" ) &
( ansible_playbook .gpu/roles.yml > "$L/roles.log" 2>&1; stamp "roles done rc=$?" ) &
# 1. the default configuration (amp-bf16, channels_last, compile, batch by memory), DDP, with the probe
step ddp_default 200 $B --launchers ddp --repeats 1 --timed-seconds 5 --out $R/ddp_default
# 2. the rest of the surface, compile off to keep the smoke short
step dp 90 $B --launchers dp --compile off --timed-seconds 0 --warmup-steps 10 --steps 30 --repeats 1 --no-probe --out $R/dp
step accum_ckpt 90 $B --launchers ddp --compile off --grad-accum 2 --activation-checkpointing on --timed-seconds 0 --warmup-steps 10 --steps 30 --repeats 1 --no-probe --out $R/accum_ckpt
step profile 90 $B --launchers ddp --compile off --profile --timed-seconds 0 --warmup-steps 10 --steps 30 --repeats 1 --no-probe --out $R/profile
wait_for() { local n=0; while ! grep -q "$1" "$L/timeline.txt" && (( n < $2 )); do sleep 2; n=$((n+2)); done; }
wait_for "jpeg folder done" 60
step loaders 150 $B --launchers ddp --compile off --data /tmp/jpeg --loader torch,nvjpeg --workers 8 --timed-seconds 5 --repeats 1 --no-probe --out $R/loaders
wait_for "roles done" 120
cp /tmp/gpuw/logs/roles.log "$L/roles.log" 2>/dev/null
step hvd_checkbuild 30 /opt/torch/.venv/bin/horovodrun --check-build
step horovod 150 $B --launchers horovod --repeats 1 --timed-seconds 5 --out $R/horovod
step verify 150 .gpu/ap.sh playbooks/verify.yml -e @.gpu/verify-vars.yml
cp -r /tmp/gpuw/verify "$R/" 2>/dev/null
step overhead 150 $PY benchmarks/overhead.py --device cuda --launcher ddp --ranks 1 --rounds 1 --model resnet50 --image-size 224 --batch-size 256 --precision amp-bf16 --memory-format channels_last --compile on --steps 100 --warmup 30
du -sh /tmp/torchinductor_root 2>/dev/null | tee -a "$L/timeline.txt"
stamp "done"; pack call1
