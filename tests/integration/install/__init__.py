"""liqo.install: the chart against the Python rendering, liqo as pods from its image, the manager's rights."""
