"""Layering rules from the architecture, checked on the source (no imports executed).

- services never import each other (only contracts, featurelib, simulator and services.runtime);
- the runtime and contracts import no service;
- within a service, only one module imports kubernetes_asyncio.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
SHARED_OK = ("services.runtime",)


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


def test_services_do_not_import_each_other() -> None:
    offenders = []
    for package in service_packages():
        own = f"services.{package.name}"
        for path in package.rglob("*.py"):
            for mod in imports_of(path):
                if mod.startswith("services.") and not mod.startswith((own, *SHARED_OK)):
                    offenders.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert not offenders, "\n".join(offenders)


def test_one_kubernetes_module_per_service() -> None:
    for package in service_packages():
        users = [p for p in package.rglob("*.py") if any(m.startswith("kubernetes_asyncio") for m in imports_of(p))]
        assert len(users) <= 1, f"{package.name}: kubernetes_asyncio in {[str(u.relative_to(ROOT)) for u in users]}"


def test_contracts_and_runtime_import_no_service() -> None:
    offenders = defaultdict(list)
    for base, banned in (
        (ROOT / "contracts", ("services", "borgctl", "training")),
        (SERVICES / "runtime", ("borgctl", "training")),
    ):
        for path in base.rglob("*.py"):
            for mod in imports_of(path):
                top_service = mod.startswith("services.") and not mod.startswith("services.runtime")
                if (mod.startswith(banned) and not (base.name == "runtime" and mod.startswith("services.runtime"))) or (
                    base.name == "runtime" and top_service
                ):
                    offenders[str(path.relative_to(ROOT))].append(mod)
    assert not offenders, dict(offenders)


def test_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "x.py"
    bad.write_text("from services.features.windows import Window\nimport kubernetes_asyncio\n")
    assert "services.features.windows" in imports_of(bad)
    assert "kubernetes_asyncio" in imports_of(bad)
