"""Security: secrets and evaluated content stay where they belong; injection changes nothing."""
