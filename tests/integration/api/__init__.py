"""liqo.api against a real API server: the CRDs' schemas, served, defaulted and refusing bad objects."""
