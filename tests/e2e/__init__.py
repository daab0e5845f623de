"""End-to-end acceptance tests of the producer (issue 4): CLI, Redis, real workers, a store."""
