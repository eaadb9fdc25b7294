"""Language-model layer: one interface, several backends, a cache and a ledger."""

from medpref.llm.client import LLMClient, complete_across
from medpref.llm.errors import BackendConfigError, BudgetExceededError, CacheMissError
from medpref.llm.session import LLMSession, register_backend
from medpref.llm.types import (
    CallSpec,
    ChatRequest,
    Completion,
    GenerationParams,
    Message,
    OptionScores,
)

__all__ = ["BackendConfigError", "BudgetExceededError", "CacheMissError", "CallSpec",
           "ChatRequest", "Completion", "GenerationParams", "LLMClient", "LLMSession",
           "Message", "OptionScores", "complete_across", "register_backend"]
