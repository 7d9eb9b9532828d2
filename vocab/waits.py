"""Why a queued (or admitted but not yet running) job is not running: the wait reasons, in the order people
check them. A plain enum, the one home of the reasons: admission's gates (jobs.scheduling.gates) return its
members, the planner's replay reads them, and jobs.choices.WaitReason (the Django choices of
``Job.wait_reason``) is built from its members, values and labels.

The members are strings (``StrEnum``): a member is equal to its stored value, so rows, events and JSON
carry the plain value."""

from __future__ import annotations

from enum import StrEnum


class WaitReason(StrEnum):
    """A wait reason: its stored value and the label a person reads."""

    label: str

    def __new__(cls, value: str, label: str) -> WaitReason:
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label
        return member

    QUOTA = "quota", "Team quota"
    BUDGET = "budget", "Monthly GPU-hour budget"
    CAPACITY = "capacity", "Capacity"
    RECLAIMING = "reclaiming", "Reclaiming borrowed GPUs"
    NEVER_FITS = "never_fits", "No node can ever hold it"
    #: No node of the fleet offers the job's resource class any more (a node's GPUs were carved differently).
    CLASS_GONE = "class_gone", "Its class is no longer offered"
    CUDA = "cuda", "CUDA version"
    CLUSTER = "cluster", "Cluster"
    #: The job is a task of an array whose per-task parallelism cap is reached.
    ARRAY = "array", "Array parallelism cap"
    #: A teammate who used less of the team's GPUs lately goes first (fair share among a team's members).
    MEMBER_SHARE = "member_share", "A teammate goes first"
