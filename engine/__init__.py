"""hetflow engine: manifest -> plan -> Dask -> run record.

A run is a chain of passes, each a function from one value to the next,
each in its own module; ``docs/concepts/passes.md`` is the same list with
what each pass checks and decides.

============  ==================================================  =====================================
pass          function                                            takes -> returns
============  ==================================================  =====================================
load          :func:`hetflow.engine.loader.load`                  a file -> ``Document`` (the tree and
                                                                  where each value was written)
resolve       :func:`hetflow.engine.resolve.resolve`              ``Document``, overrides ->
                                                                  (resolved tree, problems)
expand        :func:`hetflow.engine.blocks.expand`                resolved tree, ``Document`` -> (tree of
                                                                  plain stages, their origins, problems)
validate      :func:`hetflow.engine.manifest.validate`            resolved tree, ``Document``, problems
                                                                  -> ``Manifest``
graph         :func:`hetflow.engine.planner.graph`                ``Manifest`` -> ``adjacency.Graph``
place         :func:`hetflow.engine.planner.place`                graph, executors -> placed graph
partition     :func:`hetflow.engine.planner.partition`            placed graph -> partitioned graph
bridge        :func:`hetflow.engine.planner.bridge`               partitioned graph -> ``[Bridge]``
lower         :func:`hetflow.engine.lowering.lower`               ``Plan``, runtime -> ``TaskGraph``
run           :func:`hetflow.engine.run.execute`                  ``Manifest``, ``Plan`` -> ``RunResult``
record        :mod:`hetflow.engine.records`                       the record dict -> ``record.json``,
                                                                  written atomically
============  ==================================================  =====================================

Resolve runs before validate: the schema checks the typed values that
``${name}`` references stand for, so it sees the tree after interpolation.
Validate begins with expand: ``defaults:`` and the uses of ``blocks:``
become plain stages (instance ids such as ``layers.3.q``), so every later
pass sees stages only.
A matrix point (:func:`hetflow.engine.matrix.expand` and
:func:`~hetflow.engine.matrix.select`) is one more set of overrides for
resolve. :func:`hetflow.engine.manifest.compile_manifest` runs resolve
then validate. Between graph and place,
:func:`hetflow.engine.planner.choose_executors` gives each declared
executor the first vendor of its list that the machine offers. The
planner's passes are functions of :mod:`hetflow.engine.planner` named
after their step; their work lives in :mod:`~hetflow.engine.plangraph`
(graph), :mod:`~hetflow.engine.placement` and
:mod:`~hetflow.engine.candidates` (place) and
:mod:`~hetflow.engine.partitioning` (partition, bridge).
:func:`hetflow.engine.planner.plan` runs graph, place, partition and
bridge and returns the :class:`~hetflow.engine.plandata.Plan`, plain data
that ``hetflow plan`` prints and ``hetflow run`` executes. On a Dask
cluster :func:`hetflow.engine.clusters.plan_on` also places each executor
on a worker, and :class:`hetflow.engine.distributed.Cluster` runs the
lowered graph there. Emulator phases add their tasks to the graph in a
second round, once the guest's chunk count is known
(:class:`hetflow.engine.phases.PhaseRunner`). :mod:`hetflow.engine.api`
chains the passes for ``hetflow.validate``, ``plan`` and ``run``, and the
CLI calls those.

Examples
--------
The passes of ``examples/quickstart.yaml``, one by one:

>>> from importlib.resources import files
>>> from hetflow.engine import loader, resolve, manifest, planner, lowering, run, runtime
>>> from hetflow.executors import probe
>>> doc = loader.load(files("hetflow.examples") / "quickstart.yaml")
>>> tree, problems = resolve.resolve(doc, {"batch": 8})
>>> m = manifest.validate(tree, doc, problems)
>>> graph = planner.graph(m)
>>> executors = planner.choose_executors(m, probe)
>>> placed = planner.place(graph, executors, next(iter(m.executors)))
>>> parted = planner.partition(placed)
>>> [b.id for b in planner.bridge(parted)]
['x@accel', 'logits@host']
>>> p = planner.plan(m, probe)
>>> sorted(lowering.lower(p, runtime.LocalRuntime(p, run.create_executors(p))).dsk)[:4]
['export:logits@host', 'export:x@accel', 'import:logits@host', 'import:x@accel']
"""
