"""Errors a user can cause. The CLI turns them into one line on stderr and an exit code.

UsageError  -> exit 2: a bad flag value, config key or config.json field; the message names the field.
InfeasibleError -> exit 3: a memory budget no plan fits; the message names the smallest budget that works.
RecomputeError: a recompute policy met a model it cannot recompute correctly (a kept tensor modified in place,
parameters changed between forward and backward, a forward that runs differently in backward); raised in the
step instead of a silently different gradient. The message names the block, the op or the tensor, and the fix.
"""


class UsageError(ValueError):
    """Bad user input. ``field`` names the flag, config key or config.json field at fault."""

    exit_code = 2

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class InfeasibleError(RuntimeError):
    """No plan fits the budget. ``minimum_bytes`` is the smallest budget that works (None if none does);
    ``problem``: the planning problem that had no fitting plan, when the raiser has it (what would fit is
    computed from it: remat.cli.plan_run)."""

    exit_code = 3

    def __init__(self, message: str, minimum_bytes: int | None = None, problem=None):
        self.minimum_bytes = minimum_bytes
        self.problem = problem
        super().__init__(message)


class RecomputeError(RuntimeError):
    """Recompute would change the result (module docstring). ``block``: the block's qualified name ("" unknown);
    ``detail``: the message without it."""

    def __init__(self, block: str, message: str):
        self.block, self.detail = block, message
        super().__init__(f"{block}: {message}" if block else message)
