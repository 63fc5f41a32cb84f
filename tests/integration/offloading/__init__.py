"""liqo.offloading: namespaces offloaded to twins, ShadowPods to pods within budgets, admission, faults."""
