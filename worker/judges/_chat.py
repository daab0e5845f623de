"""Placeholder until the judges work lands (owned by the judges helper)."""


class ChatJudge:
    """Not implemented yet."""
