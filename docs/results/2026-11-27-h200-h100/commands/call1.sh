# Call 1 (2026-11-27), from the repository root on the lent GPU machine, with .gpu/ (lib.sh, ap.sh,
# hosts.yml, verify-vars.yml: as in 2026-11-27-h200; floors.json: playbooks/vars/hardware_floors.yml's
# table as JSON; nvb/: nvbandwidth v0.8's source and Boost's Debian packages, build.sh) and .whl/
# (ansible-core and its dependencies) carried.
# 1. verify_hardware.py with the floors table (repeat until each interval clears its floor);
# 2. the GEMM at other sizes (does n = 8192 reach the plateau?);
# 3. verify_hardware.py against floors set at this GPU's own means (the repeat-until-clear rule on
#    real noise: how many repeats, which verdict);
# 4. the burn-in script for 120 s (NVML clocks, power, temperature, reasons, Xid, ECC);
# 5. nvbandwidth (built meanwhile) for the host and device copies, against verify_hardware.py's;
# 6. verify.yml --tags hardware,burnin through Ansible: the checks as an operator runs them.
source .gpu/lib.sh
PACK=call1
DEADLINE=${DEADLINE:-500}
HERE=docs/results/2026-11-27-h200-h100/commands
wait_for() { local n=0; while ! grep -q "$1" "$L/timeline.txt" && (( n < $2 )); do sleep 2; n=$((n+2)); done; }
stamp "versions"
{ versions; nvidia-smi topo -m; lscpu | head -30; numactl -H 2>/dev/null
  $PY -c "import scipy, pynvml; print('scipy', scipy.__version__); pynvml.nvmlInit(); print('nvml', pynvml.nvmlSystemGetNVMLVersion(), 'driver', pynvml.nvmlSystemGetDriverVersion())"
  $PY -m pip list 2>/dev/null | grep -i -E "nvidia-ml|pynvml|scipy|jinja"
  ls -d /usr/include/boost 2>&1; dpkg -l | grep -i boost | head -5; which cmake; cmake --version | head -1
} > "$L/versions.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi-q.txt" 2>&1
( install_ansible > "$L/install_ansible.log" 2>&1; stamp "ansible installed rc=$?" ) &
( nice -n 10 bash .gpu/nvb/build.sh /tmp/nvb > "$L/nvbandwidth-build.log" 2>&1; stamp "nvbandwidth built rc=$?" ) &
VH="$PY playbooks/files/verify_hardware.py"
step hardware 90 bash -c "$VH --floors \"\$(cat .gpu/floors.json)\" > $R/verify_hardware.json"
step gemm_sizes 100 bash -c "for n in 2048 4096 16384; do $VH --tests gemm --gemm-size \$n > $R/gemm-n\$n.json; done"
step at_floor 100 bash -c "$PY $HERE/at_floor.py $R/verify_hardware.json > $R/at-floor-table.json && $VH --tests gemm,hbm,host --floors \"\$(cat $R/at-floor-table.json)\" > $R/verify_hardware-at-floor.json"
step burnin 160 bash -c "$PY playbooks/files/verify_burnin.py 120 --window 5 --sample 1 > $R/burnin.json"
wait_for "nvbandwidth built" 90
NVB=$(find /tmp/nvb -type f -name nvbandwidth -perm -u+x 2>/dev/null | head -1)
if [ -n "$NVB" ]; then
  step nvbandwidth 90 bash -c "$NVB -t host_to_device_memcpy_ce device_to_host_memcpy_ce device_local_copy -j > $R/nvbandwidth.json"
  step nvbandwidth_text 60 bash -c "$NVB -t host_to_device_memcpy_ce device_to_host_memcpy_ce device_local_copy > $R/nvbandwidth.txt"
else stamp "no nvbandwidth binary"; fi
wait_for "ansible installed" 60
step verify 170 .gpu/ap.sh playbooks/verify.yml -e @.gpu/verify-vars.yml --tags hardware,burnin -e verify_burnin_seconds=30
cp -r /tmp/gpuw/verify "$R/verify" 2>/dev/null
stamp "done"; pack call1
