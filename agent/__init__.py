"""The node agent: reads every GPU and MIG device of a node through NVML and posts the readings to the portal.

It runs as a DaemonSet on GPU nodes (deploy/60-agent-daemonset.yaml) with the standard library and
nvidia-ml-py (``pynvml``) only: nothing in this package imports Django, so the agent starts in a second and
works on a node that has never seen the portal's settings. ``python -m agent --help`` lists its options.

- ``nvml``: one collection tick, NVML → plain dict samples in the ingest contract's shape.
- ``sender``: the bounded buffer, the backoff, and the HTTP POSTs to ``/api/v1/telemetry/samples/``.
- ``runner``: the loop that samples every ``--interval`` and flushes every ``--flush`` seconds.
- ``cli``: arguments and environment.
"""

AGENT_VERSION = "0.1.0"
AGENT_NAME = f"gpu-portal-agent/{AGENT_VERSION}"
