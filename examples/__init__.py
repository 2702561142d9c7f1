"""Example manifests and RISC-V guest programs, shipped as package data.

``hetflow examples copy DIR`` writes them, with ``pipelines/``, into a folder of the user's.
"""
