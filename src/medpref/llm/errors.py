"""Errors raised by the language-model layer."""


class LLMError(RuntimeError):
    """Base class."""


class CacheMissError(LLMError):
    """The replay backend was asked for a completion that is not in the cache."""


class BudgetExceededError(LLMError):
    """A stage would spend more than its budget; raised before the call is made."""


class BackendConfigError(LLMError):
    """A backend is misconfigured (unknown name, missing key variable, bad URL)."""


class BackendError(LLMError):
    """A backend answered in a way that cannot be used (e.g. no log-probs), or a call that
    has no recordable failure value failed after its retries."""
