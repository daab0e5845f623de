"""Property-based tests over everything a user or a queue can hand us (issue 7, bad input)."""
