"""hetflow's version, said once: the build reads it from here (``pyproject.toml``'s ``dynamic``), and so do
``hetflow --version``, the run record and the cache keys, without reading package metadata at start-up."""

__version__ = "0.1.0"
