"""The pure scheduling core: admission and placement over an in-memory snapshot. Plain Python, no Django, no I/O;
the job cycle (jobs.cycle.admit) and the planner's replay (planner.engine_replay) run the same code.

- ``snapshot``: the shared types (node, class, quota and job views, the snapshot, waits, decisions);
- ``decide``: one admission cycle — the queue's order, the gates, admitting what fits;
- ``gates``: one function per reason a job waits (the reasons: vocab.waits.WaitReason);
- ``placement``: the fragmentation-aware placement engine; ``engines``: one engine per resource class;
- ``dra``: a node's DRA devices as units (whole GPUs, static MIG, dynamic MIG through the GPUs' counters);
- ``tallies``: what the active jobs hold; ``gangs``: W ranks on W nodes, all or nothing; ``reclaim``: which
  borrowed jobs to stop for a job within its guarantee; ``node_trust``: the nodes kept off, in a wait's words;
  ``clusters``: per-cluster quota caps and why a job waits on each cluster it may use.
"""
