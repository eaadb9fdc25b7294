"""Errors raised by the language-model layer."""


class LLMError(RuntimeError):
    """Base class."""


class CacheMissError(LLMError):
    """The replay backend was asked for a completion that is not in the cache."""


class BudgetExceededError(LLMError):
    """A stage would spend more than its budget; raised before the call is made."""


class BackendConfigError(LLMError):
    """A backend is misconfigured (unknown name, missing key variable, bad URL)."""


class UnpricedModelError(BackendConfigError):
    """A paid server would be called for a model that has no price: the budget guard
    could not count what it spends."""


class AuthenticationError(LLMError):
    """A server refused the credentials (HTTP 401/403). Never retried: the run stops at
    once. The message names the role and the server; the key is redacted."""


class BackendError(LLMError):
    """A backend answered in a way that cannot be used (e.g. no log-probs), or a call that
    has no recordable failure value failed after its retries."""


#: errors after which a stage must stop at once (no further calls can succeed)
FATAL_ERRORS = (AuthenticationError, BudgetExceededError, UnpricedModelError)
