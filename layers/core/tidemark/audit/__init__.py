"""``tidemark audit``: prove an archive whole (see ``tidemark.audit.auditor``)."""

from tidemark.audit.auditor import Auditor, SourceProbe, SourceUnavailableError
from tidemark.audit.findings import AuditReport, Finding, PartitionSummary

__all__ = ["AuditReport", "Auditor", "Finding", "PartitionSummary", "SourceProbe", "SourceUnavailableError"]
