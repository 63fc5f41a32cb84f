"""liqo.cli: liqoctl as users run it, a subprocess per command, against clusters with liqo installed."""
