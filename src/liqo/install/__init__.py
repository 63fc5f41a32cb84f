"""Installing liqo: the values and their rendering, the chart's generated half, the manager's bootstrap, launchers."""
