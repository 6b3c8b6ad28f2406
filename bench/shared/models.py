"""torchvision classification models by name, importable even where torchvision's ops are not.

Why the fallback: torchvision's package `__init__` loads its compiled extension (_C.so) and
then registers fake/meta kernels for the operators that extension defines (torchvision::nms,
roi_align, ...). When _C.so cannot be loaded, which is what happens with PyPI's CUDA build of
torchvision beside a CPU-only torch, the extension loader only warns, but the registrations
raise "RuntimeError: operator torchvision::nms does not exist", and `import torchvision`
fails as a whole. The classification models never call those operators: they are pure Python
over torch.nn. So on exactly that error we import `torchvision.models` (and the datasets and
transforms the data loader needs) without executing the package `__init__`, from the same
installed files. Any other import error is a real problem and propagates.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_state: dict[str, bool] = {}


def is_missing_compiled_ops_error(exc: BaseException, package: str = "torchvision") -> bool:
    text = str(exc)
    return isinstance(exc, RuntimeError) and f"{package}::" in text and "does not exist" in text


def _package_without_init(package: str) -> ModuleType:
    """Register `package` in sys.modules as a bare package over its installed directory, so its
    subpackages import normally while its own __init__.py never runs."""
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise ImportError(f"{package} is not an installed package")
    spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
    spec.submodule_search_locations = list(found.submodule_search_locations)
    module = importlib.util.module_from_spec(spec)
    # inspect.getmodule (used by torch.library while registering ops) needs a __file__
    module.__file__ = found.origin
    sys.modules[package] = module
    return module


def import_package(package: str = "torchvision") -> ModuleType:
    """`import torchvision`, or the package without its compiled-ops __init__ (see above)."""
    if package in sys.modules:
        return sys.modules[package]
    try:
        module = importlib.import_module(package)
        _state[package] = True
        return module
    except RuntimeError as exc:
        if not is_missing_compiled_ops_error(exc, package):
            raise
    _state[package] = False
    return _package_without_init(package)


def import_submodule(name: str, package: str = "torchvision") -> ModuleType:
    import_package(package)
    return importlib.import_module(f"{package}.{name}")


def torchvision_has_compiled_ops() -> bool:
    import_package()
    return _state.get("torchvision", True)


def torchvision_version() -> str:
    return str(import_submodule("version").__version__)


def available_models() -> list[str]:
    models = import_submodule("models")
    return sorted(models.list_models(module=models))


def build_model(name: str, num_classes: int = 1000) -> torch.nn.Module:
    models = import_submodule("models")
    return models.get_model(name, weights=None, num_classes=num_classes)


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes allreduced per step: one gradient per trainable parameter, in its dtype."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
