"""Layering rules import-linter cannot express, checked on the source (no imports executed).

The layers themselves (tools > services > simulator > featurelib > contracts, services above
the runtime, services independent) are import-linter contracts in `.importlinter`, run by
`make lint`. What stays here:

- every package, every service and every simulator module is named in those contracts
  (a package left out of `root_packages` or a layer is silently unchecked);
- within a service, only one module imports kubernetes_asyncio.
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
NOT_LAYERED = {"tests"}  # the test suite may import anything


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def service_packages() -> list[Path]:
    return sorted(p for p in SERVICES.iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name != "runtime")


def importlinter() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config


def listed(config: configparser.ConfigParser, section: str, option: str) -> list[str]:
    """The module names of a multi-line option (layers split on '|' and ':')."""
    return [name for line in config[section][option].splitlines() for name in re.split(r"[|:]", line) if name.strip()]


def layer_modules(config: configparser.ConfigParser) -> set[str]:
    return {name.strip() for name in listed(config, "importlinter:contract:layers", "layers")}


def test_every_package_is_checked() -> None:
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} - NOT_LAYERED
    config = importlinter()
    roots = {name.strip() for name in listed(config, "importlinter", "root_packages")}
    assert roots == packages, "root_packages in .importlinter must name every package"
    layers = layer_modules(config)
    covered = {name.split(".")[0] for name in layers}
    assert covered == packages, f"packages in no layer: {sorted(packages - covered)}"


def test_every_simulator_module_is_in_a_layer() -> None:
    # simulator is split across two layers (the arena above services, the counter model below)
    layers = layer_modules(importlinter())
    children = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "simulator").iterdir()}
    children = {c for c in children if c not in ("__init__", "__pycache__") and not c.startswith(".")}
    missing = {f"simulator.{c}" for c in children} - layers
    assert not missing, f"add to a layer in .importlinter: {sorted(missing)}"


def test_every_service_is_in_the_independence_contract() -> None:
    config = importlinter()
    declared = {name.strip() for name in listed(config, "importlinter:contract:services-are-independent", "modules")}
    assert declared == {f"services.{p.name}" for p in service_packages()}


def test_one_kubernetes_module_per_service() -> None:
    for package in service_packages():
        users = [p for p in package.rglob("*.py") if any(m.startswith("kubernetes_asyncio") for m in imports_of(p))]
        assert len(users) <= 1, f"{package.name}: kubernetes_asyncio in {[str(u.relative_to(ROOT)) for u in users]}"


def test_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("from services.features.windows import Window\nimport kubernetes_asyncio\n")
    assert "services.features.windows" in imports_of(bad)
    assert "kubernetes_asyncio" in imports_of(bad)
