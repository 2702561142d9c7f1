"""The importers room: models from other formats become manifests.

============  =============================================================
module        what it does
============  =============================================================
onnxops       ONNX node types -> hetflow stages, one rule each
onnximport    ``hetflow import onnx``: an ONNX graph -> a manifest and a
              safetensors file of its initializers
============  =============================================================

It imports only :mod:`hetflow.engine.errors` and the op registry.
"""
