"""The fault suite: kills, broker and store outages, judge faults, clock skew (issue 7)."""
