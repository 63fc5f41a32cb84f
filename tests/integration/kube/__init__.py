"""liqo.kube, the controller runtime, against a real API server: informers, leader election, apply, the loop."""
