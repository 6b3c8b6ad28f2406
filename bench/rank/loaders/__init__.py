"""Input pipelines for real images (`--data DIR`), one module per `--loader` choice.

- `torch_loader`: torch DataLoader workers decode (PIL) and augment on the CPU; pinned memory,
  persistent workers, prefetching; the batch is copied to the device.
- `nvjpeg`: DataLoader workers only read the files; torchvision's `decode_jpeg` decodes a
  whole batch on the GPU (nvJPEG) and `augment` crops, resizes, flips and normalises it there.
- `dali`: NVIDIA DALI reads, decodes (mixed CPU/GPU nvJPEG) and augments in its own threads.

All three read the same file list (`folder.list_images`, ImageFolder order and labels), give
each rank a disjoint shard and reshuffle every epoch from the run's seed, and yield endless
(images, labels) batches already on the device. Which loaders can run on a machine is decided
before launch by `bench.loaders` on the controller.
"""
