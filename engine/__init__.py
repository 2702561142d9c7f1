"""hetflow engine: manifest -> plan -> Dask -> run record.

A run is a chain of passes, each a function from one value to the next,
each in its own module; ``docs/concepts/passes.md`` is the same list with
what each pass checks and decides. The modules live in rooms, one
subpackage per stretch of the chain, each room importing only the rooms
above it in this table (a contract ``lint-imports`` checks in CI):

==================  ===================================================
room                what it holds
==================  ===================================================
``errors``,         the diagnostics every pass reports, the graph
``adjacency``,      structure the planner and validate share, and the
``heap``            GC's switches the passes and runs share
``manifest/``       load, resolve, expand, validate: a file -> ``Manifest``
``plan/``           graph, place, partition, bridge: ``Manifest`` -> ``Plan``
``store/``          records, runs, the cache, locks and owners
``run/``            lower and run, in process or on a Dask cluster
``batch/``          sweeps and schedules
``importers/``      models from other formats (ONNX) -> manifests
``report/``,        what a person reads: the HTML report, the Python
``results``,        results, the API that chains the passes, and the
``api``, ``cli/``   command line on top of it
==================  ===================================================

==========  ===================================================  ========================================
pass        function                                             takes -> returns
==========  ===================================================  ========================================
load        :func:`hetflow.engine.manifest.loader.load`          a file -> ``Document`` (the tree and
                                                                 where each value was written)
resolve     :func:`hetflow.engine.manifest.resolve.resolve`      ``Document``, overrides ->
                                                                 (resolved tree, problems)
expand      :func:`hetflow.engine.manifest.blocks.expand`        resolved tree, ``Document`` -> (tree of
                                                                 plain stages, their origins, problems)
validate    :func:`hetflow.engine.manifest.validate.validate`    resolved tree, ``Document``, problems
                                                                 -> ``Manifest``
graph       :func:`hetflow.engine.plan.planner.graph`            ``Manifest`` -> ``adjacency.Graph``
place       :func:`hetflow.engine.plan.planner.place`            graph, executors -> placed graph
partition   :func:`hetflow.engine.plan.planner.partition`        placed graph -> partitioned graph
bridge      :func:`hetflow.engine.plan.planner.bridge`           partitioned graph -> ``[Bridge]``
lower       :func:`hetflow.engine.run.lowering.lower`            ``Plan``, runtime -> ``TaskGraph``
run         :func:`hetflow.engine.run.execute.execute`           ``Manifest``, ``Plan`` -> ``RunResult``
record      :mod:`hetflow.engine.store.records`                  the record dict -> ``record.json``,
                                                                 written atomically
==========  ===================================================  ========================================

Resolve runs before validate: the schema checks the typed values that
``${name}`` references stand for, so it sees the tree after interpolation.
Validate begins with expand: ``defaults:`` and the uses of ``blocks:``
become plain stages (instance ids such as ``layers.3.q``), so every later
pass sees stages only.
A matrix point (:func:`hetflow.engine.manifest.matrix.expand` and
:func:`~hetflow.engine.manifest.matrix.select`) is one more set of overrides for
resolve. :func:`hetflow.engine.manifest.validate.compile_manifest` runs resolve
then validate. Between graph and place,
:func:`hetflow.engine.plan.planner.choose_executors` gives each declared
executor the first vendor of its list that the machine offers. The
planner's passes are functions of :mod:`hetflow.engine.plan.planner` named
after their step; their work lives in :mod:`~hetflow.engine.plan.plangraph`
(graph), :mod:`~hetflow.engine.plan.placement` and
:mod:`~hetflow.engine.plan.candidates` (place) and
:mod:`~hetflow.engine.plan.partitioning` (partition, bridge).
:func:`hetflow.engine.plan.planner.plan` runs graph, place, partition and
bridge and returns the :class:`~hetflow.engine.plan.plandata.Plan`, plain data
that ``hetflow plan`` prints and ``hetflow run`` executes. On a Dask
cluster :func:`hetflow.engine.run.clusters.plan_on` also places each executor
on a worker, and :class:`hetflow.engine.run.distributed.Cluster` runs the
lowered graph there. Emulator phases add their tasks to the graph in a
second round, once the guest's chunk count is known
(:class:`hetflow.engine.run.phases.PhaseRunner`). :mod:`hetflow.engine.api`
chains the passes for ``hetflow.validate``, ``plan`` and ``run``, and the
CLI calls those.

Examples
--------
The passes of ``examples/quickstart.yaml``, one by one:

>>> from importlib.resources import files
>>> from hetflow.engine.manifest import loader, resolve, validate
>>> from hetflow.engine.plan import planner
>>> from hetflow.engine.run import execute, lowering, runtime
>>> from hetflow.executors import probe
>>> doc = loader.load(files("hetflow.examples") / "quickstart.yaml")
>>> tree, problems = resolve.resolve(doc, {"batch": 8})
>>> m = validate.validate(tree, doc, problems)
>>> graph = planner.graph(m)
>>> executors = planner.choose_executors(m, probe)
>>> placed = planner.place(graph, executors, next(iter(m.executors)))
>>> parted = planner.partition(placed)
>>> [b.id for b in planner.bridge(parted)]
['x@accel', 'logits@host']
>>> p = planner.plan(m, probe)
>>> sorted(lowering.lower(p, runtime.LocalRuntime(p, execute.create_executors(p))).dsk)[:4]
['export:logits@host', 'export:x@accel', 'import:logits@host', 'import:x@accel']
"""
