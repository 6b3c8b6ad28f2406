"""Jinja tests for the kinds of role variables: `x is gpurig_pep440`, `u is gpurig_https_url`.

The checks live in filter_plugins/gpurig_kinds.py (with the table saying which variable is which
kind); this file only offers them as tests, so both plugin types share one implementation.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parent.parent / "filter_plugins" / "gpurig_kinds.py"
_NAME = "gpurig_kinds_checks"


def _checks():
    if _NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(_NAME, _PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[_NAME]


class TestModule:
    def tests(self):
        return {"gpurig_" + name: check for name, check in _checks().JINJA_TESTS.items()}
