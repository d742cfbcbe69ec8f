"""A typed client for memoryadmin, sync (`Client`) and async (`AsyncClient`), and tool
adapters for model APIs (`tools_for`, `dispatch`).

    from memoryadmin_client import Client

    with Client("http://127.0.0.1:8000", api_key, project="demo") as client:
        started = client.start_session_on_document(
            agent="support-bot",
            resource="notes",
            document_id="workshop",
            document={"title": "Workshop notes"},
            idempotency_key="topic/workshop/1",
        )
        recall = client.recall(started.session.session["id"], use=["notes"])

Every failure of the API raises `ApiError` with the status, the error code and
message of the server's error envelope. Requests answered 429 or 503 are retried
as `Retry-After` says.
"""

from memoryadmin_client._client import AsyncClient, Client, retry_delay
from memoryadmin_client._ops import (
    ApiError,
    CreatedSession,
    DocumentDeleted,
    EnsuredDocument,
    StartedSession,
    topic_session_key,
)
from memoryadmin_client._types import (
    AgentWrites,
    ApiKey,
    AuditEntry,
    AuditPage,
    Binding,
    Deployment,
    Document,
    DocumentEntry,
    DocumentPage,
    Environment,
    Event,
    EventPage,
    ImportedDocument,
    ImportReport,
    NewApiKey,
    Operation,
    OperationPage,
    Projection,
    Proposal,
    ProposalPage,
    ProposalState,
    Recall,
    RecallPage,
    RecallRecord,
    RestoreAsOf,
    RestoreAsOfItem,
    RevertItem,
    Session,
    SessionPage,
    SessionRevert,
    Source,
    ToolDefinition,
    Writer,
)
from memoryadmin_client.adapters import (
    AgentSession,
    AsyncAgentSession,
    ToolCall,
    adispatch,
    dispatch,
    tool_call_parse,
    tool_result_message,
    tools_for,
)

__all__ = [
    "AgentSession",
    "AgentWrites",
    "ApiError",
    "ApiKey",
    "AsyncAgentSession",
    "AsyncClient",
    "AuditEntry",
    "AuditPage",
    "Binding",
    "Client",
    "CreatedSession",
    "Deployment",
    "Document",
    "DocumentDeleted",
    "DocumentEntry",
    "DocumentPage",
    "EnsuredDocument",
    "Environment",
    "Event",
    "EventPage",
    "ImportReport",
    "ImportedDocument",
    "NewApiKey",
    "Operation",
    "OperationPage",
    "Projection",
    "Proposal",
    "ProposalPage",
    "ProposalState",
    "Recall",
    "RecallPage",
    "RecallRecord",
    "RestoreAsOf",
    "RestoreAsOfItem",
    "RevertItem",
    "Session",
    "SessionPage",
    "SessionRevert",
    "Source",
    "StartedSession",
    "ToolCall",
    "ToolDefinition",
    "Writer",
    "adispatch",
    "dispatch",
    "retry_delay",
    "tool_call_parse",
    "tool_result_message",
    "tools_for",
    "topic_session_key",
]
