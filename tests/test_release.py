"""A release a stranger can install: the sdist and the wheel build, their metadata passes
`twine check`, and the wheel, installed alone into a clean virtual environment (no dev extras,
no checkout on the path), runs the README's quickstart from a directory outside the checkout.

So a package-data file the wheel lacks (schema.json, a template, py.typed), an import of a
dev-only package from the core, or a version that disagrees with `agentfsm.__version__`
fails here, not for a user.
"""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

import agentfsm

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```\n\n```text\n(?P<out>.*?)```", re.DOTALL)
#: The wheel's dependency wheels, kept between runs beside the interpreter's environment (not
#: in the checkout), so a rerun installs with `--no-index` from here in seconds; it is only a
#: cache: a dependency missing from it is downloaded once, then the install runs again.
WHEELHOUSE = Path(sys.prefix) / ".release-wheelhouse"
#: Files outside `*.py` a user's install needs at run time; pyproject's package-data names them.
PACKAGE_DATA = (
    "agentfsm/py.typed",
    "agentfsm/events/schema.json",
    "agentfsm/ui/templates/run.html",
    "agentfsm/ui/static/app.css",
)

pytestmark = pytest.mark.release


def quickstart() -> list[tuple[str, str]]:
    """The README's Python blocks that need only the core install (those before "Keep your
    SDK", where each example names its extra), each with the text block it prints."""
    core = README.read_text(encoding="utf-8").split("## Keep your SDK", 1)[0]
    return [(m["code"], m["out"]) for m in BLOCK.finditer(core)]


def _outside_env() -> dict[str, str]:
    """This environment without PYTHONPATH: with the checkout on it, pip would find
    `agentfsm` "already satisfied" and the clean interpreter would import the checkout."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def _run(*argv: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        env=_outside_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel `python -m build` makes (the wheel built from the sdist, as a
    user's pip would), without build isolation: the dev extra holds the backend already."""
    # Built from a copy of the checkout's files (tracked, or new and not ignored): a stale
    # agentfsm.egg-info/SOURCES.txt in the checkout would otherwise put files in the sdist
    # that pyproject no longer names, and hide the gap this test is for.
    source = tmp_path_factory.mktemp("source")
    listed = _run("git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source)
    return out


@pytest.fixture(scope="module")
def clean_python(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a fresh virtual environment holding the wheel and its dependencies
    only: no dev extras, no system site-packages, no checkout on its path."""
    env = tmp_path_factory.mktemp("clean-venv")
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env)
    python = env / "bin" / "python"
    (wheel,) = dist.glob("*.whl")
    pip = (sys.executable, "-m", "pip", "--python", python, "install", "--quiet")
    offline = subprocess.run(
        [*map(str, pip), "--no-index", "--find-links", str(WHEELHOUSE), str(wheel)],
        env=_outside_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if offline.returncode != 0:  # a first run, or a dependency changed: fill the cache
        _run(sys.executable, "-m", "pip", "download", "--quiet", "-d", WHEELHOUSE, wheel)
        _run(*pip, "--no-index", "--find-links", WHEELHOUSE, wheel)
    return python


def test_the_readme_has_a_core_quickstart() -> None:
    """The examples the clean install runs exist (else the test below would run nothing)."""
    assert len(quickstart()) >= 3


def test_both_archives_pass_twine_check(dist: Path) -> None:
    """PyPI's own checks of the metadata and the README rendered as the long description."""
    archives = sorted(dist.iterdir())
    assert sorted(path.suffix for path in archives) == [".gz", ".whl"]
    _run(sys.executable, "-m", "twine", "check", "--strict", *archives)


def test_the_wheel_metadata_says_what_a_stranger_needs(dist: Path) -> None:
    """Version from `agentfsm.__version__`, the license, classifiers, the console script,
    core dependencies without any dev-only package, the extras named."""
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"agentfsm-{agentfsm.__version__}.dist-info"
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        scripts = archive.read(f"{info}/entry_points.txt").decode()
    assert set(PACKAGE_DATA) <= names
    assert metadata["Version"] == agentfsm.__version__
    assert metadata["License-Expression"] == "MIT"
    # MIT asks that its notice travel with every copy: the wheel carries the text (PEP 639).
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert f"{info}/licenses/LICENSE" in names
    assert metadata["Requires-Python"] == ">=3.11"
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "agentfsm = agentfsm.cli:main" in scripts
    core = [req for req in metadata.get_all("Requires-Dist") or [] if "extra ==" not in req]
    assert not [req for req in core if re.match(r"(pytest|mypy|ruff|hypothesis|mkdocs)", req)]
    assert {"postgres", "ui", "testing", "dev"} <= set(metadata.get_all("Provides-Extra") or [])


def test_the_sdist_carries_the_package_data(dist: Path) -> None:
    """The sdist is what a wheel is rebuilt from: it holds the same data files."""
    (sdist,) = dist.glob("*.tar.gz")
    root = f"agentfsm-{agentfsm.__version__}"
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(f"{root}/") for name in archive.getnames()}
    assert {*PACKAGE_DATA, "pyproject.toml", "README.md", "LICENSE"} <= names


def test_the_clean_install_runs_the_readme_quickstart(clean_python: Path, tmp_path: Path) -> None:
    """Each core README block, run by the clean environment's interpreter in an empty
    directory outside the checkout, prints the text block after it."""
    for number, (code, shown) in enumerate(quickstart()):
        script = tmp_path / f"quickstart_{number}.py"
        # The Runner logs through structlog, which an application configures; captured here
        # so what is compared is the example's own output, as tests/test_readme.py does.
        script.write_text(
            "import structlog.testing\n"
            "with structlog.testing.capture_logs():\n"
            f"    exec(compile({code!r}, 'README.md', 'exec'), {{'__name__': 'readme'}})\n",
            encoding="utf-8",
        )
        done = subprocess.run(
            [str(clean_python), "-I", str(script)],
            cwd=tmp_path,
            env=_outside_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert (done.returncode, done.stderr, done.stdout) == (0, "", shown), code


def test_the_installed_package_is_the_wheel_and_says_its_version(
    clean_python: Path, tmp_path: Path
) -> None:
    """`agentfsm --version` of the installed console script prints `agentfsm.__version__`,
    and `import agentfsm` there resolves inside the clean environment, not this checkout."""
    script = clean_python.parent / "agentfsm"
    assert _run(script, "--version", cwd=tmp_path) == f"agentfsm {agentfsm.__version__}\n"
    where = _run(clean_python, "-I", "-c", "import agentfsm; print(agentfsm.__file__)")
    assert Path(where.strip()).is_relative_to(clean_python.parent.parent)
