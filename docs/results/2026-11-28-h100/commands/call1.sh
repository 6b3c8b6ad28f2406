# Call 1 (2026-11-28), from the repository root on the lent GPU machine, with .gpu/ (lib.sh, ap.sh,
# hosts.yml and verify-vars.yml as on 2026-11-27; nccl.yml beside this file; nccl-tests' tarball)
# and .whl/ (ansible-core) carried:
# 1. nccl-tests 2.19.6 built by the nccl_tests role;
# 2. verify.yml --tags nccl_tests: the all-reduce check judged by its GPU model's floor at this GPU
#    count (none for one GPU: recorded, not judged), with the verdicts as node-exporter textfile
#    metrics (verify_textfile_dir);
# 3. all_reduce_perf at Azure's floor size (16G) on the one GPU, the run verify.yml makes on an
#    8-GPU node with a floor, timed.
source .gpu/lib.sh
PACK=call1
DEADLINE=${DEADLINE:-170}
stamp "versions"
{ versions; } > "$L/versions.txt" 2>&1
(cd .gpu && exec $PY -m http.server -b 127.0.0.1 8765 > "$L/http.log" 2>&1) &
install_ansible > "$L/install_ansible.log" 2>&1; stamp "ansible installed rc=$?"
step nccl_tests_role 100 .gpu/ap.sh .gpu/nccl.yml
step verify_nccl 60 .gpu/ap.sh playbooks/verify.yml -e @.gpu/verify-vars.yml --tags nccl_tests \
  -e verify_textfile_dir=/tmp/gpuw/results/textfile
cp -r /tmp/gpuw/verify "$R/" 2>/dev/null
step allreduce_16g 40 /opt/nccl-tests/2.19.6/bin/all_reduce_perf -b 16G -e 16G -f 2 -g 1
stamp "done"; pack call1
