"""``hetflow executors``, ``examples`` and ``schema``: what this machine and this installation offer."""

from __future__ import annotations

import argparse
import json
import os

from hetflow.engine.cli.common import EXIT_OK, write_output
from hetflow.engine.errors import UsageError

__all__ = ["cmd_executors", "cmd_examples", "cmd_schema"]


def cmd_executors(args: argparse.Namespace, out, err) -> int:
    from hetflow.executors import inventory
    from hetflow.executors import ops as oplib
    from hetflow.executors.base import Dtype, Vendor

    if args.ops:
        from hetflow.executors import plugins

        # Listing every op is the one place that imports every installed plugin.
        loaded, failed = plugins.all_plugins()
        for spec, problem in failed:
            print(f"hetflow: entry point {spec}: {problem}", file=err)
        where = {name: p.label + (f" ({p.spec})" if p.kind == "entry point" else "") for p in loaded for name in p.ops}
        rows = [{"op": op.name, "inputs": list(op.arity), "args": {k: {"kind": a.kind, "required": a.required, "default": a.default} for k, a in op.args.items()},
                 "dtypes": [d.value for d in Dtype if d in op.dtypes], "doc": op.doc,
                 "source": "built-in" if op.name in oplib.BUILTIN else where.get(op.name, op.defined_at or op.source),
                 "vendors": [v.value for v in Vendor if op.runs_on(v.value)],
                 "kernels": sorted({*op.kernels, *(["vulkan"] if op.invoke is not None and op.wgsl else [])})}
                for op in oplib.REGISTRY.values() if op.name in oplib.BUILTIN or op.name in where]
        if args.json:
            print(json.dumps(rows, indent=2), file=out)
        else:
            for r in rows:
                arity = str(r["inputs"][0]) if r["inputs"][0] == r["inputs"][1] else f"{r['inputs'][0]}-{r['inputs'][1]}"
                argtext = ", ".join(k + ("" if a["required"] else f"={a['default']}") for k, a in r["args"].items())
                origin = "" if r["source"] == "built-in" else f"  from {r['source']}"
                print(f"{r['op']:<15} inputs {arity}  args({argtext})  dtypes {','.join(r['dtypes'])}  {r['doc']}{origin}",
                      file=out)
        return EXIT_OK
    offers = inventory()
    if args.json:
        print(json.dumps([o.to_json() for o in offers], indent=2), file=out)
        return EXIT_OK
    for o in offers:
        state = "available" if o.available else "unavailable"
        print(f"{o.vendor.value:<7} {state:<12} {o.reason}", file=out)
        for d in o.devices:
            memory = f", {d.memory_bytes / 2**30:.1f} GiB" if d.memory_bytes else ""
            print(f"        device {d.bus_address}: {d.display_name}{memory}", file=out)
        if o.dtypes:
            print(f"        dtypes: {', '.join(d.value for d in o.dtypes)}", file=out)
    return EXIT_OK


def cmd_examples(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import examples

    if args.examples_command == "list":
        for name in examples.shipped():
            print(name, file=out)
        return EXIT_OK
    try:
        written = examples.copy(args.dir, force=args.force)
    except OSError as e:
        import errno

        if e.errno in (errno.ENAMETOOLONG, errno.ELOOP):  # a path no folder can have: the argument's
            from hetflow.engine.errors import UsageError

            raise UsageError(f"{args.dir}: {e.strerror}") from None
        if not isinstance(e, (NotADirectoryError, FileNotFoundError, PermissionError)):
            raise
        # a folder that cannot be made there (inside a file, under /proc, another user's): the environment's
        from hetflow.engine.errors import StorageUnavailable

        raise StorageUnavailable(f"{args.dir}: the folder could not be made or written: {e.strerror or e}"
                                 + (f" ({e.filename})" if e.filename else "")) from None
    print(f"wrote {len(written)} files under {args.dir}; try: hetflow run {os.path.join(args.dir, 'examples', 'quickstart.yaml')}",
          file=out)
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, out, err) -> int:
    from hetflow.executors import ops as oplib

    from hetflow.engine.manifest import schemagen

    from hetflow.executors import plugins

    ops = {name: op for name, op in oplib.REGISTRY.items() if op.invoke is None}
    for spec in args.plugins or ():
        try:
            loaded = plugins.load_plugin(spec, os.getcwd())
        except plugins.PluginError as e:
            raise UsageError(f"--plugins {spec}: {e}") from None
        ops.update({name: oplib.REGISTRY[name] for name in loaded.ops})
    text = schemagen.dumps(schemagen.editor_schema(ops))
    if args.output is None or args.output == "-":
        out.write(text)
        return EXIT_OK
    write_output(args.output, text.encode(), out)
    print(f"schema: {args.output}", file=out)
    return EXIT_OK
