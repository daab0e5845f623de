"""Placeholder until the judges work lands (owned by the judges helper)."""


class SyntheticJudge:
    """Not implemented yet."""
