"""Reflection: what a virtual node keeps in step between an offloaded namespace and its twin on the provider.

:mod:`.manager` follows the twins and hands every reflector the informers it asks for; each other module is
one reflector: :mod:`.pods` (home pods → ShadowPods, status back), :mod:`.copies` (ConfigMaps, Secrets and
other kinds copied as they are), :mod:`.tokens` (home ServiceAccount tokens), :mod:`.events` (the provider's
Events about our pods). The translations themselves are pure, in :mod:`liqo.virtualkubelet.forge`.
"""
