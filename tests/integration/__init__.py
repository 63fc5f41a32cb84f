"""Integration tests against real local clusters, one package per capability of ``src/liqo`` (docs/testing.md)."""
