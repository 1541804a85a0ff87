"""The governance admin: tools, transcripts, the audit, approvals, runs, MCP servers: a module each.

Django's admin autodiscovery imports this package; each module registers its admin.
"""

from tool_calling.admin.approvals import ApprovalQueueAdmin
from tool_calling.admin.conversations import ConversationAdmin
from tool_calling.admin.executions import ToolExecutionAdmin
from tool_calling.admin.mcp import McpServerAdmin, McpServerToolAdmin
from tool_calling.admin.policies import DecisionPolicyAdmin, StandingDecisionAdmin
from tool_calling.admin.runs import RunAdmin, RunEventInline
from tool_calling.admin.tools import ToolAdmin, ToolLimitOverrideInline

__all__ = [
    "ApprovalQueueAdmin",
    "ConversationAdmin",
    "DecisionPolicyAdmin",
    "McpServerAdmin",
    "McpServerToolAdmin",
    "RunAdmin",
    "RunEventInline",
    "StandingDecisionAdmin",
    "ToolAdmin",
    "ToolExecutionAdmin",
    "ToolLimitOverrideInline",
]
