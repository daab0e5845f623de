"""Placeholder until its owner lands the real module (see the helper assignments)."""



class Entry:
    """Not implemented yet."""


class Evaluator:
    """Not implemented yet."""


class Limits:
    """Not implemented yet."""


class Report:
    """Not implemented yet."""


class RequestUsage:
    """Not implemented yet."""
