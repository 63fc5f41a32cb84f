"""Pure translations between home objects and what a provider gets or reports (no I/O), one module per resource.

As in Liqo's reflection, every transformation lives here so that it can be property-tested, and the
reflectors (:mod:`liqo.virtualkubelet.reflection`) only compare and apply. A new kind reflected is one module
here and one small reflector there.
"""
