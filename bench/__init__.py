"""ResNet-50 training-throughput scaling benchmarks for DDP and Horovod."""

__version__ = "0.1.0"
