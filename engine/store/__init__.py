"""The store room: what a run leaves on disk and who may write it.

Its modules in the order data flows through them:

============  =============================================================
module        what it does
============  =============================================================
records       record: ``runs/RUN_ID/record.json`` and the outputs, written
              atomically and durably
gitstate      the git state a record names, asked of git once per state
owner         which process owns a record, and whether it still lives
locks         file locks that die with their holder
runs          the runs folder: list, read, resume, the state of each record
cache         the partition cache: keys, hits, and what a plan forecasts
compare       two records side by side
============  =============================================================

It imports the manifest and plan rooms and nothing later.
"""
