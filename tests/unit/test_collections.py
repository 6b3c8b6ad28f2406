"""requirements.yml names the collection versions that scripts/collections.sh's PyPI fallback (the
pinned `ansible` wheel) carries, so Galaxy and PyPI give the same collections; both
scripts/bootstrap.sh and scripts/test.sh run that one script."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = Path(os.environ.get("ANSIBLE_COLLECTIONS_PATH", ROOT / ".cache" / "collections"))


def test_requirements_pin_the_versions_the_installed_collections_have() -> None:
    wanted = yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]
    if not (COLLECTIONS / "ansible_collections").is_dir():
        pytest.skip(f"no collections in {COLLECTIONS} (scripts/collections.sh puts them there)")
    for entry in wanted:
        namespace, name = entry["name"].split(".")
        manifest = COLLECTIONS / "ansible_collections" / namespace / name / "MANIFEST.json"
        info = json.loads(manifest.read_text())["collection_info"]
        assert info["version"] == entry["version"], entry["name"]


def test_bootstrap_and_the_suite_run_the_same_collections_script() -> None:
    assert "scripts/collections.sh" in (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert "scripts/collections.sh" in (ROOT / "scripts" / "test.sh").read_text()
    assert not (ROOT / "tests" / "infra" / "collections.sh").exists()
