"""Namespace offloading: which namespaces extend to which providers, their twins there, and pod placement.

Consumer side: NamespaceOffloading → a NamespaceMap on each selected provider, and the pod webhook adding
the tolerations and affinity a namespace's strategy requires. Provider side: twin namespaces with the
consumer's rights in them, and ShadowPods turned into real pods.
"""
