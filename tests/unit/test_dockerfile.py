"""The Dockerfile, checked without a Docker engine: stages, user, entry point, and its install step.

The install rule (docs/deploy.md, "The image's install step"): every `pip install` of the
Makefile's virtualenv recipe has a counterpart, in the same order, in the Dockerfile's runtime
stage, identical once options that only make sense on one side are removed:
  development only (Makefile): -q/--quiet, -e/--editable, the extras of the project ('.[dev]' -> '.')
  image only (Dockerfile):     --no-cache-dir, --no-index, --find-links
So both install the project directory with pip, pinned by pyproject.toml and nothing else; a
change to one (a constraints file, a requirements file, another target) fails here until the
other follows.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
MAKEFILE = ROOT / "Makefile"
DOCKERIGNORE = ROOT / ".dockerignore"

DEV_ONLY_FLAGS = {"-q", "--quiet", "-e", "--editable"}
IMAGE_ONLY_FLAGS = {"--no-cache-dir", "--no-index"}
IMAGE_ONLY_VALUED = {"--find-links", "-f"}


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Instructions with continuation lines joined and comments dropped, grouped by stage."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name=name, base=parts[0]))
        elif not stages and keyword == "ARG":
            key, _, value = args.partition("=")
            global_args[key] = value
        elif stages:
            stages[-1].instructions.append((keyword, args.strip()))
    return global_args, stages


def shell_commands(run_args: str) -> list[list[str]]:
    """The simple commands of a RUN line: mount flags dropped, split on && and ;."""
    words = [w for w in shlex.split(run_args) if not w.startswith("--mount=")]
    commands: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", ";", "||"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def pip_install_args(command: list[str]) -> list[str] | None:
    """Arguments after `<python> -m pip install`, or None when the command is not one."""
    for i in range(len(command) - 2):
        if command[i : i + 3] == ["-m", "pip", "install"]:
            return command[i + 3 :]
    return None


def normalise(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in DEV_ONLY_FLAGS or arg in IMAGE_ONLY_FLAGS:
            continue
        option = arg.split("=", 1)[0]
        if option in IMAGE_ONLY_VALUED:
            skip = "=" not in arg
            continue
        if arg.startswith("."):
            arg = re.sub(r"\[[^]]*\]$", "", arg)  # the project, without extras
        out.append(arg)
    return out


def makefile_venv_installs() -> list[list[str]]:
    """pip installs in the recipe of the Makefile's $(STAMP) rule (what `make venv` runs)."""
    lines = MAKEFILE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$(STAMP):"))
    installs = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        command = shlex.split(line.strip().lstrip("@"))
        args = pip_install_args(command)
        if args is not None:
            installs.append(args)
    return installs


@pytest.fixture(scope="module")
def parsed() -> tuple[dict[str, str], list[Stage]]:
    return parse_dockerfile(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def runtime(parsed: tuple[dict[str, str], list[Stage]]) -> Stage:
    return parsed[1][-1]


def test_multi_stage_on_a_slim_python_base(parsed: tuple[dict[str, str], list[Stage]]) -> None:
    global_args, stages = parsed
    assert [s.name for s in stages] == ["build", "runtime"]
    assert all(s.base == "${PYTHON_IMAGE}" for s in stages)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", global_args["PYTHON_IMAGE"])
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert ">=3.11" in requires


def test_runtime_has_no_build_tools_and_runs_as_a_non_root_uid(runtime: Stage) -> None:
    for run in runtime.all("RUN"):
        assert "apt-get" not in run, "compilers stay in the build stage"
    user = runtime.all("USER")[-1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), "numeric UID (Kubernetes can then verify runAsNonRoot)"
    assert int(uid) > 0, "non-root"
    assert gid.isdigit()
    assert int(gid) > 0
    assert runtime.all("ENTRYPOINT") == ['["borgctl"]'], "containers run `borgctl serve <service>`"


def test_runtime_listens_for_probes_on_all_interfaces(runtime: Stage) -> None:
    env = " ".join(runtime.all("ENV"))
    assert "HEALTH_HOST=0.0.0.0" in env
    assert "HEALTH_PORT=8080" in env
    assert runtime.all("EXPOSE") == ["8080"]


def test_makefile_has_the_install_steps_this_rule_compares() -> None:
    installs = makefile_venv_installs()
    assert installs, "no `$(PY) -m pip install` in the Makefile's $(STAMP) recipe"
    assert any(arg.startswith(".") for args in installs for arg in args), "the Makefile installs the project"


def test_image_install_step_is_the_makefiles_production_variant(runtime: Stage) -> None:
    image = [args for run in runtime.all("RUN") for c in shell_commands(run) if (args := pip_install_args(c))]
    make = makefile_venv_installs()
    assert [normalise(a) for a in image] == [normalise(a) for a in make], (
        f"Dockerfile runtime installs {image} but the Makefile (make venv) installs {make}; "
        "see docs/deploy.md, 'The image's install step'"
    )
    project = [a for a in image if "." in a]
    assert project, "the image installs the project"
    assert "--no-cache-dir" in project[0], "the image keeps no pip cache"
    assert all("-e" not in a and "--editable" not in a for a in image), "the image installs, not links"


def test_build_stage_prepares_wheels_for_the_same_project(parsed: tuple[dict[str, str], list[Stage]]) -> None:
    build = parsed[1][0]
    wheels = [c for run in build.all("RUN") for c in shell_commands(run) if c[1:4] == ["-m", "pip", "wheel"]]
    assert any(c[-1] == "." for c in wheels), "the build stage resolves the project's pinned dependencies"
    assert build.all("COPY") == ["pyproject.toml ./"], "only the dependency list: the wheel layer survives code edits"


def _ignore_patterns() -> list[tuple[bool, str]]:
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!").rstrip("/")))
    return rules


def sent_to_build(path: str) -> bool:
    """Whether .dockerignore lets `path` (relative, a top-level entry) into the build context."""
    included = True
    for negated, pattern in _ignore_patterns():
        if fnmatch.fnmatch(path, pattern):
            included = negated
    return included


def _imported_top_level(package: Path) -> set[str]:
    names: set[str] = set()
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_build_context_holds_every_package_the_image_runs() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {p.rstrip("*") for p in setuptools["packages"]["find"]["include"]}
    local = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    needed = set(packages)
    for name in packages:
        if (ROOT / name).is_dir():
            needed |= _imported_top_level(ROOT / name) & local
    needed.discard("tests")
    missing = sorted(name for name in needed if not sent_to_build(name))
    assert not missing, f".dockerignore keeps out packages the image imports: {missing}"
    for private in (".git", ".venv", "tests", "infra", "deploy", ".env", "docker-compose.yml"):
        assert not sent_to_build(private), f"{private} must not reach the build context"
    assert sent_to_build("pyproject.toml")
