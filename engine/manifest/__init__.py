"""The manifest room: a YAML file becomes a checked ``Manifest``.

The front of the engine, the passes before any planning. Its modules in
the order data flows through them:

============  =============================================================
module        what it does
============  =============================================================
loader        load: the YAML file -> ``Document`` (the tree, and where each
              value was written: FILE:LINE:COL)
resolve       resolve: ``${name}`` params and overrides -> the concrete tree
schemacheck   the JSON Schema's verdict on the concrete tree, as diagnostics
blocks        expand: ``defaults:`` and the uses of ``blocks:`` -> plain stages
semantics     what a schema cannot say: references, ops, dtypes, executors
shapes        each stage's output shape from its op's shape rule
phasedecl     emulators and their phases as declared, and what the plan knows
              of each before its guest runs
cron          the ``schedule:`` key's cron expressions
validate      validate: all of the above -> ``Manifest``; ``compile_manifest``
matrix        a ``matrix:`` block -> one set of overrides per point
schemagen     the editors' schema, written from the base schema and the op
              registry
============  =============================================================

It imports only :mod:`hetflow.engine.errors`, :mod:`hetflow.engine.adjacency`
and the executors' declarations (the op registry, dtypes, the emulator).
"""
