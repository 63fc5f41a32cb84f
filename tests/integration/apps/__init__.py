"""liqo.apps: the manager's and the virtual kubelet's processes as wired, their metrics and probes."""
