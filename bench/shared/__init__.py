"""What the controller and the ranks both import: the wire format of a rank's report (`wire`),
dying with the parent (`lifeline`), TensorFlow's rules and TF_CONFIG (`tf_rules`), the loader
registry (`loaders`) and the image folder listing (`folder`), telemetry's format (`telemetry`) and
the model registry (`models`). Torch-free at import; they import only each other and the
vocabulary of bench.spec and bench.launcher_kinds (tests/unit/test_layout.py checks it).
"""
