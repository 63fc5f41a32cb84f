"""Local clusters for tests and demos (``liqoctl local``), and how liqo is launched on them.

Processes on this machine, real nodes in network namespaces, the image they hold; :mod:`.launch` hands an
install the way liqo runs on one. Named so that no one takes it for "this cluster": the product itself
never imports it (import-linter).
"""
