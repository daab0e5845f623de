"""The result browser (``evalq ui``) end to end: a real server, a real store, real Chromium."""
