"""Input pipelines for real images (`--data DIR`), one module per `--loader` choice.

- `torch_loader`: torch DataLoader workers decode (PIL) and augment on the CPU; pinned memory,
  persistent workers, prefetching; the batch is copied to the device.
- `nvimgcodec`: DataLoader workers only read the files; NVIDIA nvImageCodec decodes a whole
  batch on the GPU's hardware JPEG decoder (nvJPEG's CUDA decoder where it has none) and
  `augment` crops, resizes, flips and normalises it on the GPU, the resize batched.
- `nvjpeg`: the same with torchvision's `decode_jpeg` (nvJPEG on the SMs) as the decoder.
- `dali`: NVIDIA DALI reads, decodes (mixed CPU/GPU nvJPEG) and augments in its own threads.

- `tfdata`: the tf launcher's input: tf.data reads, decodes (decode_jpeg) and augments in a
  parallel map (built by bench.rank.keras_worker; the torch ranks cannot use it).

The torch loaders read the same file list (`folder.list_images`, ImageFolder order and labels), give
each rank a disjoint shard and reshuffle every epoch from the run's seed, and yield endless
(images, labels) batches already on the device. Which loaders can run on a machine is decided
before launch by `bench.loader_support` on the controller.

The registry, one `Loader` per `--loader` name, is bench.shared.loaders (the controller lists the
names without importing this package); a loader's module here is imported when a rank first uses
it, and takes a `LoaderRequest` (declared there too).
"""
