"""Placeholder until the judges work lands (owned by the judges helper)."""


class SystemOneJudge:
    """Not implemented yet."""
