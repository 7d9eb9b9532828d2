"""The jobs app's models, a module per topic; Django finds them through this package."""

from jobs.models.checkpoint import JobCheckpointToken
from jobs.models.job import (
    AdmissionLock,
    FairShare,
    Job,
    JobArray,
    JobEvent,
    JobLog,
    MemberShare,
    Notebook,
    NotebookPolicy,
    Quota,
    QuotaClusterCap,
    TeamPreemption,
    WorkspaceTicket,
)
from jobs.models.service import InferenceService
from jobs.models.team import (
    Dataset,
    RegistryCredential,
    TeamPresence,
    TeamSecret,
    TeamVolume,
    WorkloadTemplate,
    WorkloadTemplateVersion,
)

__all__ = [
    "AdmissionLock",
    "Dataset",
    "FairShare",
    "InferenceService",
    "Job",
    "JobArray",
    "JobCheckpointToken",
    "JobEvent",
    "JobLog",
    "MemberShare",
    "TeamPreemption",
    "Notebook",
    "NotebookPolicy",
    "Quota",
    "QuotaClusterCap",
    "RegistryCredential",
    "TeamPresence",
    "TeamSecret",
    "TeamVolume",
    "WorkloadTemplate",
    "WorkloadTemplateVersion",
    "WorkspaceTicket",
]
