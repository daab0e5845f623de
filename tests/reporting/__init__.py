"""Acceptance and unit tests of ``evalq status`` and ``evalq report`` (issue 5)."""
