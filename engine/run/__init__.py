"""The run room: a ``Plan`` becomes Dask tasks, and they run, in process or on a cluster.

Its modules in the order data flows through them:

=============  ============================================================
module         what it does
=============  ============================================================
cancel         a run's cancellation, deadlines and wait threads
threads        how many partitions run at once, and the BLAS pools' sizes
events         the run's event stream
lowering       lower: the ``Plan`` -> one plain Dask graph
runtime        the executors' side of a task: partitions, exports, imports
phases         emulator phases in a run, in two rounds
inputs         arrays bound to ``input`` stages
execute        run: ``execute`` takes a ``Manifest`` and its ``Plan`` to a
               ``RunResult`` with its record written
clusterphases  emulator phases on a Dask cluster (the witness spread over
               workers)
malloc         glibc's malloc thresholds in the workers (Dask's nanny sets
               one that maps every array afresh)
workerside     what a cluster worker holds for a run
recovery       a lost worker's partitions, rerun from what survives
distributed    the run on a Dask cluster
clusters       which scheduler an API call uses, and the plan placed on it
=============  ============================================================

It imports the manifest, plan and store rooms and nothing later.
"""
