# Call 3 (2026-11-27), on a fresh H100: why nvbandwidth's host-to-device figure (47.3 GB/s in call 2)
# sits below verify_hardware.py's (53.3) while device-to-host agrees. nvbandwidth at 512 and 256 MiB,
# with and without its CPU affinity (-d), 10 samples each, then verify_hardware.py's host copies at
# 256 and 512 MiB, 10 repeats each.
source .gpu/lib.sh
PACK=call3
DEADLINE=${DEADLINE:-200}
stamp "build"
bash .gpu/nvb/build.sh /tmp/nvb > "$L/nvbandwidth-build.log" 2>&1; stamp "nvbandwidth built rc=$?"
NVB=$(find /tmp/nvb -type f -name nvbandwidth -perm -u+x | head -1)
VH="$PY playbooks/files/verify_hardware.py"
for b in 512 256; do
  step "nvb-b$b" 40 $NVB -t host_to_device_memcpy_ce device_to_host_memcpy_ce -b $b -i 10
  step "nvb-b$b-d" 40 $NVB -t host_to_device_memcpy_ce device_to_host_memcpy_ce -b $b -i 10 -d
done
step vh-host-256 40 bash -c "$VH --tests host --repeats 10 > $R/vh-host-256.json"
step vh-host-512 40 bash -c "$VH --tests host --host-mib 512 --repeats 10 > $R/vh-host-512.json"
step nvb-b512-again 40 $NVB -t host_to_device_memcpy_ce device_to_host_memcpy_ce -b 512 -i 10
stamp "done"; pack call3
