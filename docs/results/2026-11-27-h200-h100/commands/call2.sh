# Call 2 (2026-11-27), on a fresh machine (an H100 was asked for), with the same carried .gpu/:
# 1. verify_hardware.py with the floors table, at its defaults (the H100's DCGM and Azure floors);
# 2. the GEMM at n = 4096 and 16384 (the plateau);
# 3. the burn-in for 90 s, and 20 s into it verify_hardware.py's copies on the same, busy GPU:
#    a noisy measurement, judged by the same floors;
# 4. nvbandwidth's host and device copies (built here first), beside verify_hardware.py's.
source .gpu/lib.sh
PACK=call2
DEADLINE=${DEADLINE:-300}
stamp "versions"
{ versions; nvidia-smi topo -m; lscpu | head -20; $PY -m pip list 2>/dev/null | grep -i -E "nvidia-ml|scipy"; } > "$L/versions.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi-q.txt" 2>&1
( nice -n 10 bash .gpu/nvb/build.sh /tmp/nvb > "$L/nvbandwidth-build.log" 2>&1; stamp "nvbandwidth built rc=$?" ) &
VH="$PY playbooks/files/verify_hardware.py"
step hardware 60 bash -c "$VH --floors \"\$(cat .gpu/floors.json)\" > $R/verify_hardware.json"
step gemm_sizes 60 bash -c "for n in 4096 16384; do $VH --tests gemm --gemm-size \$n > $R/gemm-n\$n.json; done"
( sleep 20; stamp "START busy"
  $VH --tests hbm,host --floors "$(cat .gpu/floors.json)" > "$R/verify_hardware-busy.json" 2> "$L/busy.log"
  stamp "END busy rc=$?" ) &
step burnin 110 bash -c "$PY playbooks/files/verify_burnin.py 90 --window 5 --sample 1 > $R/burnin.json"
wait
NVB=$(find /tmp/nvb -type f -name nvbandwidth -perm -u+x 2>/dev/null | head -1)
[ -n "$NVB" ] && step nvbandwidth 60 bash -c "$NVB -t host_to_device_memcpy_ce device_to_host_memcpy_ce device_local_copy > $R/nvbandwidth.txt"
stamp "done"; pack call2
