"""``hetflow import onnx``: a model from another format as a manifest and its weights."""

from __future__ import annotations

import argparse
import json

from hetflow.engine.cli.common import EXIT_OK

__all__ = ["cmd_import"]


def cmd_import(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine.importers.onnximport import imported_files

    files = imported_files(args.model, args.output, allow_missing=args.allow_missing, name=args.name)
    manifest = files[0]
    stub = next((p for p in files if p.suffix == ".py"), None)
    if args.json:
        print(json.dumps({"status": "imported", "manifest": str(manifest), "files": [str(p) for p in files]}),
              file=out)
        return EXIT_OK
    for p in files:
        print(f"wrote {p}", file=err)
    if stub is not None:
        print(f"hetflow: write the ops in {stub} before running the manifest: they raise NotImplementedError",
              file=err)
    print(manifest, file=out)
    return EXIT_OK
