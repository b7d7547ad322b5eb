"""``tidemark audit``: prove an archive whole (see ``tidemark.audit.auditor``)."""

from tidemark.audit.auditor import Auditor, SourceProbe
from tidemark.audit.findings import AuditReport, Finding, PartitionSummary, Unchecked
from tidemark.exceptions import SourceUnavailableError

__all__ = [
    "AuditReport",
    "Auditor",
    "Finding",
    "PartitionSummary",
    "SourceProbe",
    "SourceUnavailableError",
    "Unchecked",
]
