"""Errors a user can cause. The CLI turns them into one line on stderr and an exit code.

UsageError  -> exit 2: a bad flag value, config key or config.json field; the message names the field.
InfeasibleError -> exit 3: a memory budget no plan fits; the message names the smallest budget that works.
"""


class UsageError(ValueError):
    """Bad user input. ``field`` names the flag, config key or config.json field at fault."""

    exit_code = 2

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class InfeasibleError(RuntimeError):
    """No plan fits the budget. ``minimum_bytes`` is the smallest budget that works (None if none does)."""

    exit_code = 3

    def __init__(self, message: str, minimum_bytes: int | None = None):
        self.minimum_bytes = minimum_bytes
        super().__init__(message)
