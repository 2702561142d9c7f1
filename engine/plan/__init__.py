"""The plan room: a ``Manifest`` becomes a ``Plan``, plain data that ``hetflow plan`` prints and ``hetflow run`` executes.

Its modules in the order data flows through them:

============  =============================================================
module        what it does
============  =============================================================
costs         the cost model: per-op work, device profiles, links
candidates    where each stage may run and what each choice costs
placement     place: each stage on one executor
plangraph     graph: the manifest's stages and phases as a graph
partitioning  partition and bridge: per-executor partitions and the
              bridges between them
plandata      the ``Plan`` and its parts, plain data
planview      the plan as text and as Graphviz dot
planner       the passes in order: ``graph``, ``place``, ``partition``,
              ``bridge``, and ``plan`` that runs them
============  =============================================================

It imports the manifest room and nothing later.
"""
