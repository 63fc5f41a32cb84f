"""liqo's tests: ``unit`` (pure, no cluster) and ``integration`` (real local clusters); docs/testing.md."""
