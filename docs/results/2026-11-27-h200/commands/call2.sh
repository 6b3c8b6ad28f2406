# Call 2 (2026-11-27), right after call 1 on the same warm machine (the JPEG folder, Horovod and
# nccl-tests still there), with the device time left: the GPU loaders' parts alone
# (decode_probe.py, which failed in call 1 on torch.cuda.set_device("cuda")), then the per-GPU check.
source .gpu/lib.sh
PACK=call2
DEADLINE=${DEADLINE:-110}
stamp "call 2"
step decode_probe 50 $PY docs/results/2026-11-27-h200/commands/decode_probe.py /tmp/jpeg
step per_gpu 60 $PY -m bench.scaling --gpus 1 --no-progress --no-probe --launchers per-gpu --repeats 1 --timed-seconds 5 --timeout 60 --out $R/per-gpu
stamp "done"; pack call2
