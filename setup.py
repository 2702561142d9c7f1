"""Which folders become which packages: the one piece pyproject.toml cannot say.

The repository keeps ``engine/``, ``executors/``, ``schemas/``,
``examples/`` and ``pipelines/`` at the top and installs them under the
``hetflow`` import package. Every folder below a root is found here, so a
new subpackage or data folder ships without editing a list.
"""

import os

from setuptools import setup

ROOTS = {
    "hetflow": "hetflow",
    "hetflow.engine": "engine",
    "hetflow.executors": "executors",
    "hetflow.schemas": "schemas",
    "hetflow.examples": "examples",
    "hetflow.pipelines": "pipelines",
}

# Files a run needs at install time besides Python modules: schemas, shaders, the report page's
# template, style sheet and script, example manifests, guest programs with their sources and build files.
DATA = ["*.json", "*.html", "*.css", "*.js", "*.wgsl", "*.yaml", "*.yml", "*.npy", "*.npz", "*.safetensors", "*.elf",
        "*.c", "*.h", "*.S", "*.ld", "*.py", "*.ipynb", "*.md", "Makefile"]


def _packages():
    packages, data = [], {}
    for name, folder in ROOTS.items():
        for here, dirs, _files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and not d.endswith(".egg-info"))
            rel = os.path.relpath(here, folder)
            package = name if rel == "." else name + "." + rel.replace(os.sep, ".")
            packages.append(package)
            data[package] = DATA
    return packages, data


PACKAGES, PACKAGE_DATA = _packages()

setup(packages=PACKAGES, package_dir=ROOTS, package_data=PACKAGE_DATA)
