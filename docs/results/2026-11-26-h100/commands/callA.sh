# Call A (2026-11-26): the moonshot's candidates in a plain loop (benchmarks/step_variants.py),
# DDP's cost at one rank, while Horovod is built with NCCL by the horovod role in the background
# (niced); then the Horovod wheel cache and the Inductor cache go back for the next calls.
source .gpu/lib.sh
PACK=callA
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
stamp "versions"; versions > "$L/versions.txt" 2>&1
( install_ansible > "$L/install_ansible.log" 2>&1; stamp "ansible installed rc=$?"
  nice -n 10 .gpu/ap.sh .gpu/roles.yml > "$L/roles.log" 2>&1; stamp "roles done rc=$?"
  ( cd /var/cache/gpurig && tar cf - horovod-wheels | split -b 15M - "$OUT/hvdcache.tar.part-" )
  stamp "wheel cache packed" ) &
step variants 330 $PY benchmarks/step_variants.py --limit 150 \
  --variants base,fused,graphs,ddp,ddp-tuned,b384
step autotune 200 $PY benchmarks/step_variants.py --limit 190 --variants autotune
wait_for() { local n=0; while ! grep -q "$1" "$L/timeline.txt" && (( n < $2 )); do sleep 2; n=$((n+2)); done; }
wait_for "wheel cache packed" 60
/opt/torch/.venv/bin/horovodrun --check-build > "$L/check-build.txt" 2>&1
du -sh /tmp/inductor-cache | tee -a "$L/timeline.txt"
tar czf "$OUT/inductor-cache.tgz" -C /tmp inductor-cache
ls -la "$OUT" | tee -a "$L/timeline.txt"
stamp "done"; pack callA
