"""Working modes: Autonomous (this cluster's scheduler decides) or Tethered (one peer's does), switched live.

``plan`` decides the switch one step at a time from what the cluster shows (pure); the controller takes each
step. The peer's side of a tether (accepting it, marking the tethered cluster's virtual node, sending pods
back to it) is sharing's and offloading's, each reading the words of :mod:`liqo.api.workingmodes`.
"""
