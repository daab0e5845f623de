"""Placeholder until its owner lands the real module (see the helper assignments)."""



class Case:
    """Not implemented yet."""


class DatasetLatency:
    """Not implemented yet."""


class DatasetReport:
    """Not implemented yet."""


class DatasetRow:
    """Not implemented yet."""


class DatasetUsage:
    """Not implemented yet."""


class Expected:
    """Not implemented yet."""


class Summary:
    """Not implemented yet."""


class run_dataset:
    """Not implemented yet."""
