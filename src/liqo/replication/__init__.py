"""Replication of liqo resources between a consumer and its providers."""
