"""The product install: the values and their rendering, the chart's generated half, plan → apply → launch."""
