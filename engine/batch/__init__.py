"""The batch room: runs that nobody starts by hand: sweeps and schedules.

Its modules in the order data flows through them:

==========  ===============================================================
module      what it does
==========  ===============================================================
sweeps      a ``matrix:`` run: one run per point, ``--parallel`` at once
claims      one fire of a schedule, claimed by exactly one process
schedule    ``schedule run``: the fires due, catch-up and hooks
serve       ``schedule serve``: the long-lived loop around ``schedule``
==========  ===============================================================

It imports the rooms before it (manifest, plan, store, run) and nothing later.
"""
