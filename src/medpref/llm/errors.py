"""Errors raised by the language-model layer."""


class LLMError(RuntimeError):
    """Base class."""


class CacheMissError(LLMError):
    """The replay backend was asked for a completion that is not in the cache."""


class BudgetExceededError(LLMError):
    """A stage would spend more than its budget; raised before the call is made."""


class BackendConfigError(LLMError):
    """A backend is misconfigured (unknown name, missing key variable, bad URL)."""
