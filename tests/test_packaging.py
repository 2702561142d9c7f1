"""A non-editable install works: a wheel and an sdist, each in a fresh venv.

An editable install maps the checkout's folders straight onto the import
names and so hides a subpackage or data file that the distribution
forgets. Here the wheel is built from the tree and the sdist with PyPA's
``build``, each installed into a new virtual environment that does not
see this interpreter's site-packages, and the shipped examples run from a
folder outside the checkout: a tensor pipeline and an emulator pipeline.
"""

import glob
import json
import os
import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _sh(*cmd, cwd=None, env=None, timeout=900):
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _tracked(*folders):
    out = subprocess.run(["git", "ls-files", *folders], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout: cannot list the tracked files a distribution must carry")
    return [f for f in out.stdout.split() if not f.endswith(".gitignore")]


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    _sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, REPO)
    _sh(sys.executable, "-m", "build", "--sdist", "-o", out, REPO)
    return Path(glob.glob(str(out / "hetflow-*.whl"))[0]), Path(glob.glob(str(out / "hetflow-*.tar.gz"))[0])


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=True, system_site_packages=False, clear=True)
    bindir = root / ("Scripts" if os.name == "nt" else "bin")
    return bindir


# The ways a Python file or a data file in the tree maps into the installed package.
_INSTALLED = {"hetflow/": "hetflow/", "engine/": "hetflow/engine/", "executors/": "hetflow/executors/",
              "schemas/": "hetflow/schemas/", "examples/": "hetflow/examples/", "pipelines/": "hetflow/pipelines/"}


def _installed_name(tracked: str) -> str:
    for src, dst in _INSTALLED.items():
        if tracked.startswith(src):
            return dst + tracked[len(src):]
    raise AssertionError(tracked)


def test_the_wheel_carries_every_tracked_file_of_the_package(dists):
    wheel, _ = dists
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f for f in _tracked(*_INSTALLED) if _installed_name(f) not in names]
    assert missing == []


def test_the_sdist_carries_what_a_build_needs(dists):
    _, sdist = dists
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    missing = [f for f in _tracked(*_INSTALLED) + ["setup.py", "pyproject.toml", "README.md"] if f not in names]
    assert missing == []
    # and what the tests it carries read, and the docs the README links to
    carried = [f for f in _tracked("tests/", "docs/") if f not in names]
    assert carried == []


def _run_examples(bindir: Path, work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    where = _sh(bindir / "python", "-c", "import hetflow, hetflow.executors.emulator as e; print(hetflow.__file__); print(e.__file__)",
                cwd=work, env=env)
    for line in where.split():
        assert not Path(line).resolve().is_relative_to(REPO), f"imported from the checkout: {line}"
    _sh(bindir / "hetflow", "examples", "copy", "here", cwd=work, env=env)
    # every manifest's editor modeline names a schema the copy wrote
    named = {}
    for manifest in (work / "here").rglob("*.yaml"):
        found = re.search(r"\$schema=(\S+)", manifest.read_text(encoding="utf-8"))
        if found:
            named[manifest] = (manifest.parent / found.group(1)).resolve()
    assert named and all(schema.is_file() for schema in named.values()), named
    results = {}
    for manifest in ("here/examples/quickstart.yaml", "here/pipelines/zkvm_trace.yaml"):
        _sh(bindir / "hetflow", "validate", manifest, cwd=work, env=env)
        run_id = _sh(bindir / "hetflow", "run", manifest, "--runs-dir", "runs", cwd=work, env=env).split()[-1]
        record = json.loads((work / "runs" / run_id / "record.json").read_text())
        assert record["status"] == "succeeded"
        results[manifest] = record["outputs"]
    return results


def test_a_wheel_and_an_sdist_install_and_run_outside_the_checkout(dists, fresh_venv, tmp_path):
    wheel, sdist = dists
    pip = [fresh_venv / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _sh(*pip, wheel)
    (tmp_path / "w").mkdir()
    from_wheel = _run_examples(fresh_venv, tmp_path / "w")

    _sh(*pip, "--no-deps", "--force-reinstall", sdist)
    (tmp_path / "s").mkdir()
    from_sdist = _run_examples(fresh_venv, tmp_path / "s")

    def digests(outputs):
        return {name: out.get("digest") for name, out in outputs.items()}

    assert {m: digests(o) for m, o in from_wheel.items()} == {m: digests(o) for m, o in from_sdist.items()}
